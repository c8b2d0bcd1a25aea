/* stub.c - the part of the injection stub written in C: what the hijacked
 * thread does between stub_entry.S's save and restore. It is compiled
 * freestanding (no libc, no globals, no relocations) into a flat blob that
 * the injector copies into a code cave of the target; it reaches the
 * target's libc only through the function addresses in the block.
 *
 * Sequence: block every signal (the injector already did with
 * PTRACE_SETSIGMASK, unless it died first); save errno; create the memfd
 * (the library's bytes, or in WAKE mode just the "injection in progress"
 * marker), the library's socketpair and a control socketpair; publish them
 * and wait, bounded, for ncclprobe to take its ends ('F') and fill the
 * memfd ('G'); dlopen the memfd through /proc/self/fd (under a name no
 * loaded object has), dlsym the attach function (or use the known address
 * in WAKE mode) and call it with the library's socket end; close what is
 * no longer needed; decide how the interrupted system call resumes;
 * restore errno; send the results on the control socket; restore the
 * signal mask.
 *
 * Every step works without the injector: if it died, the wait times out
 * (or sees EOF once 'F' came) and the stub undoes what it made. */
#include <stdint.h>

#include "inject/stub_abi.h"

/* x86-64 system call numbers and constants (no libc headers here). */
#define SYS_read 0
#define SYS_close 3
#define SYS_rt_sigaction 13
#define SYS_rt_sigprocmask 14
#define SYS_sendto 44
#define SYS_socketpair 53
#define SYS_rt_sigpending 127
#define SYS_clock_gettime 228
#define SYS_ppoll 271
#define SYS_memfd_create 319

#define K_EINTR 4
#define K_EAGAIN 11
#define K_ENOENT 2
#define K_EPIPE 32
#define K_ETIMEDOUT 110
#define K_ECANCELED 125
#define K_ELIBBAD 80
#define K_ERESTARTSYS 512
#define K_ERESTARTNOINTR 513

#define K_SIG_SETMASK 2
#define K_SIGKILL 9
#define K_SIGSTOP 19
#define K_SA_RESTART 0x10000000UL
#define K_AF_UNIX 1
#define K_SOCK_STREAM 1
#define K_SOCK_CLOEXEC 02000000
#define K_MFD_CLOEXEC 1U
#define K_MFD_ALLOW_SEALING 2U
#define K_MFD_EXEC 0x10U /* Linux 6.3: needed where vm.memfd_noexec = 1 */
#define K_EINVAL 22
#define K_POLLIN 1
#define K_CLOCK_MONOTONIC 1
#define K_RTLD_NOW 2
#define K_RTLD_NOLOAD 4
#define K_MSG_NOSIGNAL 0x4000

struct k_timespec {
    int64_t sec;
    int64_t nsec;
};

struct k_pollfd {
    int fd;
    short events;
    short revents;
};

struct k_sigaction {
    uint64_t handler;
    uint64_t flags;
    uint64_t restorer;
    uint64_t mask;
};

static inline long sc6(long n, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

static inline long sc4(long n, long a, long b, long c, long d) {
    return sc6(n, a, b, c, d, 0, 0);
}

static inline long sc3(long n, long a, long b, long c) {
    return sc6(n, a, b, c, 0, 0, 0);
}

static uint64_t now_ns(void) {
    struct k_timespec t = {0, 0};
    sc3(SYS_clock_gettime, K_CLOCK_MONOTONIC, (long)&t, 0);
    return (uint64_t)t.sec * 1000000000ULL + (uint64_t)t.nsec;
}

static void close_fd(int *fd) {
    if (*fd >= 0)
        sc3(SYS_close, *fd, 0, 0);
    *fd = -1;
}

/* "/proc/self/" + k times "./" + "fd/N", without string constants or
 * library calls. The loader knows a library by the name it was opened
 * with and matches later dlopen calls by name first: k is chosen so that
 * the name is new (see load_library). */
static void fd_path(char out[48], int k, int fd) {
    static const char prefix[] = "/proc/self/";
    char digits[12];
    int n = 0, i = 0;

    for (; prefix[i]; i++)
        out[i] = prefix[i];
    for (int j = 0; j < k; j++) {
        out[i++] = '.';
        out[i++] = '/';
    }
    out[i++] = 'f';
    out[i++] = 'd';
    out[i++] = '/';
    do {
        digits[n++] = (char)('0' + fd % 10);
        fd /= 10;
    } while (fd > 0 && n < 11);
    while (n > 0)
        out[i++] = digits[--n];
    out[i] = '\0';
}

static void copy_error(struct np_stub_out *o, const char *msg) {
    unsigned i = 0;

    if (msg)
        for (; msg[i] && i < sizeof(o->error) - 1; i++)
            o->error[i] = msg[i];
    o->error[i] = '\0';
}

/* Waits for ncclprobe on the control socket: 'F' (it holds its copies:
 * ours of its ends are closed, so its death now reads as EOF), then 'G'.
 * 0 on 'G'; -ETIMEDOUT, -EPIPE (ncclprobe gone), -ECANCELED ('A'). */
static int wait_go(const struct np_stub_block *b, int ctl, int *sock_np, int *ctl_np) {
    struct k_timespec left = {b->timeout_ms / 1000, (int64_t)(b->timeout_ms % 1000) * 1000000};

    for (;;) {
        struct k_pollfd pfd = {ctl, K_POLLIN, 0};
        long r = sc6(SYS_ppoll, (long)&pfd, 1, (long)&left, 0, 8, 0);
        if (r == 0)
            return -K_ETIMEDOUT;
        if (r == -K_EINTR)
            continue;
        if (r < 0)
            return (int)r;
        char c = 0;
        r = sc3(SYS_read, ctl, (long)&c, 1);
        if (r == -K_EINTR || r == -K_EAGAIN)
            continue;
        if (r == 0)
            return -K_EPIPE;
        if (r < 0)
            return (int)r;
        if (c == NP_STUB_MSG_FETCHED) {
            close_fd(sock_np);
            close_fd(ctl_np);
            continue;
        }
        return c == NP_STUB_MSG_GO ? 0 : -K_ECANCELED;
    }
}

/* A name for the memfd that no loaded object has: "/proc/self/fd/N" may
 * have been an earlier memfd's (ours, or the application's) - dlopen would
 * return that object instead. */
static void fresh_name(const struct np_stub_block *b, int memfd, char path[48]) {
    void *(*dl_open)(const char *, int) = (void *(*)(const char *, int))b->fn_dlopen;
    int (*dl_close)(void *) = (int (*)(void *))b->fn_dlclose;

    for (int k = 1; k < 12; k++) {
        fd_path(path, k, memfd);
        void *h = dl_open(path, K_RTLD_NOW | K_RTLD_NOLOAD | (b->dlopen_flags & ~3));
        if (!h)
            return;
        if (dl_close)
            dl_close(h); /* undo NOLOAD's reference */
    }
}

/* LOAD: dlopen the memfd and find the attach function. */
static int load_library(struct np_stub_block *b, int memfd, uint64_t *fn) {
    struct np_stub_out *o = &b->out;
    void *(*dl_open)(const char *, int) = (void *(*)(const char *, int))b->fn_dlopen;
    void *(*dl_sym)(void *, const char *) = (void *(*)(void *, const char *))b->fn_dlsym;
    char *(*dl_error)(void) = (char *(*)(void))b->fn_dlerror;
    char path[48];

    o->stage = NP_STAGE_DLOPEN;
    o->t[NP_T_DLOPEN] = now_ns();
    fresh_name(b, memfd, path);
    void *handle = dl_open(path, b->dlopen_flags);
    if (!handle) {
        copy_error(o, dl_error ? dl_error() : 0);
        return -K_ELIBBAD;
    }
    o->handle = (uint64_t)handle;
    o->stage = NP_STAGE_DLSYM;
    void *f = dl_sym(handle, b->symbol);
    o->t[NP_T_DLOPEN_END] = now_ns();
    if (!f) {
        copy_error(o, dl_error ? dl_error() : 0);
        return -K_ENOENT;
    }
    *fn = (uint64_t)f;
    return 0;
}

/* The first deliverable signal (pending, not blocked by the thread's own
 * mask) that has a handler, or 0; its sa_flags in *flags. */
static int handled_pending_signal(const struct np_stub_block *b, uint64_t *flags) {
    uint64_t pending = 0;

    if (sc3(SYS_rt_sigpending, (long)&pending, 8, 0) < 0)
        return 0;
    pending &= ~b->sys_sigmask;
    for (int sig = 1; sig <= 64; sig++) {
        if (!(pending & (1ULL << (sig - 1))) || sig == K_SIGKILL || sig == K_SIGSTOP)
            continue;
        struct k_sigaction act = {0, 0, 0, 0};
        if (sc4(SYS_rt_sigaction, sig, 0, (long)&act, 8) < 0)
            continue;
        if (act.handler == 0 || act.handler == 1) /* SIG_DFL, SIG_IGN: no handler runs */
            continue;
        *flags = act.flags;
        return sig;
    }
    return 0;
}

/* A real signal for this thread arrived while we ran: the kernel would
 * have interrupted the system call with it. Do what it would have done:
 * restart for ERESTARTNOINTR and for ERESTARTSYS with SA_RESTART, EINTR
 * otherwise (the handler runs when the mask is restored, then the call
 * returns EINTR - never an EINTR without a handler). */
static void decide_resume(struct np_stub_block *b) {
    uint64_t flags = 0;
    uint64_t *frame = (uint64_t *)((char *)b + b->frame_off);

    b->out.resumed = NP_RESUMED_AS_PLANNED;
    if (b->resume != NP_RESUME_REISSUE && b->resume != NP_RESUME_RESTART_BLOCK)
        return;
    if (!handled_pending_signal(b, &flags))
        return;
    if (b->sys_ret == -K_ERESTARTNOINTR)
        return;
    if (b->sys_ret == -K_ERESTARTSYS && (flags & K_SA_RESTART))
        return;
    frame[1] = b->sys_ip;
    b->rax = (uint64_t)-K_EINTR;
    b->out.resumed = NP_RESUMED_EINTR;
}

/* The results, on the control socket; never SIGPIPE (ncclprobe may be
 * gone, and the signal would wait, blocked, for the application). */
static void send_results(struct np_stub_block *b, int ctl) {
    struct np_stub_out *o = &b->out;

    o->t[NP_T_EXIT] = now_ns();
    o->done = b->nonce;
    o->sum = np_stub_out_sum(o, b->nonce);
    if (ctl >= 0)
        sc6(SYS_sendto, ctl, (long)o, sizeof(*o), K_MSG_NOSIGNAL, 0, 0);
}

/* The memfd and the two socketpairs, published in the block. */
static int make_fds(struct np_stub_block *b, int *memfd, int sock[2], int ctl[2]) {
    struct np_stub_out *o = &b->out;

    o->stage = NP_STAGE_MEMFD;
    long r = sc3(SYS_memfd_create, (long)b->memfd_name,
                 K_MFD_CLOEXEC | K_MFD_ALLOW_SEALING | K_MFD_EXEC, 0);
    if (r == -K_EINVAL) /* before 6.3 */
        r = sc3(SYS_memfd_create, (long)b->memfd_name, K_MFD_CLOEXEC | K_MFD_ALLOW_SEALING, 0);
    if (r < 0)
        return (int)r;
    *memfd = (int)r;
    o->stage = NP_STAGE_SOCKETPAIR;
    r = sc4(SYS_socketpair, K_AF_UNIX, K_SOCK_STREAM | K_SOCK_CLOEXEC, 0, (long)sock);
    if (r >= 0)
        r = sc4(SYS_socketpair, K_AF_UNIX, K_SOCK_STREAM | K_SOCK_CLOEXEC, 0, (long)ctl);
    if (r < 0)
        return (int)r;
    o->memfd = *memfd;
    o->sock_lib = sock[0];
    o->sock_np = sock[1];
    o->ctl_stub = ctl[0];
    o->ctl_np = ctl[1];
    __asm__ volatile("" ::: "memory");
    o->ready = 1;
    o->t[NP_T_READY] = now_ns();
    return 0;
}

/* Loads (or finds) the library and calls its attach function. */
static int attach(struct np_stub_block *b, int memfd, int *sock_lib) {
    struct np_stub_out *o = &b->out;
    uint64_t fn = b->fn_attach;

    if (b->mode == NP_STUB_LOAD) {
        int err = load_library(b, memfd, &fn);
        if (err)
            return err;
    }
    o->fn_attach = fn;
    o->stage = NP_STAGE_ATTACH;
    o->attach_ret = ((int (*)(int, unsigned))fn)(*sock_lib, b->attach_flags);
    o->t[NP_T_ATTACH_END] = now_ns();
    if (o->attach_ret >= 0)
        *sock_lib = -1; /* the library owns it now */
    o->stage = NP_STAGE_DONE;
    return 0;
}

__attribute__((used)) void np_stub_main(struct np_stub_block *b) {
    struct np_stub_out *o = &b->out;
    uint64_t all = ~0ULL;
    int *errno_p = 0, saved_errno = 0, memfd = -1, sock[2] = {-1, -1}, ctl[2] = {-1, -1};

    sc4(SYS_rt_sigprocmask, K_SIG_SETMASK, (long)&all, 0, 8);
    o->t[NP_T_ENTRY] = now_ns();
    o->stage = NP_STAGE_ENTERED;
    if (b->fn_errno_location) {
        errno_p = ((int *(*)(void))b->fn_errno_location)();
        saved_errno = *errno_p;
    }
    int err = make_fds(b, &memfd, sock, ctl);
    if (err) { /* tell ncclprobe now: it cannot wait on a socket we have not got */
        o->status = err;
        __asm__ volatile("" ::: "memory");
        o->ready = 2;
    } else {
        o->stage = NP_STAGE_WAIT_GO;
        err = wait_go(b, ctl[0], &sock[1], &ctl[1]);
        o->t[NP_T_GO] = now_ns();
    }
    if (!err)
        err = attach(b, memfd, &sock[0]);
    o->status = err;
    /* The library's memfd stays open in the process once it is loaded: a
     * tracer without CAP_SYS_ADMIN (the daemon) cannot open the mapping
     * through map_files, but can through /proc/PID/fd to probe its marker.
     * Anything else (a wake's memfd, a failure) is closed. */
    if (err || b->mode != NP_STUB_LOAD)
        close_fd(&memfd);
    close_fd(&sock[1]);
    close_fd(&sock[0]);
    close_fd(&ctl[1]);
    decide_resume(b);
    if (errno_p)
        *errno_p = saved_errno;
    send_results(b, ctl[0]);
    close_fd(&ctl[0]);
    sc4(SYS_rt_sigprocmask, K_SIG_SETMASK, (long)&b->sys_sigmask, 0, 8);
}
