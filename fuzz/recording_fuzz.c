/* recording_fuzz.c - a recording directory as `ncclprobe report` loads it
 * (src/report/load.c over src/recording/): launches.jsonl, stacks.jsonl,
 * gpu_unmatched.jsonl, graph_replays.jsonl and summary.json, then the
 * report's counting over it.
 *
 * The input holds the files' contents one after the other, separated by NUL
 * bytes, in that order (a file missing when the input has fewer parts).
 * Contract: 0, or an error said with file and line; what loaded counts
 * without a crash. */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "report/load.h"
#include "report/report.h"

static const char *const files[] = {"launches.jsonl", "stacks.jsonl", "gpu_unmatched.jsonl",
                                    "graph_replays.jsonl", "summary.json"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_clear_dir();
    size_t off = 0;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]) && off <= size; i++) {
        const uint8_t *end = memchr(data + off, 0, size - off);
        size_t len = end ? (size_t)(end - (data + off)) : size - off;
        fuzz_file(files[i], data + off, len);
        off += len + 1;
    }

    struct np_rep_input in;
    int rc = np_rep_input_load(&in, fuzz_dir());
    if (rc == 0) {
        struct np_report_filter f = {.kernel = "", .end_ns = UINT64_MAX};
        for (int source = NP_REPORT_LAUNCHES; source <= NP_REPORT_GRAPH_REPLAYS; source++) {
            struct np_report rep;
            np_report_init(&rep);
            FUZZ_CHECK(np_report_collect(&rep, &in, &f, source) == 0);
            np_report_free(&rep);
        }
        struct np_counts counts;
        np_counts_init(&counts);
        FUZZ_CHECK(np_report_nccl_seen(&in, &counts) == 0);
        np_counts_free(&counts);
    }
    np_rep_input_free(&in);
    return 0;
}
