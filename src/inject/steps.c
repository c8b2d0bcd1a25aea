/* steps.c - waiting between the injector's steps, and the test fault
 * points (see steps.h). */
#define _GNU_SOURCE
#include "inject/steps.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util.h"

#define SPIN_NS 200000ULL /* sched_yield this long before sleeping */

void np_inj_sleep_us(unsigned us) {
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void np_inj_backoff(uint64_t start_ns, unsigned *sleep_us) {
    if (np_monotonic_ns() - start_ns < SPIN_NS) {
        sched_yield();
        return;
    }
    if (*sleep_us < 20)
        *sleep_us = 20;
    np_inj_sleep_us(*sleep_us);
    if (*sleep_us < 200)
        *sleep_us *= 2;
}

void np_inj_fault(const char *step) {
    const char *want = getenv("NP_INJECT_FAULT");

    if (want && strcmp(want, step) == 0) {
        np_debug("inject: fault point %s: SIGKILL", step);
        raise(SIGKILL);
    }
}
