/* occurrence.h - the occurrences of a function in a recording, for
 * `ncclprobe report --function NAME [--index I]`: the runs of a thread's
 * consecutive launches made from inside one call of NAME, and the time
 * window each covers. */
#ifndef NP_REPORT_OCCURRENCE_H
#define NP_REPORT_OCCURRENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "report/load.h"

struct np_occurrence {
    const char *frame; /* the frame NAME matched, in the first launch's stack */
    uint32_t pid, tid;
    uint64_t start_ns; /* the first launch's ts_ns */
    uint64_t end_ns;   /* past the last launch's ts_ns and the end of its GPU work */
    size_t launches;
};

struct np_occurrences {
    struct np_occurrence *items; /* by start_ns, then pid, tid */
    size_t n, cap;
    bool ambiguous; /* NAME matched frames of different functions */
};

void np_occurrences_free(struct np_occurrences *o);

/* Finds every occurrence of NAME (frames.h: np_frame_matches): 0 or -ENOMEM.
 * An occurrence is a maximal run of consecutive launches of one thread (by
 * ts_ns) whose stacks hold a frame NAME matches, with the same frames from the
 * root down to it (the outermost such frame; itself compared without its line).
 * A graph launch's stacks include those that captured what it ran. */
int np_find_occurrences(const struct np_rep_input *in, const char *name,
                        struct np_occurrences *out);

#endif
