/* trace_cli.c - test driver for the trace.json writer alone, on
 * directories the tests make by hand: "trace_cli DIR" runs
 * np_write_trace_json(DIR), with every message (debug ones too), and exits
 * 0, or 1 with the error. */
#include <stdio.h>
#include <string.h>

#include "lib/util.h"
#include "writers/perfetto.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: trace_cli DIR\n");
        return 2;
    }
    np_log_set_level(NP_LOG_DEBUG);
    int err = np_write_trace_json(argv[1]);
    if (err) {
        fprintf(stderr, "np_write_trace_json: %s\n", strerror(-err));
        return 1;
    }
    return 0;
}
