/* cupti_attach_check: a C-level test of libncclprobe_cupti.so's live entry point,
 * ncclprobe_cupti_attach(fd, flags), without ptrace: this program plays the process the library
 * is loaded into and ncclprobe's end of the socket at once. It dlopens the library (as the
 * injector's dlopen would), hands it one end of a socketpair on a thread with every signal
 * blocked (as a hijacked thread is), and reads the other end frame by frame (gpu_wire.h). The
 * CUDA side is test doubles: libcupti_replay.so plays CUPTI (scripted callbacks and kernel
 * records), libfakecuda.so the driver (the handles, and cuFuncGetName / cuKernelGetName).
 *
 *   cupti_attach_check --lib LIB live    attach into a process that never loaded it: silent
 *                                        and CUPTI untouched until ncclprobe's START byte; then
 *                                        HELLO origin 1; launches before it have no records; names
 *                                        of handles made before it come in NAMES frames before
 *                                        the records of their launch; quiet once the peer
 *                                        closes (the library closes its end, drops and counts);
 *                                        a second attach wakes it (names again)
 *   cupti_attach_check --lib LIB start   InitializeInjection first (no daemon at its socket
 *                                        path: CUPTI stays off), then attach = wake: origin 0
 *   cupti_attach_check --lib LIB busy    another profiler holds CUPTI: HELLO says so, nothing
 *                                        else comes; once it let go, the next attach turns
 *                                        CUPTI on
 *   cupti_attach_check --lib LIB file    the library writes a trace file: attach refuses
 *   cupti_attach_check --lib LIB badfd   descriptors that are no connected stream socket are
 *                                        refused and left to the caller; a connection that ends
 *                                        or says something else than START is let go
 *
 * Every check that fails prints `FAIL what` on stderr; the exit status is 1 if any did. The
 * last line on stdout is a JSON summary (checks passed, attach times in microseconds). */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "cupti_replay.h"
#include "ncclprobe/gpu_wire.h"
#include "progs_common.h"

#define MAX_EVENTS 4096
#define MAX_LAUNCHES 64
#define WAIT_MS 5000
#define ATTACH_FAST_US 50000 /* an attach must return within this (it is a thread's pause) */
#define KERNEL_STREAM 21

static int passed, failed;
static long attach_us[8];
static int attaches;

static void check(bool ok, const char *fmt, ...) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- the library ---- */

static struct {
    int (*attach)(int, unsigned);
    int (*initialize)(void);
} lib;

/* Points the library at the double this program is linked with, then loads it. */
static void load_library(const char *path) {
    Dl_info info;
    char replay[PATH_MAX];
    if (!dladdr((void *)cupti_replay_now, &info) || !realpath(info.dli_fname, replay)) {
        fprintf(stderr, "cupti_attach_check: cannot locate libcupti_replay.so\n");
        exit(PROGS_EXIT_RUNTIME);
    }
    setenv("NCCLPROBE_CUPTI_LIBRARY", replay, 1);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cupti_attach_check: dlopen %s: %s\n", path, dlerror());
        exit(PROGS_EXIT_RUNTIME);
    }
    *(void **)&lib.attach = dlsym(h, "ncclprobe_cupti_attach");
    *(void **)&lib.initialize = dlsym(h, "InitializeInjection");
    if (!lib.attach || !lib.initialize) {
        fprintf(stderr, "cupti_attach_check: %s lacks the entry points\n", path);
        exit(PROGS_EXIT_RUNTIME);
    }
}

struct attach_call {
    int fd;
    int rc;
    long us;
    long tid;
};

static uint64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void *attach_thread(void *arg) {
    struct attach_call *call = arg;
    call->tid = progs_gettid();
    uint64_t t0 = mono_us();
    call->rc = lib.attach(call->fd, 0);
    call->us = (long)(mono_us() - t0);
    return NULL;
}

/* ncclprobe_cupti_attach(fd) on a new thread with every signal blocked, as on a hijacked
 * thread; must return fast. */
static struct attach_call attach_blocked(int fd) {
    struct attach_call call = {.fd = fd, .rc = -1};
    sigset_t all, old;
    pthread_t t;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&t, NULL, attach_thread, &call);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        fprintf(stderr, "cupti_attach_check: pthread_create: %s\n", strerror(err));
        exit(PROGS_EXIT_RUNTIME);
    }
    pthread_join(t, NULL);
    if (attaches < 8)
        attach_us[attaches++] = call.us;
    check(call.us < ATTACH_FAST_US, "attach took %ld us", call.us);
    return call;
}

/* A connected pair: [0] ours (ncclprobe's end), [1] the library's. */
static void new_pair(int sv[2]) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        perror("cupti_attach_check: socketpair");
        exit(PROGS_EXIT_RUNTIME);
    }
}

/* ---- launches: the driver's and CUPTI's side of each ---- */

struct launch {
    uint32_t corr;
    uint64_t handle;
    const char *name; /* the kernel's */
    int records;      /* kernel records the double took for it */
    uint64_t start[2], end[2];
};

static struct launch launches[MAX_LAUNCHES];
static int nlaunches;
static uint64_t duration_ns = 1000;

static struct launch *script_kernels(uint32_t corr, uint64_t handle, const char *name, int n) {
    struct launch *l = &launches[nlaunches++ % MAX_LAUNCHES];
    memset(l, 0, sizeof(*l));
    l->corr = corr;
    l->handle = handle;
    l->name = name;
    for (int i = 0; i < n; i++) {
        uint64_t start = cupti_replay_now() + 10000;
        duration_ns += 10;
        if (cupti_replay_kernel(corr, name, start, start + duration_ns, 0, KERNEL_STREAM,
                                n > 1 ? 3 : 0, n > 1 ? (uint64_t)i + 1 : 0) == 0) {
            l->start[l->records] = start;
            l->end[l->records++] = start + duration_ns;
        }
    }
    return l;
}

/* cuLaunchKernel(f) as CUPTI reports it: no symbolName, the driver names the handle. */
static struct launch *drv_launch(CUfunction f, const char *name) {
    cuLaunchKernel_params params = {f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL};
    CUresult rc = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    uint32_t corr =
        cupti_replay_api_ex(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                            "cuLaunchKernel", NULL, &params, (int)rc);
    return script_kernels(corr, (uint64_t)(uintptr_t)f, name, 1);
}

/* A stand-in kernel stub: a runtime launch's func. */
static void rt_stub(void) {
    __asm__ volatile("");
}

#define RT_KERNEL "attach_rt_kernel"

/* cudaLaunchKernel(rt_stub) as CUPTI reports it, with symbolName. */
static struct launch *rt_launch(void) {
    dim3 one = {1, 1, 1};
    cudaLaunchKernel_v7000_params params = {(const void *)rt_stub, one, one, NULL, 0, NULL};
    uint32_t corr = cupti_replay_api_ex(CUPTI_CB_DOMAIN_RUNTIME_API,
                                        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                        "cudaLaunchKernel", RT_KERNEL, &params, 0);
    return script_kernels(corr, (uint64_t)(uintptr_t)rt_stub, RT_KERNEL, 1);
}

/* cudaGraphLaunch: two kernels, no function handle (no name to send). */
static struct launch *graph_launch(void) {
    cudaGraphLaunch_v10000_params params = {(cudaGraphExec_t)(uintptr_t)0x6000, NULL};
    uint32_t corr = cupti_replay_api_ex(CUPTI_CB_DOMAIN_RUNTIME_API,
                                        CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
                                        "cudaGraphLaunch", NULL, &params, 0);
    return script_kernels(corr, 0, "attach_graph_node", 2);
}

/* The handles, made before the library is loaded or attached. */
static struct {
    CUfunction fn;
    CUkernel kernel;
} handles;

#define DRV_KERNEL "attach_drv_kernel"
#define LIB_KERNEL "attach_lib_kernel"

static void make_handles(void) {
    if (cuModuleGetFunction(&handles.fn, (CUmodule)(uintptr_t)0x10, DRV_KERNEL) != CUDA_SUCCESS ||
        cuLibraryGetKernel(&handles.kernel, (CUlibrary)(uintptr_t)0x20, LIB_KERNEL) !=
            CUDA_SUCCESS) {
        fprintf(stderr, "cupti_attach_check: the driver double made no handles\n");
        exit(PROGS_EXIT_RUNTIME);
    }
}

/* ---- ncclprobe's end: frames as they come ---- */

enum event_kind { EV_HELLO, EV_NAME, EV_RECORD, EV_STATS };

struct event {
    enum event_kind kind;
    uint64_t handle;
    uint32_t corr;
    char name[128];
    uint64_t start, end;
};

struct peer {
    int fd;
    bool eof;
    struct event ev[MAX_EVENTS];
    int n;
    struct np_wire_hello hello;
    int hellos;
    struct np_wire_stats stats; /* the last */
    int stats_frames;
    struct np_wire_cupti cupti; /* the last */
    int cupti_frames;
    int bad_frames;
    uint8_t *buf;
};

static void add_event(struct peer *p, const struct event *e) {
    if (p->n < MAX_EVENTS)
        p->ev[p->n++] = *e;
}

/* Reads len bytes by the deadline; false at EOF, error or timeout. */
static bool read_full(struct peer *p, void *buf, size_t len, uint64_t deadline_us) {
    uint8_t *at = buf;
    while (len > 0) {
        uint64_t now = mono_us();
        if (now >= deadline_us)
            return false;
        struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)((deadline_us - now) / 1000) + 1) <= 0)
            continue;
        ssize_t n = recv(p->fd, at, len, 0);
        if (n <= 0) {
            p->eof = true;
            return false;
        }
        at += n;
        len -= (size_t)n;
    }
    return true;
}

static void take_names(struct peer *p, const uint8_t *frame, uint32_t size) {
    const struct np_wire_names *h = (const void *)frame;
    uint32_t off = sizeof(*h);
    for (uint32_t i = 0; i < h->count && off + NP_WIRE_NAME_FIXED <= size; i++) {
        const struct np_wire_name *e = (const void *)(frame + off);
        struct event ev = {.kind = EV_NAME, .handle = e->handle};
        snprintf(ev.name, sizeof(ev.name), "%.*s", (int)e->name_len, e->name);
        add_event(p, &ev);
        off += np_wire_name_size(e->name_len);
    }
    p->bad_frames += off != size;
}

static void take_records(struct peer *p, const uint8_t *frame, uint32_t size) {
    const struct np_wire_activity *h = (const void *)frame;
    uint32_t off = sizeof(*h);
    for (uint32_t i = 0; i < h->count && off + NP_GPU_RECORD_FIXED <= size; i++) {
        const struct np_gpu_record *r = (const void *)(frame + off);
        struct event ev = {
            .kind = EV_RECORD, .corr = r->correlation_id, .start = r->start_ns, .end = r->end_ns};
        snprintf(ev.name, sizeof(ev.name), "%.*s", (int)r->name_len, r->name);
        add_event(p, &ev);
        off += r->size;
    }
    p->bad_frames += off != size;
}

/* One frame by the deadline; false at EOF or timeout. */
static bool read_frame(struct peer *p, uint64_t deadline_us) {
    struct np_wire_header h;
    if (!read_full(p, &h, sizeof(h), deadline_us))
        return false;
    if (h.magic != NP_WIRE_MAGIC || h.version != NP_WIRE_VERSION || h.size < sizeof(h) ||
        h.size > NP_WIRE_MAX_FRAME || (pid_t)h.pid != getpid()) {
        p->bad_frames++;
        p->eof = true;
        return false;
    }
    memcpy(p->buf, &h, sizeof(h));
    if (!read_full(p, p->buf + sizeof(h), h.size - sizeof(h), deadline_us))
        return false;
    struct event ev = {.kind = EV_HELLO};
    if (h.type == NP_WIRE_HELLO && h.size == sizeof(p->hello)) {
        memcpy(&p->hello, p->buf, sizeof(p->hello));
        p->hellos++;
        add_event(p, &ev);
    } else if (h.type == NP_WIRE_STATS && h.size == sizeof(p->stats)) {
        memcpy(&p->stats, p->buf, sizeof(p->stats));
        p->stats_frames++;
        ev.kind = EV_STATS;
        add_event(p, &ev);
    } else if (h.type == NP_WIRE_CUPTI && h.size == sizeof(struct np_wire_cupti)) {
        memcpy(&p->cupti, p->buf, sizeof(p->cupti)); /* which CUPTI: after each HELLO */
        p->cupti_frames++;
    } else if (h.type == NP_WIRE_NAMES) {
        take_names(p, p->buf, h.size);
    } else if (h.type == NP_WIRE_ACTIVITY) {
        take_records(p, p->buf, h.size);
    } else {
        p->bad_frames++;
    }
    return true;
}

static void peer_open(struct peer *p, int fd) {
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->buf = malloc(NP_WIRE_MAX_FRAME);
    if (!p->buf)
        exit(PROGS_EXIT_RUNTIME);
}

static void peer_close(struct peer *p) {
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    free(p->buf);
    p->buf = NULL;
}

typedef bool (*peer_done_fn)(const struct peer *p, const void *arg);

/* Reads frames until done(p, arg) holds or ms pass; whether it held. */
static bool read_until(struct peer *p, peer_done_fn done, const void *arg, int ms) {
    uint64_t deadline = mono_us() + (uint64_t)ms * 1000u;
    while (!done(p, arg)) {
        if (p->eof || !read_frame(p, deadline))
            return done(p, arg);
    }
    return true;
}

static bool has_hello(const struct peer *p, const void *arg) {
    (void)arg;
    return p->hellos > 0;
}

static int index_of_record(const struct peer *p, uint32_t corr) {
    for (int i = 0; i < p->n; i++)
        if (p->ev[i].kind == EV_RECORD && p->ev[i].corr == corr)
            return i;
    return -1;
}

static int records_of(const struct peer *p, uint32_t corr) {
    int n = 0;
    for (int i = 0; i < p->n; i++)
        n += p->ev[i].kind == EV_RECORD && p->ev[i].corr == corr;
    return n;
}

/* arg: a NULL-terminated array of launches whose records must all be in. */
static bool has_records(const struct peer *p, const void *arg) {
    for (struct launch *const *l = arg; *l; l++)
        if (records_of(p, (*l)->corr) < (*l)->records)
            return false;
    return true;
}

static bool has_stats_dropped(const struct peer *p, const void *arg) {
    return p->stats_frames > 0 && p->stats.dropped_no_daemon >= *(const uint64_t *)arg;
}

/* ---- checks over what came ---- */

static void check_hello(const struct peer *p, uint32_t status, uint32_t origin, const char *what) {
    check(p->hellos == 1 && p->ev[0].kind == EV_HELLO, "%s: the HELLO comes first, once", what);
    check(p->hello.status == status, "%s: HELLO status %u, want %u (%s)", what, p->hello.status,
          status, p->hello.message);
    check(p->hello.origin == origin, "%s: HELLO origin %u, want %u", what, p->hello.origin, origin);
}

/* Each launch's records are exactly the scripted ones. */
static void check_records(const struct peer *p, struct launch *const *want, const char *what) {
    for (struct launch *const *l = want; *l; l++) {
        int got = 0;
        for (int i = 0; i < p->n; i++) {
            const struct event *e = &p->ev[i];
            if (e->kind != EV_RECORD || e->corr != (*l)->corr)
                continue;
            bool known = false;
            for (int k = 0; k < (*l)->records; k++)
                known |= e->start == (*l)->start[k] && e->end == (*l)->end[k];
            check(known && strcmp(e->name, (*l)->name) == 0,
                  "%s: corr %u: a record not scripted (%s)", what, e->corr, e->name);
            got++;
        }
        check(got == (*l)->records, "%s: corr %u: %d records, want %d", what, (*l)->corr, got,
              (*l)->records);
    }
}

static void check_none(const struct peer *p, const struct launch *l, const char *what) {
    check(records_of(p, l->corr) == 0, "%s: corr %u has records", what, l->corr);
}

/* handle named `name` exactly once, before the first record of `first` (its first launch). */
static void check_named(const struct peer *p, uint64_t handle, const char *name,
                        const struct launch *first, const char *what) {
    int at = -1, times = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->ev[i].kind == EV_NAME && p->ev[i].handle == handle) {
            times++;
            at = at < 0 ? i : at;
            check(strcmp(p->ev[i].name, name) == 0, "%s: handle %#" PRIx64 " named '%s', want '%s'",
                  what, handle, p->ev[i].name, name);
        }
    }
    check(times == 1, "%s: handle %#" PRIx64 " named %d times, want once", what, handle, times);
    int rec = index_of_record(p, first->corr);
    check(at >= 0 && rec > at, "%s: the name of %#" PRIx64 " (at %d) after its records (at %d)",
          what, handle, at, rec);
}

static int names_in(const struct peer *p) {
    int n = 0;
    for (int i = 0; i < p->n; i++)
        n += p->ev[i].kind == EV_NAME;
    return n;
}

/* The library's end is closed: the descriptor no longer names that socket. */
static bool closed_by_library(int fd, ino_t ino) {
    struct stat st;
    return fstat(fd, &st) != 0 || st.st_ino != ino;
}

static ino_t inode_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* The library's thread blocks every signal a process can block. */
static void check_thread_mask(void) {
    char path[300], line[256];
    bool found = false;
    DIR *dir = opendir("/proc/self/task");
    for (struct dirent *d; dir && (d = readdir(dir));) {
        snprintf(path, sizeof(path), "/proc/self/task/%s/status", d->d_name);
        FILE *f = fopen(path, "r");
        bool ours = false;
        unsigned long long blocked = 0;
        while (f && fgets(line, sizeof(line), f)) {
            ours |= strncmp(line, "Name:\tncclprobe-cupti", 21) == 0;
            sscanf(line, "SigBlk: %llx", &blocked);
        }
        if (f)
            fclose(f);
        if (!ours)
            continue;
        found = true;
        unsigned long long want =
            0x7fffffffull & ~((1ull << (SIGKILL - 1)) | (1ull << (SIGSTOP - 1)));
        check((blocked & want) == want, "the library's thread blocks %#llx, want %#llx", blocked,
              want);
    }
    if (dir)
        closedir(dir);
    check(found, "no ncclprobe-cupti thread");
}

/* Waits up to ms for cond(arg). */
static bool wait_for(bool (*cond)(const void *), const void *arg, int ms) {
    for (int waited = 0; !cond(arg); waited += 10) {
        if (waited >= ms)
            return false;
        progs_sleep_us(10000);
    }
    return true;
}

struct closed_arg {
    int fd;
    ino_t ino;
};

static bool library_closed(const void *arg) {
    const struct closed_arg *c = arg;
    return closed_by_library(c->fd, c->ino);
}

static bool double_drained(const void *arg) {
    (void)arg;
    return cupti_replay_pending() == 0;
}

static uint64_t records_in(struct launch *const *ls) {
    uint64_t n = 0;
    for (; *ls; ls++)
        n += (uint64_t)(*ls)->records;
    return n;
}

/* ncclprobe's go-ahead on a connection it was handed. */
static void send_start(struct peer *p) {
    char go = NP_WIRE_START;
    check(send(p->fd, &go, 1, MSG_NOSIGNAL) == 1, "cannot send START");
}

/* Attaches on a new pair, sends START and reads the HELLO; the peer is ours to close. */
static struct attach_call attach_peer(struct peer *p, const char *what) {
    int sv[2];
    new_pair(sv);
    struct attach_call a = attach_blocked(sv[1]);
    check(a.rc == 0, "%s: attach returned %d", what, a.rc);
    peer_open(p, sv[0]);
    send_start(p);
    check(read_until(p, has_hello, NULL, WAIT_MS), "%s: no HELLO", what);
    return a;
}

/* Launches of all three handles on an active connection: exactly their records, each handle
 * named once before the records of its first launch, and nothing of `not_sent`. */
static void check_named_launches(struct peer *p, struct launch *const *not_sent, const char *what) {
    struct launch *l[] = {drv_launch(handles.fn, DRV_KERNEL),
                          drv_launch((CUfunction)handles.kernel, LIB_KERNEL),
                          rt_launch(),
                          graph_launch(),
                          drv_launch(handles.fn, DRV_KERNEL),
                          rt_launch(),
                          NULL};
    check(records_in(l) == 7, "%s: the double took %" PRIu64 " records, want 7", what,
          records_in(l));
    check(read_until(p, has_records, l, WAIT_MS), "%s: records missing", what);
    check_records(p, l, what);
    for (; not_sent && *not_sent; not_sent++)
        check_none(p, *not_sent, what);
    check_named(p, (uint64_t)(uintptr_t)handles.fn, DRV_KERNEL, l[0], what);
    check_named(p, (uint64_t)(uintptr_t)handles.kernel, LIB_KERNEL, l[1], what);
    check_named(p, (uint64_t)(uintptr_t)rt_stub, RT_KERNEL, l[2], what);
    check(names_in(p) == 3, "%s: %d names, want 3", what, names_in(p));
    check(p->bad_frames == 0, "%s: %d malformed frames", what, p->bad_frames);
    /* the double presents itself as the CUPTI of its headers, whose records it writes */
    check(p->cupti_frames == 1 && p->cupti.api_version == CUPTI_API_VERSION &&
              p->cupti.support == NP_CUPTI_KNOWN && p->cupti.layouts_version == CUPTI_API_VERSION,
          "%s: %d CUPTI frames, API version %u (want %u), layouts %u of %u", what, p->cupti_frames,
          p->cupti.api_version, (unsigned)CUPTI_API_VERSION, p->cupti.support,
          p->cupti.layouts_version);
}

/* live: loaded into a process that never had it; quiet after the peer closes; woken again. */
static void mode_live(void) {
    struct launch *before[] = {drv_launch(handles.fn, DRV_KERNEL), rt_launch(), NULL};
    check(records_in(before) == 0, "live: the double took records before any subscriber");

    /* silent, CUPTI untouched, until START */
    struct peer p;
    int sv[2];
    new_pair(sv);
    struct attach_call a = attach_blocked(sv[1]);
    check(a.rc == 0, "live: attach returned %d", a.rc);
    peer_open(&p, sv[0]);
    check(!read_until(&p, has_hello, NULL, 400) && p.n == 0, "live: %d frames before START", p.n);
    check(!cupti_replay_subscribed(), "live: CUPTI on before START");
    send_start(&p);
    check(read_until(&p, has_hello, NULL, WAIT_MS), "live: no HELLO after START");
    long subscriber = cupti_replay_subscriber_tid();
    check(subscriber != 0 && subscriber != a.tid,
          "live: CUPTI turned on on the attaching thread (%ld)", subscriber);
    check_hello(&p, NP_HELLO_ACTIVE, NP_ORIGIN_INJECTED, "live");
    check_thread_mask();
    check_named_launches(&p, before, "live");

    /* the peer goes: the library closes its end, then converts and sends nothing */
    struct closed_arg gone = {.fd = a.fd, .ino = inode_of(a.fd)};
    peer_close(&p);
    check(wait_for(library_closed, &gone, WAIT_MS), "quiet: the library kept its end open");
    struct launch *quiet[] = {drv_launch(handles.fn, DRV_KERNEL), rt_launch(), NULL};
    uint64_t dropped = records_in(quiet);
    check(dropped == 2, "quiet: the double took %" PRIu64 " records, want 2", dropped);
    check(wait_for(double_drained, NULL, WAIT_MS), "quiet: the library stopped flushing CUPTI");

    /* a new attach wakes it: names again, and the quiet records were dropped, not kept */
    struct peer q;
    attach_peer(&q, "wake");
    check_hello(&q, NP_HELLO_ACTIVE, NP_ORIGIN_INJECTED, "wake");
    check_named_launches(&q, quiet, "wake");
    check(read_until(&q, has_stats_dropped, &dropped, WAIT_MS), "wake: no STATS");
    check(q.stats.dropped_no_daemon == dropped && q.stats.dropped_queue_full == 0,
          "wake: STATS dropped_no_daemon %" PRIu64 " (want %" PRIu64 "), queue_full %" PRIu64,
          q.stats.dropped_no_daemon, dropped, q.stats.dropped_queue_full);
    peer_close(&q);
}

static bool peer_ended(const struct peer *p, const void *arg) {
    (void)arg;
    return p->eof;
}

/* start: loaded by CUDA (InitializeInjection) with no daemon at its path; an attach wakes it. */
static void mode_start(void) {
    setenv(NP_WIRE_SOCKET_ENV, "/nonexistent-ncclprobe-test/cupti.sock", 1);
    check(lib.initialize() == 1, "start: InitializeInjection failed");
    check(!cupti_replay_subscribed(), "start: CUPTI on with no daemon");
    struct launch *before[] = {drv_launch(handles.fn, DRV_KERNEL), NULL};

    struct peer p;
    attach_peer(&p, "start");
    check_hello(&p, NP_HELLO_ACTIVE, NP_ORIGIN_START, "start");
    check_named_launches(&p, before, "start");

    /* a second attach replaces the connection: the first one ends */
    struct peer q;
    attach_peer(&q, "start wake");
    check(read_until(&p, peer_ended, NULL, WAIT_MS), "start wake: the old connection stays");
    check_hello(&q, NP_HELLO_ACTIVE, NP_ORIGIN_START, "start wake");
    check_named_launches(&q, NULL, "start wake");
    check(lib.initialize() == 1, "start: a second InitializeInjection");
    peer_close(&p);
    peer_close(&q);
}

/* busy: another profiler holds CUPTI; the next attach after it let go turns CUPTI on. */
static void mode_busy(void) {
    setenv(CUPTI_REPLAY_BUSY_ENV, "nsys-test", 1);
    struct peer p;
    attach_peer(&p, "busy");
    check_hello(&p, NP_HELLO_CUPTI_BUSY, NP_ORIGIN_INJECTED, "busy");
    check(strstr(p.hello.message, "nsys-test") != NULL, "busy: the holder is not named: %s",
          p.hello.message);
    struct launch *l[] = {drv_launch(handles.fn, DRV_KERNEL), rt_launch(), NULL};
    check(records_in(l) == 0, "busy: records taken without a subscriber");
    read_until(&p, peer_ended, NULL, 500); /* whatever comes in half a second */
    check(names_in(&p) == 0 && p.n == 1 + p.stats_frames, "busy: %d frames beyond the HELLO",
          p.n - 1);

    unsetenv(CUPTI_REPLAY_BUSY_ENV);
    struct peer q;
    attach_peer(&q, "busy then free");
    check_hello(&q, NP_HELLO_ACTIVE, NP_ORIGIN_INJECTED, "busy then free");
    check_named_launches(&q, l, "busy then free");
    peer_close(&p);
    peer_close(&q);
}

static bool fd_open(int fd) {
    return fcntl(fd, F_GETFD) >= 0;
}

/* file: the library writes a trace file (NCCLPROBE_CUPTI_OUTPUT): no socket is taken. */
static void mode_file(const char *trace) {
    setenv("NCCLPROBE_CUPTI_OUTPUT", trace, 1);
    check(lib.initialize() == 1, "file: InitializeInjection failed");
    int sv[2];
    new_pair(sv);
    struct attach_call a = attach_blocked(sv[1]);
    check(a.rc == -EEXIST, "file: attach returned %d, want -EEXIST", a.rc);
    check(fd_open(sv[1]), "file: the refused descriptor was closed");
    close(sv[0]);
    close(sv[1]);
}

/* badfd: what is no connected AF_UNIX stream socket is refused and left open; then a good one
 * is taken. */
static void mode_badfd(void) {
    int pfd[2], dg[2];
    if (pipe(pfd) != 0 || socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, dg) != 0)
        exit(PROGS_EXIT_RUNTIME);
    check(attach_blocked(-1).rc == -EBADF, "badfd: -1 not refused with -EBADF");
    check(attach_blocked(pfd[0]).rc == -ENOTSOCK, "badfd: a pipe not refused with -ENOTSOCK");
    check(attach_blocked(dg[1]).rc == -EPROTOTYPE, "badfd: a datagram socket not refused");
    int lone = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    check(attach_blocked(lone).rc == -ENOTCONN, "badfd: an unconnected socket not refused");
    check(fd_open(lone), "badfd: the unconnected socket was closed");
    close(lone);
    check(fd_open(pfd[0]) && fd_open(dg[1]), "badfd: a refused descriptor was closed");
    close(pfd[1]);
    check(attach_blocked(pfd[1]).rc == -EBADF, "badfd: a closed descriptor not refused");
    /* taken, then let go: ends before START; says something else */
    for (int i = 0; i < 2; i++) {
        int sv[2];
        new_pair(sv);
        struct closed_arg gone = {.fd = sv[1], .ino = inode_of(sv[1])};
        check(attach_blocked(sv[1]).rc == 0, "badfd: a good descriptor refused");
        if (i == 1)
            check(send(sv[0], "?", 1, MSG_NOSIGNAL) == 1, "badfd: cannot send");
        else
            shutdown(sv[0], SHUT_WR);
        check(wait_for(library_closed, &gone, WAIT_MS), "badfd: %s: the library kept it",
              i ? "not START" : "no START");
        close(sv[0]);
    }
    struct peer p;
    attach_peer(&p, "badfd then good");
    check_hello(&p, NP_HELLO_ACTIVE, NP_ORIGIN_INJECTED, "badfd then good");
    close(pfd[0]);
    close(dg[0]);
    close(dg[1]);
    peer_close(&p);
}

static void usage(void) {
    fprintf(stderr, "usage: cupti_attach_check --lib LIBNCCLPROBE_CUPTI "
                    "live|start|busy|badfd|file TRACE\n");
    exit(PROGS_EXIT_USAGE);
}

int main(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[1], "--lib") != 0)
        usage();
    const char *mode = argv[3];
    bool file = strcmp(mode, "file") == 0;
    if (file && argc != 5)
        usage();
    /* a slow CUPTI start: an attach must not wait for it */
    setenv(CUPTI_REPLAY_SUBSCRIBE_DELAY_ENV, "300", 1);
    make_handles(); /* before the library exists in the process */
    load_library(argv[2]);
    if (strcmp(mode, "live") == 0)
        mode_live();
    else if (strcmp(mode, "start") == 0)
        mode_start();
    else if (strcmp(mode, "busy") == 0)
        mode_busy();
    else if (strcmp(mode, "badfd") == 0)
        mode_badfd();
    else if (file)
        mode_file(argv[4]);
    else
        usage();
    printf("{\"mode\":\"%s\",\"passed\":%d,\"failed\":%d,\"attach_us\":[", mode, passed, failed);
    for (int i = 0; i < attaches; i++)
        printf("%s%ld", i ? "," : "", attach_us[i]);
    printf("]}\n");
    fflush(stdout);
    return failed ? 1 : 0;
}
