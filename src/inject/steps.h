/* steps.h - how the injector goes from one step to the next: waiting for
 * the other side (the hijacked thread stopping, the stub publishing its
 * fds) without burning a CPU the target needs, and the test-only fault
 * point at each named step, where the tests kill the injector as an
 * operator's kill -9 or the OOM killer would (docs/inject.md, "Kill
 * points"). */
#ifndef NP_INJECT_STEPS_H
#define NP_INJECT_STEPS_H

#include <stdint.h>

/* Sleeps us microseconds (the whole time, across signals). */
void np_inj_sleep_us(unsigned us);

/* One round of waiting that began at start_ns (CLOCK_MONOTONIC): a
 * sched_yield for the first 0.2 ms (what we wait for usually comes within
 * microseconds, and a paused target thread waits with us), then sleeps
 * growing from 20 us to 320 us; *sleep_us carries the step (start at 0). */
void np_inj_backoff(uint64_t start_ns, unsigned *sleep_us);

/* Test-only fault point: when the environment variable NP_INJECT_FAULT
 * names this step, the calling process kills itself with SIGKILL. Does
 * nothing otherwise. */
void np_inj_fault(const char *step);

#endif
