/* inject_target.c - the C program tests/test_inject.py injects into. Every
 * thread does one thing over and over and checks everything an injection
 * could break:
 *
 *   compute xN   np_rc_work calls with known rbx, rbp, r12-r15, ymm0-15,
 *                MXCSR around them; the results checked
 *   futex        raw FUTEX_WAIT (no timeout) woken every 2 ms
 *   futex_timed  raw FUTEX_WAIT with a 30 ms relative timeout nobody wakes:
 *                must time out, never early (restart-block path)
 *   cond         pthread_cond_wait, signalled every 3 ms, sequence checked
 *   cond_timed   pthread_cond_timedwait 25 ms, never signalled, never early
 *   epoll        raw epoll_wait(-1) on an eventfd fed every 5 ms
 *   epoll_timed  raw epoll_wait(20 ms) on an eventfd fed every 50 ms
 *   pipe         raw read of 8-byte sequence numbers written every 1 ms
 *   nanosleep    raw nanosleep(10 ms): 0, never early, never EINTR
 *   clock_rel    raw clock_nanosleep(MONOTONIC, 15 ms relative)
 *   clock_abs    raw clock_nanosleep(MONOTONIC, TIMER_ABSTIME, +12 ms)
 *   poll_timed   raw poll(30 ms) on a pipe never written
 *   ppoll        raw ppoll with a temporary signal mask (its own mask checked)
 *   sig_intr     raw read; SIGUSR1 (handler without SA_RESTART) every 20 ms:
 *                EINTR only when the handler ran
 *   sig_restart  raw read; SIGUSR2 (SA_RESTART) every 20 ms: never EINTR
 *   mmapper      malloc/memset/free of 2 MiB blocks (mmap, munmap): busy
 *   main         read(stdin) until EOF, then stop, join and report
 *
 * Raw calls go through inject_regcheck.S: the kernel must preserve every register
 * but rax/rcx/r11, so a hijack that restores anything wrongly shows. errno
 * and the signal mask are checked around every call too.
 *
 *   inject_target [--compute N] [--mode full|busy|mmap] [--skip ROLE,ROLE] [--seccomp]
 *
 * busy: only compute threads, and main spinning with short sleeps (no thread
 * rests in a system call: the injector must catch one entering it).
 * mmap: only mmapper threads and main spinning until SIGTERM (no safe point
 * at all). --skip leaves roles out (strace and gdb make epoll_wait return
 * EINTR by themselves: signal(7)). Prints "READY pid", one "ROLE name tid" line per thread, and at
 * the end one line per role and "RESULT OK" (exit 0) or "RESULT FAIL". */
#include <errno.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ERRNO_MAGIC 1234567
#define MS 1000000LL

struct np_rc {
    uint8_t vec[16][32];
    int64_t nr;
    int64_t args[6];
    uint64_t magic[6];
    uint32_t bad;
    uint32_t df;
    uint32_t mxcsr;
    uint32_t avx;
    int64_t ret;
    uint32_t mode;
} __attribute__((aligned(32)));
_Static_assert(offsetof(struct np_rc, nr) == 512, "nr");
_Static_assert(offsetof(struct np_rc, magic) == 568, "magic");
_Static_assert(offsetof(struct np_rc, bad) == 616, "bad");
_Static_assert(offsetof(struct np_rc, ret) == 632, "ret");
_Static_assert(offsetof(struct np_rc, mode) == 640, "mode");

long np_rc_run(struct np_rc *c);

struct role {
    const char *name;
    void *(*fn)(void *);
    pthread_t th;
    pid_t tid;
    bool feeder;
    sigset_t mask; /* the thread's own mask, checked after every call */
    uint64_t seed;
    _Atomic uint64_t iters;
    uint64_t errors;
    uint64_t max_late_ns;
    uint64_t eintr;
    char first_error[200];
};

static atomic_int stop, feeders_stop;
static bool have_avx;
static _Atomic uint32_t futex_word, futex_never;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER, cond_never = PTHREAD_COND_INITIALIZER;
static uint64_t cond_seq;
static int epoll_inf_fd, epoll_timed_fd, efd_inf, efd_timed;
static int pipe_seq[2], pipe_never[2], pipe_ppoll[2], pipe_intr[2], pipe_restart[2];
static _Atomic uint64_t handled_usr1;
static struct role *role_sig_intr, *role_sig_restart;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fail(struct role *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct role *r, const char *fmt, ...) {
    va_list ap;

    if (r->errors++ == 0) {
        va_start(ap, fmt);
        vsnprintf(r->first_error, sizeof(r->first_error), fmt, ap);
        va_end(ap);
        fprintf(stderr, "target: %s (tid %d): %s\n", r->name, (int)r->tid, r->first_error);
    }
}

static void rc_fill(struct role *r, struct np_rc *c) {
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 32; j += 8) {
            uint64_t v = rnd(&r->seed);
            memcpy(&c->vec[i][j], &v, 8);
        }
    for (int i = 0; i < 6; i++)
        c->magic[i] = rnd(&r->seed);
    /* default MXCSR with a random rounding mode and FTZ/DAZ */
    c->mxcsr = 0x1f80 | (uint32_t)(rnd(&r->seed) & 0x6000) | (rnd(&r->seed) & 1 ? 0x8040 : 0);
    c->df = rnd(&r->seed) & 1;
    c->avx = have_avx;
    c->mode = 0;
}

static void check_mask(struct role *r) {
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    for (int s = 1; s < 65; s++)
        if (sigismember(&cur, s) != sigismember(&r->mask, s)) {
            fail(r, "signal mask changed (signal %d)", s);
            return;
        }
}

/* One raw system call with every preserved register checked. */
static long rc_syscall(struct role *r, long nr, long a0, long a1, long a2, long a3, long a4,
                       long a5) {
    struct np_rc c;

    rc_fill(r, &c);
    c.nr = nr;
    c.args[0] = a0, c.args[1] = a1, c.args[2] = a2, c.args[3] = a3, c.args[4] = a4, c.args[5] = a5;
    errno = ERRNO_MAGIC;
    long ret = np_rc_run(&c);
    if (c.bad)
        fail(r, "registers changed across syscall %ld: bad bits 0x%x", nr, c.bad);
    if (errno != ERRNO_MAGIC)
        fail(r, "errno changed across syscall %ld: %d", nr, errno);
    check_mask(r);
    return ret;
}

static void late(struct role *r, uint64_t start, uint64_t want_ns) {
    uint64_t took = now_ns() - start;
    if (took < want_ns)
        fail(r, "woke early: %.3f ms < %.3f ms", took / 1e6, want_ns / 1e6);
    else if (took - want_ns > r->max_late_ns)
        r->max_late_ns = took - want_ns;
}

static uint64_t rc_work_expect(uint64_t x, uint64_t rounds) {
    for (uint64_t i = 0; i < rounds; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x += 0x9e3779b9;
    }
    return x;
}

/* ---- consumers ------------------------------------------------------------------------- */

static void *compute_main(void *arg) {
    struct role *r = arg;
    struct np_rc c;

    while (!stop) {
        rc_fill(r, &c);
        c.mode = 1;
        c.args[0] = (int64_t)rnd(&r->seed);
        c.args[1] = 2000;
        long got = np_rc_run(&c);
        if (c.bad)
            fail(r, "registers changed across a call: bad bits 0x%x", c.bad);
        if ((uint64_t)got != rc_work_expect((uint64_t)c.args[0], 2000))
            fail(r, "wrong result");
        r->iters++;
    }
    return NULL;
}

static void *futex_main(void *arg) {
    struct role *r = arg;
    uint32_t seen = futex_word;

    while (!stop) {
        uint32_t v = futex_word;
        if (v == seen) {
            long ret = rc_syscall(r, SYS_futex, (long)&futex_word, FUTEX_WAIT_PRIVATE, v, 0, 0, 0);
            if (ret != 0 && ret != -EAGAIN)
                fail(r, "futex wait returned %ld", ret);
        } else {
            seen = v;
        }
        r->iters++;
    }
    return NULL;
}

static void *futex_timed_main(void *arg) {
    struct role *r = arg;

    while (!stop) {
        struct timespec ts = {0, 30 * MS};
        uint64_t t0 = now_ns();
        long ret =
            rc_syscall(r, SYS_futex, (long)&futex_never, FUTEX_WAIT_PRIVATE, 0, (long)&ts, 0, 0);
        if (ret != -ETIMEDOUT)
            fail(r, "timed futex wait returned %ld", ret);
        late(r, t0, 30 * MS);
        r->iters++;
    }
    return NULL;
}

static void *cond_main(void *arg) {
    struct role *r = arg;
    uint64_t seen;

    pthread_mutex_lock(&cond_lock);
    seen = cond_seq;
    while (!stop) {
        errno = ERRNO_MAGIC;
        int rc = pthread_cond_wait(&cond, &cond_lock);
        if (rc)
            fail(r, "pthread_cond_wait: %d", rc);
        if (errno != ERRNO_MAGIC)
            fail(r, "errno changed across pthread_cond_wait: %d", errno);
        if (cond_seq < seen)
            fail(r, "sequence went back");
        seen = cond_seq;
        check_mask(r);
        r->iters++;
    }
    pthread_mutex_unlock(&cond_lock);
    return NULL;
}

static void *cond_timed_main(void *arg) {
    struct role *r = arg;

    pthread_mutex_lock(&cond_lock);
    while (!stop) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        uint64_t t0 = now_ns();
        dl.tv_nsec += 25 * MS;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
        errno = ERRNO_MAGIC;
        int rc = pthread_cond_timedwait(&cond_never, &cond_lock, &dl);
        if (rc != ETIMEDOUT)
            fail(r, "pthread_cond_timedwait returned %d", rc);
        if (errno != ERRNO_MAGIC)
            fail(r, "errno changed across pthread_cond_timedwait: %d", errno);
        late(r, t0, 25 * MS - 1 * MS); /* REALTIME vs MONOTONIC reading skew */
        r->iters++;
    }
    pthread_mutex_unlock(&cond_lock);
    return NULL;
}

static void *epoll_main(void *arg) {
    struct role *r = arg;
    struct epoll_event ev[4];

    while (!stop) {
        long ret = rc_syscall(r, SYS_epoll_wait, epoll_inf_fd, (long)ev, 4, -1, 0, 0);
        if (ret < 1)
            fail(r, "epoll_wait(-1) returned %ld", ret);
        uint64_t v;
        if (ret >= 1 && read(efd_inf, &v, 8) != 8)
            fail(r, "eventfd read");
        r->iters++;
    }
    return NULL;
}

static void *epoll_timed_main(void *arg) {
    struct role *r = arg;
    struct epoll_event ev[4];

    while (!stop) {
        uint64_t t0 = now_ns(), v;
        long ret = rc_syscall(r, SYS_epoll_wait, epoll_timed_fd, (long)ev, 4, 20, 0, 0);
        if (ret < 0)
            fail(r, "epoll_wait(20) returned %ld", ret);
        else if (ret == 0)
            late(r, t0, 20 * MS);
        else if (read(efd_timed, &v, 8) != 8)
            fail(r, "eventfd read");
        r->iters++;
    }
    return NULL;
}

static void *pipe_main(void *arg) {
    struct role *r = arg;
    uint64_t want = 0, buf[16];

    while (!stop) {
        long ret = rc_syscall(r, SYS_read, pipe_seq[0], (long)buf, sizeof(buf), 0, 0, 0);
        if (ret <= 0 || ret % 8) {
            fail(r, "read returned %ld", ret);
            continue;
        }
        for (long i = 0; i < ret / 8; i++)
            if (buf[i] != want++)
                fail(r, "sequence broken: got %llu want %llu", (unsigned long long)buf[i],
                     (unsigned long long)want - 1);
        r->iters++;
    }
    return NULL;
}

static void *nanosleep_main(void *arg) {
    struct role *r = arg;

    while (!stop) {
        struct timespec req = {0, 10 * MS}, rem = {0, 0};
        uint64_t t0 = now_ns();
        long ret = rc_syscall(r, SYS_nanosleep, (long)&req, (long)&rem, 0, 0, 0, 0);
        if (ret)
            fail(r, "nanosleep returned %ld", ret);
        late(r, t0, 10 * MS);
        r->iters++;
    }
    return NULL;
}

static void *clock_rel_main(void *arg) {
    struct role *r = arg;

    while (!stop) {
        struct timespec req = {0, 15 * MS};
        uint64_t t0 = now_ns();
        long ret = rc_syscall(r, SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, (long)&req, 0, 0, 0);
        if (ret)
            fail(r, "clock_nanosleep returned %ld", ret);
        late(r, t0, 15 * MS);
        r->iters++;
    }
    return NULL;
}

static void *clock_abs_main(void *arg) {
    struct role *r = arg;

    while (!stop) {
        uint64_t t0 = now_ns(), dl = t0 + 12 * MS;
        struct timespec ts = {(time_t)(dl / 1000000000ULL), (long)(dl % 1000000000ULL)};
        long ret =
            rc_syscall(r, SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, (long)&ts, 0, 0, 0);
        if (ret)
            fail(r, "clock_nanosleep(ABSTIME) returned %ld", ret);
        late(r, t0, 12 * MS);
        r->iters++;
    }
    return NULL;
}

static void *poll_timed_main(void *arg) {
    struct role *r = arg;

    while (!stop) {
        struct pollfd pfd = {pipe_never[0], POLLIN, 0};
        uint64_t t0 = now_ns();
        long ret = rc_syscall(r, SYS_poll, (long)&pfd, 1, 30, 0, 0, 0);
        if (ret != 0)
            fail(r, "poll(30) returned %ld", ret);
        late(r, t0, 30 * MS);
        r->iters++;
    }
    return NULL;
}

static void *ppoll_main(void *arg) {
    struct role *r = arg;
    sigset_t temp;
    char buf[64];

    sigemptyset(&temp);
    sigaddset(&temp, SIGHUP);
    sigaddset(&temp, SIGWINCH);
    sigaddset(&temp, SIGPIPE);
    while (!stop) {
        struct pollfd pfd = {pipe_ppoll[0], POLLIN, 0};
        long ret = rc_syscall(r, SYS_ppoll, (long)&pfd, 1, 0, (long)&temp, 8, 0);
        if (ret != 1)
            fail(r, "ppoll returned %ld", ret);
        else if (read(pipe_ppoll[0], buf, sizeof(buf)) <= 0)
            fail(r, "pipe read");
        r->iters++;
    }
    return NULL;
}

static void on_usr1(int sig) {
    (void)sig;
    handled_usr1++;
}

static void on_usr2(int sig) {
    (void)sig;
}

static void *sig_intr_main(void *arg) {
    struct role *r = arg;
    char buf[64];

    while (!stop) {
        uint64_t before = handled_usr1;
        long ret = rc_syscall(r, SYS_read, pipe_intr[0], (long)buf, sizeof(buf), 0, 0, 0);
        if (ret == -EINTR) {
            r->eintr++;
            if (handled_usr1 == before)
                fail(r, "read returned EINTR but no handler ran");
        } else if (ret <= 0) {
            fail(r, "read returned %ld", ret);
        }
        r->iters++;
    }
    return NULL;
}

static void *sig_restart_main(void *arg) {
    struct role *r = arg;
    char buf[64];

    while (!stop) {
        long ret = rc_syscall(r, SYS_read, pipe_restart[0], (long)buf, sizeof(buf), 0, 0, 0);
        if (ret <= 0)
            fail(r, "read returned %ld (SA_RESTART handler)", ret);
        r->iters++;
    }
    return NULL;
}

static void *mmapper_main(void *arg) {
    struct role *r = arg;

    while (!stop) {
        size_t size = (2u << 20) + (rnd(&r->seed) & 0xffff);
        unsigned char *p = malloc(size), v = (unsigned char)r->iters;
        if (!p) {
            fail(r, "malloc");
            continue;
        }
        memset(p, v, size);
        if (p[0] != v || p[size - 1] != v)
            fail(r, "memory");
        free(p);
        r->iters++;
    }
    return NULL;
}

/* ---- feeders ------------------------------------------------------------------------------ */

static void msleep(long ms) {
    struct timespec ts = {0, ms * MS};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void *feed_futex(void *arg) {
    (void)arg;
    while (!feeders_stop) {
        futex_word++;
        syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1000, 0, 0, 0);
        msleep(2);
    }
    return NULL;
}

static void *feed_cond(void *arg) {
    (void)arg;
    while (!feeders_stop) {
        pthread_mutex_lock(&cond_lock);
        cond_seq++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&cond_lock);
        msleep(3);
    }
    return NULL;
}

static void *feed_fds(void *arg) {
    (void)arg;
    uint64_t seq = 0, one = 1;
    for (unsigned tick = 1; !feeders_stop; tick++) {
        if (write(pipe_seq[1], &seq, 8) == 8)
            seq++;
        if (tick % 5 == 0 && write(efd_inf, &one, 8) != 8)
            break;
        if (tick % 50 == 0 && write(efd_timed, &one, 8) != 8)
            break;
        if (tick % 10 == 0 && write(pipe_ppoll[1], "p", 1) != 1)
            break;
        if (tick % 7 == 0 &&
            (write(pipe_intr[1], "i", 1) != 1 || write(pipe_restart[1], "r", 1) != 1))
            break;
        if (tick % 20 == 0 && role_sig_intr->fn)
            pthread_kill(role_sig_intr->th, SIGUSR1);
        if (tick % 20 == 0 && role_sig_restart->fn)
            pthread_kill(role_sig_restart->th, SIGUSR2);
        msleep(1);
    }
    return NULL;
}

/* ---- set-up and report -------------------------------------------------------------------- */

static int install_seccomp(void) {
    struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_fprog prog = {1, allow};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

static void setup_fds(void) {
    struct epoll_event ev = {.events = EPOLLIN};

    if (pipe(pipe_seq) || pipe(pipe_never) || pipe(pipe_ppoll) || pipe(pipe_intr) ||
        pipe(pipe_restart)) {
        perror("pipe");
        exit(2);
    }
    efd_inf = eventfd(0, 0);
    efd_timed = eventfd(0, 0);
    epoll_inf_fd = epoll_create1(0);
    epoll_timed_fd = epoll_create1(0);
    if (epoll_ctl(epoll_inf_fd, EPOLL_CTL_ADD, efd_inf, &ev) ||
        epoll_ctl(epoll_timed_fd, EPOLL_CTL_ADD, efd_timed, &ev)) {
        perror("epoll");
        exit(2);
    }
}

static void setup_signals(void) {
    struct sigaction sa = {0};

    sa.sa_handler = on_usr1; /* no SA_RESTART: reads return EINTR */
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
}

struct thread_start {
    struct role *r;
    pthread_barrier_t *barrier;
};

static void *thread_entry(void *arg) {
    struct role *r = arg;

    r->tid = gettid();
    if (strcmp(r->name, "ppoll") == 0) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGWINCH);
        pthread_sigmask(SIG_BLOCK, &s, NULL);
    }
    pthread_sigmask(SIG_SETMASK, NULL, &r->mask);
    return r->fn(r);
}

static const char *skip_roles = "";

static bool skipped(const char *name) {
    size_t len = strlen(name);
    for (const char *p = strstr(skip_roles, name); p; p = strstr(p + 1, name))
        if ((p == skip_roles || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
            return true;
    return false;
}

static struct role *add(struct role *roles, int *n, const char *name, void *(*fn)(void *),
                        bool feeder) {
    static struct role unused;
    if (skipped(name)) {
        memset(&unused, 0, sizeof(unused));
        return &unused;
    }
    struct role *r = &roles[(*n)++];
    r->name = name;
    r->fn = fn;
    r->feeder = feeder;
    r->seed = 0x9e3779b97f4a7c15ULL * (uint64_t)*n + 1;
    return r;
}

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv) {
    struct role roles[64];
    int n = 0, compute = 8;
    const char *mode = "full";
    bool seccomp = false;

    memset(roles, 0, sizeof(roles));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--compute") == 0 && i + 1 < argc)
            compute = atoi(argv[++i]);
        else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc)
            mode = argv[++i];
        else if (strcmp(argv[i], "--skip") == 0 && i + 1 < argc)
            skip_roles = argv[++i];
        else if (strcmp(argv[i], "--seccomp") == 0)
            seccomp = true;
    }
    __builtin_cpu_init();
    have_avx = __builtin_cpu_supports("avx");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (seccomp && install_seccomp() < 0) {
        perror("seccomp");
        return 2;
    }
    setup_fds();
    setup_signals();
    signal(SIGPIPE, SIG_IGN);

    for (int i = 0; i < compute && i < 16; i++)
        add(roles, &n, "compute", compute_main, false);
    if (strcmp(mode, "full") == 0) {
        add(roles, &n, "futex", futex_main, false);
        add(roles, &n, "futex_timed", futex_timed_main, false);
        add(roles, &n, "cond", cond_main, false);
        add(roles, &n, "cond_timed", cond_timed_main, false);
        add(roles, &n, "epoll", epoll_main, false);
        add(roles, &n, "epoll_timed", epoll_timed_main, false);
        add(roles, &n, "pipe", pipe_main, false);
        add(roles, &n, "nanosleep", nanosleep_main, false);
        add(roles, &n, "clock_rel", clock_rel_main, false);
        add(roles, &n, "clock_abs", clock_abs_main, false);
        add(roles, &n, "poll_timed", poll_timed_main, false);
        add(roles, &n, "ppoll", ppoll_main, false);
        role_sig_intr = add(roles, &n, "sig_intr", sig_intr_main, false);
        role_sig_restart = add(roles, &n, "sig_restart", sig_restart_main, false);
        add(roles, &n, "mmapper", mmapper_main, false);
        add(roles, &n, "feed_futex", feed_futex, true);
        add(roles, &n, "feed_cond", feed_cond, true);
        add(roles, &n, "feed_fds", feed_fds, true);
    } else if (strcmp(mode, "mmap") == 0) {
        for (int i = 0; i < 3; i++)
            add(roles, &n, "mmapper", mmapper_main, false);
        signal(SIGTERM, on_term);
    }
    for (int i = 0; i < n; i++)
        if (pthread_create(&roles[i].th, NULL, thread_entry, &roles[i])) {
            perror("pthread_create");
            return 2;
        }
    msleep(50); /* every thread has its tid */
    printf("READY %d\n", (int)getpid());
    printf("ROLE main %d\n", (int)getpid());
    for (int i = 0; i < n; i++)
        printf("ROLE %s %d\n", roles[i].name, (int)roles[i].tid);

    struct role main_role = {.name = "main", .seed = 77};
    pthread_sigmask(SIG_SETMASK, NULL, &main_role.mask);
    main_role.tid = getpid();
    if (strcmp(mode, "full") == 0) {
        char buf[256];
        for (;;) { /* a plain glibc read: main rests in read() */
            errno = ERRNO_MAGIC;
            ssize_t got = read(0, buf, sizeof(buf));
            if (got == 0)
                break;
            if (got < 0)
                fail(&main_role, "read(stdin): %s", strerror(errno));
            main_role.iters++;
        }
    } else if (strcmp(mode, "busy") == 0) {
        for (;;) { /* spin ~2 ms, sleep 200 us, look at stdin without waiting */
            uint64_t t0 = now_ns();
            while (now_ns() - t0 < 2 * MS)
                ;
            long ret = rc_syscall(&main_role, SYS_nanosleep, (long)&(struct timespec){0, 200000}, 0,
                                  0, 0, 0, 0);
            if (ret)
                fail(&main_role, "nanosleep returned %ld", ret);
            struct pollfd pfd = {0, POLLIN, 0};
            char c;
            if (poll(&pfd, 1, 0) == 1 && read(0, &c, 1) <= 0)
                break;
            main_role.iters++;
        }
    } else {
        while (!stop)
            main_role.iters++;
    }
    stop = 1;
    for (int i = 0; i < n; i++)
        if (!roles[i].feeder)
            pthread_join(roles[i].th, NULL);
    feeders_stop = 1;
    for (int i = 0; i < n; i++)
        if (roles[i].feeder)
            pthread_join(roles[i].th, NULL);

    uint64_t errors = main_role.errors;
    printf("ROLESTAT main %d iters=%llu errors=%llu\n", (int)main_role.tid,
           (unsigned long long)main_role.iters, (unsigned long long)main_role.errors);
    for (int i = 0; i < n; i++) {
        struct role *r = &roles[i];
        errors += r->errors;
        printf("ROLESTAT %s %d iters=%llu errors=%llu max_late_ms=%.3f eintr=%llu%s%s\n", r->name,
               (int)r->tid, (unsigned long long)r->iters, (unsigned long long)r->errors,
               r->max_late_ns / 1e6, (unsigned long long)r->eintr, r->errors ? " first: " : "",
               r->first_error);
    }
    printf("RESULT %s errors=%llu\n", errors ? "FAIL" : "OK", (unsigned long long)errors);
    return errors ? 1 : 0;
}
