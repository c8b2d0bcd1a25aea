/* match.h - the pairing step of `ncclprobe merge`: pairs CPU launches (from
 * stacks.ext.folded) with the runtime API events of a GPU trace by time:
 * one-to-one, per thread, nearest first, within a tolerance. Pure: numbers
 * in, indices out (docs/merge.md).
 *
 * Per thread: a CPU launch of thread (pid, tid) only takes events recorded on
 * that same (pid, tid), when the trace has any for it. The trace may see other
 * ids than the host does (a container's pid namespace): events of threads no
 * CPU launch has form a shared pool, which CPU launches of threads without
 * events of their own draw from - still one-to-one, nearest first.
 *
 * Within a thread (or the pool), pairs are made closest first: the pair
 * (CPU launch, event) with the smallest time gap of all, then the closest
 * pair among those left, and so on while the gap is strictly under the
 * tolerance (on equal gaps, the earlier pair first). Taking CPU launches in
 * time order instead would let a launch whose event is missing (the trace
 * started late, CUPTI dropped a record) take its neighbour's event, and that
 * neighbour the next one's: a whole burst shifted by one. O(n log n): the
 * closest pair left is always adjacent in time order, so a heap of adjacent
 * pairs is enough. */
#ifndef NP_MERGE_MATCH_H
#define NP_MERGE_MATCH_H

#include <stddef.h>
#include <stdint.h>

/* cpu_to_event[i] of a CPU launch that took no event. */
#define NP_MATCH_NONE SIZE_MAX

/* The thread of an event that names none: no CPU launch has it, so the event
 * goes to the shared pool. (pid, tid) keys are below it: ids are < 2^31. */
#define NP_MATCH_NO_THREAD UINT64_MAX

/* A launch (CPU side) or a runtime API call (GPU side) on a thread. */
struct np_match_point {
    int64_t ts_ns; /* >= 0 */
    uint64_t thread;
};

uint64_t np_match_thread_key(uint32_t pid, uint32_t tid);

/* Fills cpu_to_event[0..ncpu) with the index into events of the event each
 * CPU launch is paired with, or NP_MATCH_NONE. No event is given to two CPU
 * launches. tolerance_ns > 0. Returns 0 or -ENOMEM. */
int np_match_launches(const struct np_match_point *cpu, size_t ncpu,
                      const struct np_match_point *events, size_t nevents, int64_t tolerance_ns,
                      size_t *cpu_to_event);

#endif
