/* flame_cli.c - test driver for the flame graph writer on hand-made
 * directories: "flame_cli write-dir DIR" runs np_write_flamegraphs and exits
 * 0, or 1 with the error ("flame_cli flamegraph ARGS..." runs the command's
 * code, as `ncclprobe flamegraph` does). */
#include <stdio.h>
#include <string.h>

#include "cli/flamegraph.h"
#include "writers/flamegraph.h"

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "flamegraph") == 0)
        return np_cmd_flamegraph(argc - 1, argv + 1);
    if (argc == 3 && strcmp(argv[1], "write-dir") == 0) {
        int err = np_write_flamegraphs(argv[2]);
        if (err) {
            fprintf(stderr, "np_write_flamegraphs: %s\n", strerror(-err));
            return 1;
        }
        return 0;
    }
    fprintf(stderr, "usage: flame_cli flamegraph ARGS... | flame_cli write-dir DIR\n");
    return 2;
}
