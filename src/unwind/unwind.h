/* unwind.h - DWARF CFI unwinding of a launch's copied user stack.
 *
 * BPF copies the registers and the top of the user stack at the probe; this
 * walks it with the call-frame information (.eh_frame, .debug_frame) of every
 * module, through code built without frame pointers. libdw parses the CFI;
 * each PC's rule (CFA = rsp|rbp + offset, where the return address and rbp
 * are saved) is derived once and cached, so an event costs a hash lookup and
 * two loads per frame. Code without CFI (JIT) falls back to the frame-pointer
 * chain in auto mode. */
#ifndef NP_UNWIND_H
#define NP_UNWIND_H

#include <stdbool.h>
#include <stdint.h>

#include "ncclprobe/events.h"

#define NP_UNWIND_MAX_FRAMES 512

struct np_symbolizer;
struct np_unwinder;

enum np_unwind_end {
    NP_UNWIND_COMPLETE,  /* reached the outermost frame (_start, thread start) */
    NP_UNWIND_TRUNCATED, /* ran out of copied stack bytes (or frames) */
    NP_UNWIND_UNKNOWN,   /* reached code it could not unwind */
};

struct np_unwind_result {
    uint64_t pcs[NP_UNWIND_MAX_FRAMES]; /* pcs[0]: the probed function; then return addresses */
    uint32_t n;
    enum np_unwind_end end;
    uint32_t bytes_used;   /* stack bytes from sp up to the last frame's CFA */
    uint32_t fp_fallbacks; /* frames unwound by frame pointer for lack of CFI */
};

/* The unwinder of one process; it uses (does not own) the symbolizer's Dwfl. */
struct np_unwinder *np_unwinder_new(struct np_symbolizer *sym);
void np_unwinder_free(struct np_unwinder *u);

/* Unwinds e's copied stack. fp_fallback: follow rbp where CFI is missing. */
void np_unwind(struct np_unwinder *u, const struct np_launch_event *e, bool fp_fallback,
               struct np_unwind_result *out);

#endif
