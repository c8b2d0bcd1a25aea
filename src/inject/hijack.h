/* hijack.h - redirects one thread of a target into the stub, with the one
 * short tracer stop the design needs: seize the thread alone, interrupt it
 * in its idle system call (or catch it entering one), check the spot, put
 * the stub's block on its stack and the stub in the cave, point its
 * registers at the stub, block its signals, and detach at once. Nothing
 * after that needs the tracer: if we die, the stub finishes on its own.
 * Every other thread runs on throughout. */
#ifndef NP_INJECT_HIJACK_H
#define NP_INJECT_HIJACK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "inject/stub_abi.h"
#include "inject/target.h"
#include "inject/threads.h"

/* What every hijack attempt of one injection shares. */
struct np_inj_plan {
    const struct np_inj_target *t;
    struct np_stub_block proto; /* mode, functions, names, timeout, nonce, xsave mask */
    size_t xsave_size;
    size_t min_room; /* stack the stub may use below its block */
};

/* Bytes of the block on the target's stack (struct, xsave area, frame). */
size_t np_inj_block_size(const struct np_inj_plan *plan);

/* What the hijack did. */
struct np_inj_hijacked {
    pid_t tid;
    long nr;          /* the system call the thread was in */
    int64_t ret;      /* its result at the stop (e.g. -ERESTARTSYS) */
    uint32_t resume;  /* enum np_stub_resume */
    uint64_t block;   /* the block's address in the target */
    uint64_t stop_ns; /* PTRACE_INTERRUPT (or the catching stop) to PTRACE_DETACH */
};

/* Hijacks candidate c: interrupts it in its idle system call; if it is no
 * longer at a safe spot, follows its system calls (PTRACE_SYSCALL) until it
 * enters a safe one or until catch_until (monotonic ns). 0: the thread runs
 * the stub (*out filled). -EAGAIN: not caught; the thread was left exactly
 * as it was. -EPERM: ptrace refused. -ESRCH: the thread is gone. */
int np_inj_hijack(const struct np_inj_plan *plan, const struct np_inj_candidate *c,
                  uint64_t catch_until, struct np_inj_hijacked *out);

#endif
