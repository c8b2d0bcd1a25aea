/* folded_fuzz.c - the extended folded stacks reader (src/recording/
 * ext_folded.c) as `ncclprobe merge --cpu` uses it (src/merge/cpu_input.c).
 * Contract: a malformed line is counted and said, never a crash; every line
 * np_ext_next hands on has its fields set, or an error. */
#include <errno.h>

#include "fuzz.h"
#include "merge/cpu_input.h"
#include "recording/ext_folded.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("stacks.ext.folded", data, size);

    struct np_ext_reader r = {0};
    FUZZ_CHECK(np_ext_open(&r, path) == 0);
    struct np_ext_line line;
    int rc;
    long last = 0;
    while ((rc = np_ext_next(&r, &line)) == 1) {
        FUZZ_CHECK(line.line_no > last);
        last = line.line_no;
        if (!line.error)
            FUZZ_CHECK(line.comm && line.stack && line.ts_ns >= 0);
    }
    FUZZ_CHECK(rc == 0);
    np_ext_close(&r);

    struct np_merge_cpu cpu;
    np_merge_cpu_init(&cpu, path);
    rc = np_merge_cpu_read(path, &cpu);
    FUZZ_CHECK(rc == 0 || rc == -ENOMEM || rc == -EBADMSG || rc == -EINVAL);
    np_merge_cpu_free(&cpu);
    return 0;
}
