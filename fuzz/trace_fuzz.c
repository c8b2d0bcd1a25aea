/* trace_fuzz.c - Chrome trace JSON (nsys/CUPTI exports) as `ncclprobe merge
 * --gpu` reads it: the streaming element reader (src/merge/trace_json.c) and
 * the GPU input built from it (src/merge/gpu_input.c). Contract: an element
 * that is not an event object has its reason; counts add up. */
#include <errno.h>

#include "fuzz.h"
#include "merge/gpu_input.h"
#include "merge/trace_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("trace.json", data, size);

    struct np_trace_reader *r = NULL;
    FUZZ_CHECK(np_trace_open(path, &r) == 0);
    struct np_trace_event ev;
    int rc;
    while ((rc = np_trace_next(r, &ev)) == 1)
        FUZZ_CHECK(ev.json || ev.error);
    FUZZ_CHECK(rc <= 0);
    np_trace_close(r);

    struct np_merge_gpu gpu;
    np_merge_gpu_init(&gpu, path);
    rc = np_merge_gpu_read(path, &gpu);
    FUZZ_CHECK(rc <= 0);
    np_merge_gpu_free(&gpu);
    return 0;
}
