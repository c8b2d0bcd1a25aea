/* Small helpers shared by the ncclprobe test programs: frame-keeping macros, thread ids,
 * the "ready <pid>" / SIGUSR1 start handshake and strict number parsing. */
#ifndef NCCLPROBE_PROGS_COMMON_H
#define NCCLPROBE_PROGS_COMMON_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Every function of an asserted call chain is NOINLINE, and every call to the next link is
 * followed by KEEP_FRAME() so the compiler cannot turn it into a tail call (a `jmp` would drop
 * the caller's frame from the recorded stack). */
#define NOINLINE __attribute__((noinline))
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

/* Exit codes shared by all programs. */
enum {
    PROGS_EXIT_OK = 0,
    PROGS_EXIT_USAGE = 2,
    PROGS_EXIT_UNAVAILABLE = 3, /* a requested variant was not built (e.g. no nvcc) */
    PROGS_EXIT_RUNTIME = 4,     /* dlopen/dlsym or thread creation failed */
};

static inline long progs_gettid(void) {
    return (long)syscall(SYS_gettid);
}

/* Parses a decimal integer >= min for option `opt`; exits with a usage error otherwise. */
static inline long progs_parse_long(const char *opt, const char *text, long min) {
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min) {
        fprintf(stderr, "%s: expected an integer >= %ld, got '%s'\n", opt, min, text);
        exit(PROGS_EXIT_USAGE);
    }
    return value;
}

/* Blocks SIGUSR1 in the calling thread; threads created afterwards inherit the mask, so the
 * signal stays pending until progs_wait_start_signal() collects it with sigwait(). */
static inline void progs_block_start_signal(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Prints "ready <pid>" (flushed) so a test knows the process is up and can attach. */
static inline void progs_announce_ready(void) {
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
}

/* Waits for SIGUSR1; the signal must have been blocked with progs_block_start_signal(). */
static inline void progs_wait_start_signal(void) {
    sigset_t set;
    int sig = 0;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    while (sigwait(&set, &sig) != 0 || sig != SIGUSR1) {
    }
}

static inline void progs_sleep_us(long us) {
    if (us <= 0)
        return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Sleeps the milliseconds environment variable `name` says, if set: a test double made slow
 * on purpose (CUPTI_REPLAY_*_DELAY_MS, FAKECUDA_NAME_DELAY_MS). */
static inline void progs_sleep_env_ms(const char *name) {
    const char *env = getenv(name);
    progs_sleep_us(env ? strtol(env, NULL, 10) * 1000 : 0);
}

#endif
