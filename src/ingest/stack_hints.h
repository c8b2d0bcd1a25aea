/* stack_hints.h - how much user stack BPF copies at each launch. A worker
 * thread's stack mapping ends kilobytes above its outermost frame (its TLS
 * and thread descriptor live there), so with only the mapping's end as a
 * bound BPF copies all of --stack-bytes (16 KiB) where unwinding needs a few
 * hundred bytes: most of the probe's time. The reader learns, per thread and
 * stack mapping, how much of the top of the stack unwinding never reached,
 * and BPF leaves that out: every launch copies from sp to just above the
 * outermost frame, however deep the stack is at that launch. A hinted copy
 * that still left unwinding short drops the hint until it is learned anew. */
#ifndef NP_INGEST_STACK_HINTS_H
#define NP_INGEST_STACK_HINTS_H

#include <stdint.h>

#include "lib/hashmap.h"
#include "ncclprobe/events.h"
#include "unwind/unwind.h"

struct np_stack_hints {
    int fd;                /* BPF's stack_hints map; -1: none, nothing is learned */
    volatile __u32 *gen;   /* BPF's hints_gen, bumped after each change (threads keep their
                              entry until it moves); NULL: none */
    struct np_map learned; /* hash of the key -> struct learned_hint * */
};

void np_stack_hints_init(struct np_stack_hints *h);
void np_stack_hints_free(struct np_stack_hints *h);

/* The unwinding of e's copied stack came out as r: what its thread's stack
 * top holds above the outermost frame is learned (the least seen), or the
 * hint dropped when a copy cut by it left unwinding short. */
void np_stack_hints_learn(struct np_stack_hints *h, const struct np_launch_event *e,
                          const struct np_unwind_result *r);

#endif
