/* pprof_cli.c - a test driver for the pprof writer (src/writers/pprof.c):
 * `pprof_cli DIR` writes DIR/profile.pb.gz from the directory DIR, for
 * tests/test_pprof.py's hand-made directories (recordings have the one
 * `record` wrote). Exits 0, or 1 with the error said. */
#include <stdio.h>
#include <string.h>

#include "lib/util.h"
#include "writers/pprof.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s RECORDING_DIR\n", argv[0]);
        return 2;
    }
    int err = np_write_pprof(argv[1]);
    if (err) {
        fprintf(stderr, "pprof_cli: %s\n", strerror(-err));
        return 1;
    }
    return 0;
}
