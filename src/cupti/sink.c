/* sink.c - the bounded frame queue and the one background thread of
 * libncclprobe_cupti.so (see sink.h). Application threads only ever take
 * the queue lock for a pointer swap, and read the connection number with
 * one atomic load; sockets, files and CUPTI flushes happen on our thread.
 * A descriptor handed over by an attach waits in pending_fd until our
 * thread takes it up (within a flush period); then in starting_fd until
 * ncclprobe sends NP_WIRE_START on it (gpu_wire.h): only then is CUPTI
 * turned on and the HELLO sent. The attaching thread (a thread ncclprobe
 * stopped wherever it was, maybe inside this file) takes no lock: it reads
 * running/stopping and swaps pending_fd atomically. */
#define _GNU_SOURCE
#include "cupti/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ncclprobe/gpu_wire.h"

#define QUEUE_CAP_BYTES (32u << 20) /* frames waiting for the thread */
#define FLUSH_PERIOD_MS 100
#define CONNECT_PERIOD_MS 1000
#define STATS_PERIOD_MS 1000
#define SEND_TIMEOUT_MS 200

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, done_cond;
    struct np_frame *head, *tail;
    size_t queued_bytes;
    bool running, stopping, done; /* running, stopping: atomic (written under lock) */
    pthread_t thread;
    struct np_sink_hooks hooks;
    pid_t pid;
    uint32_t origin;
    /* socket mode */
    char socket_path[108]; /* "": descriptors handed over only, no reconnecting */
    int fd;                /* our thread's connection; -1: none */
    int pending_fd;        /* atomic: handed over, not taken up yet; -1: none */
    int starting_fd;       /* taken up, waiting for NP_WIRE_START (our thread); -1: none */
    uint32_t connection;   /* atomic: the current connection's number; 0: none */
    uint32_t connections;  /* connections made so far (our thread) */
    bool activated;        /* hooks.activate ran (CUPTI stays on once on) */
    uint32_t status;
    char message[256];
    struct np_wire_cupti cupti; /* the CUPTI in use, said after the HELLO */
    bool have_cupti;
    /* file mode */
    bool file_mode;
    FILE *file;
    bool file_has_events;
    struct np_sink_counters counters;
} sink = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done_cond = PTHREAD_COND_INITIALIZER,
    .fd = -1,
    .pending_fd = -1,
    .starting_fd = -1,
};

uint64_t np_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ms(void) {
    return np_clock_ns() / 1000000;
}

struct np_sink_counters *np_sink_counters(void) {
    return &sink.counters;
}

void np_sink_count(uint64_t *counter, uint64_t n) {
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static void fill_header(struct np_wire_header *h, uint16_t type, uint32_t size) {
    h->magic = NP_WIRE_MAGIC;
    h->version = NP_WIRE_VERSION;
    h->type = type;
    h->size = size;
    h->pid = (uint32_t)sink.pid;
}

struct np_frame *np_frame_new(uint16_t type, size_t cap) {
    struct np_frame *f = malloc(sizeof(*f) + cap);
    if (!f)
        return NULL;
    f->next = NULL;
    f->cap = (uint32_t)cap;
    f->len = sizeof(struct np_wire_activity); /* = sizeof(struct np_wire_names) */
    f->count = 0;
    f->type = type;
    return f;
}

static void count_records(const struct np_frame *f, uint64_t *counter) {
    if (f->type == NP_WIRE_ACTIVITY)
        np_sink_count(counter, f->count);
}

bool np_sink_submit(struct np_frame *f) {
    struct np_wire_activity *a = (struct np_wire_activity *)f->data; /* or np_wire_names */
    fill_header(&a->hdr, f->type, f->len);
    a->count = f->count;
    a->pad = 0;

    pthread_mutex_lock(&sink.lock);
    bool keep = __atomic_load_n(&sink.running, __ATOMIC_ACQUIRE) && !sink.done &&
                sink.queued_bytes + f->len <= QUEUE_CAP_BYTES;
    if (keep) {
        if (sink.tail)
            sink.tail->next = f;
        else
            sink.head = f;
        sink.tail = f;
        sink.queued_bytes += f->len;
        if (sink.queued_bytes > QUEUE_CAP_BYTES / 8)
            pthread_cond_signal(&sink.wake);
    }
    pthread_mutex_unlock(&sink.lock);
    if (!keep) {
        count_records(f, &sink.counters.dropped_queue_full);
        free(f);
    }
    return keep;
}

uint32_t np_sink_connection(void) {
    return __atomic_load_n(&sink.connection, __ATOMIC_ACQUIRE);
}

bool np_sink_wants_records(void) {
    return sink.file_mode || np_sink_connection() != 0;
}

/* ---- socket mode -------------------------------------------------------- */

/* No connection from here on: application threads see 0 first. */
static void drop_connection(void) {
    __atomic_store_n(&sink.connection, 0, __ATOMIC_RELEASE);
    if (sink.fd >= 0)
        close(sink.fd);
    sink.fd = -1;
}

static bool send_all(const void *data, size_t len) {
    const uint8_t *p = data;
    while (len > 0 && sink.fd >= 0) {
        ssize_t n = send(sink.fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            drop_connection();
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return len == 0;
}

static void send_hello(void) {
    struct np_wire_hello h;
    memset(&h, 0, sizeof(h));
    fill_header(&h.hdr, NP_WIRE_HELLO, sizeof(h));
    h.status = sink.status;
    h.origin = sink.origin;
    h.clock_mono_ns = np_clock_ns();
    snprintf(h.message, sizeof(h.message), "%s", sink.message);
    send_all(&h, sizeof(h));
    if (!sink.have_cupti)
        return;
    fill_header(&sink.cupti.hdr, NP_WIRE_CUPTI, sizeof(sink.cupti));
    send_all(&sink.cupti, sizeof(sink.cupti));
}

static void send_stats(void) {
    struct np_wire_stats st;
    memset(&st, 0, sizeof(st));
    fill_header(&st.hdr, NP_WIRE_STATS, sizeof(st));
    struct np_sink_counters *c = &sink.counters;
    st.records_sent = __atomic_load_n(&c->records_sent, __ATOMIC_RELAXED);
    st.dropped_by_cupti = __atomic_load_n(&c->dropped_by_cupti, __ATOMIC_RELAXED);
    st.dropped_queue_full = __atomic_load_n(&c->dropped_queue_full, __ATOMIC_RELAXED);
    st.dropped_no_daemon = __atomic_load_n(&c->dropped_no_daemon, __ATOMIC_RELAXED);
    st.dropped_no_buffer = __atomic_load_n(&c->dropped_no_buffer, __ATOMIC_RELAXED);
    st.records_unknown = __atomic_load_n(&c->records_unknown, __ATOMIC_RELAXED);
    send_all(&st, sizeof(st));
}

/* The daemon's socket path; -1 when nobody listens there. */
static int try_connect(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sink.socket_path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Blocking sends, and a stalled daemon costs this thread at most the
 * timeout per frame. 0 or -errno. */
static int set_send_options(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
        return -errno;
    struct timeval tv = {.tv_sec = 0, .tv_usec = SEND_TIMEOUT_MS * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
        return -errno;
    return 0;
}

/* fd becomes the connection (the previous one is closed): application
 * threads see a new connection number, then CUPTI is turned on if it is
 * not (the first connection, or another profiler held it until now). In
 * that order: a launch CUPTI reports already sees the connection, so it
 * names its handle before its records (names.c). The HELLO goes first all
 * the same: only this thread sends, and it sends the queue after. */
static void use_connection(int fd) {
    drop_connection();
    if (set_send_options(fd) < 0) {
        close(fd);
        return;
    }
    sink.fd = fd;
    __atomic_store_n(&sink.connection, ++sink.connections, __ATOMIC_RELEASE);
    if (sink.hooks.activate && (!sink.activated || sink.status == NP_HELLO_CUPTI_BUSY)) {
        sink.status = sink.hooks.activate(sink.message, sizeof(sink.message));
        sink.activated = true;
    }
    send_hello();
}

/* ncclprobe never writes to us: readable means it closed the connection
 * (anything else it sent is read and ignored). */
static void check_peer(void) {
    struct pollfd p = {.fd = sink.fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) {
        drop_connection();
        return;
    }
    char buf[256];
    ssize_t n = recv(sink.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        drop_connection();
}

static void forget_starting(void) {
    if (sink.starting_fd >= 0)
        close(sink.starting_fd);
    sink.starting_fd = -1;
}

/* A descriptor handed over by np_sink_adopt, if one waits: it replaces the
 * connection at once, and is used once ncclprobe says START. */
static void take_pending(void) {
    int fd = __atomic_exchange_n(&sink.pending_fd, -1, __ATOMIC_ACQ_REL);
    if (fd < 0)
        return;
    drop_connection();
    forget_starting();
    sink.starting_fd = fd;
}

/* NP_WIRE_START on the descriptor handed over: it becomes the connection.
 * Anything else, or its end, forgets it. */
static void check_start(void) {
    char byte = 0;
    ssize_t n = recv(sink.starting_fd, &byte, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n == 1 && byte == NP_WIRE_START) {
        int fd = sink.starting_fd;
        sink.starting_fd = -1;
        use_connection(fd);
        return;
    }
    forget_starting();
}

static void reconnect(void) {
    int fd = try_connect();
    if (fd >= 0)
        use_connection(fd);
}

/* ---- file mode: Chrome trace JSON --------------------------------------- */

static void json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Microseconds with exact nanosecond decimals: no floating point. */
static void json_us(FILE *f, uint64_t ns) {
    fprintf(f, "%" PRIu64 ".%03" PRIu64, ns / 1000, ns % 1000);
}

static void write_event(const struct np_gpu_record *r) {
    FILE *f = sink.file;
    uint64_t dur = r->end_ns > r->start_ns ? r->end_ns - r->start_ns : 0;
    bool api = r->kind == NP_GPU_API_RUNTIME || r->kind == NP_GPU_API_DRIVER;

    fputs(sink.file_has_events ? ",\n" : "\n", f);
    sink.file_has_events = true;
    fputs("{\"name\":", f);
    if (r->kind == NP_GPU_MEMCPY)
        fprintf(f, "\"Memcpy %s\"", np_gpu_copy_kind_name(r->copy_kind));
    else if (r->kind == NP_GPU_MEMSET)
        fputs("\"Memset\"", f);
    else
        json_string(f, r->name, r->name_len);
    static const char *const cats[] = {"",           "GPU_Kernel",   "GPU_Memcpy",
                                       "GPU_Memset", "CUDA_Runtime", "CUDA_Driver"};
    fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":", cats[r->kind],
            (int)sink.pid, api ? r->thread_id : r->stream);
    json_us(f, r->start_ns);
    fputs(",\"dur\":", f);
    json_us(f, dur);
    fprintf(f, ",\"args\":{\"correlationId\":%u", r->correlation_id);
    if (api) {
        fprintf(f, ",\"cbid\":%u}}", r->cbid);
        return;
    }
    fprintf(f,
            ",\"start_ns\":%" PRIu64 ",\"end_ns\":%" PRIu64 ",\"device\":%u,\"context\":%u"
            ",\"stream\":%u,\"graphId\":%u,\"graphNodeId\":%" PRIu64,
            r->start_ns, r->end_ns, r->device, r->context, r->stream, r->graph_id,
            r->graph_node_id);
    if (r->kind == NP_GPU_KERNEL)
        fprintf(f, ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u]", r->grid[0], r->grid[1], r->grid[2],
                r->block[0], r->block[1], r->block[2]);
    else
        fprintf(f, ",\"bytes\":%" PRIu64, r->bytes);
    if (r->kind == NP_GPU_MEMCPY)
        fprintf(f, ",\"copyKind\":\"%s\"", np_gpu_copy_kind_name(r->copy_kind));
    fputs("}}", f);
}

static void write_frame_events(const struct np_frame *fr) {
    uint32_t off = sizeof(struct np_wire_activity);
    for (uint32_t i = 0; i < fr->count && off + NP_GPU_RECORD_FIXED <= fr->len; i++) {
        const struct np_gpu_record *r = (const struct np_gpu_record *)(fr->data + off);
        write_event(r);
        off += r->size;
    }
    fflush(sink.file);
}

/* otherData's "cupti": the library in use, its version and what is lost. */
static void write_cupti(void) {
    const struct np_wire_cupti *c = &sink.cupti;
    fputs(",\"cupti\":{\"library\":", sink.file);
    json_string(sink.file, c->path, strnlen(c->path, sizeof(c->path)));
    fprintf(sink.file, ",\"api_version\":%u,\"support\":%u,\"layouts_from\":", c->api_version,
            c->support);
    json_string(sink.file, c->cuda, strnlen(c->cuda, sizeof(c->cuda)));
    fputs(",\"degraded\":", sink.file);
    json_string(sink.file, c->degraded, strnlen(c->degraded, sizeof(c->degraded)));
    fputc('}', sink.file);
}

static void write_trailer(void) {
    struct np_sink_counters *c = &sink.counters;
    fprintf(sink.file,
            "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"tool\":\"ncclprobe_cupti\","
            "\"clock\":\"CLOCK_MONOTONIC\",\"status\":%u,\"message\":",
            sink.status);
    json_string(sink.file, sink.message, strlen(sink.message));
    if (sink.have_cupti)
        write_cupti();
    fprintf(sink.file,
            ",\"records\":%" PRIu64 ",\"dropped_records\":%" PRIu64
            ",\"dropped_queue_full\":%" PRIu64 ",\"dropped_no_buffer\":%" PRIu64 "}}\n",
            c->records_sent, c->dropped_by_cupti, c->dropped_queue_full, c->dropped_no_buffer);
    fclose(sink.file);
    sink.file = NULL;
}

/* ---- the thread ----------------------------------------------------------- */

static void deliver(struct np_frame *list) {
    while (list) {
        struct np_frame *next = list->next;
        if (sink.file) {
            if (list->type == NP_WIRE_ACTIVITY)
                write_frame_events(list);
            count_records(list, &sink.counters.records_sent);
        } else if (sink.fd >= 0 && send_all(list->data, list->len)) {
            count_records(list, &sink.counters.records_sent);
        } else {
            count_records(list, &sink.counters.dropped_no_daemon);
        }
        free(list);
        list = next;
    }
}

static struct np_frame *take_queue(void) {
    pthread_mutex_lock(&sink.lock);
    struct np_frame *list = sink.head;
    sink.head = sink.tail = NULL;
    sink.queued_bytes = 0;
    pthread_mutex_unlock(&sink.lock);
    return list;
}

/* Waits one flush period, or less when frames pile up or we are asked to
 * stop; while a descriptor waits for START, less when that comes. False
 * once stopping. */
static bool wait_period(void) {
    if (sink.starting_fd >= 0) {
        struct pollfd p = {.fd = sink.starting_fd, .events = POLLIN};
        poll(&p, 1, FLUSH_PERIOD_MS);
        return !__atomic_load_n(&sink.stopping, __ATOMIC_ACQUIRE);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += FLUSH_PERIOD_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&sink.lock);
    bool stopping = __atomic_load_n(&sink.stopping, __ATOMIC_ACQUIRE);
    if (!stopping && !sink.head && __atomic_load_n(&sink.pending_fd, __ATOMIC_ACQUIRE) < 0)
        pthread_cond_timedwait(&sink.wake, &sink.lock, &until);
    stopping = __atomic_load_n(&sink.stopping, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&sink.lock);
    return !stopping;
}

/* One period of the socket side: a descriptor handed over (and its START),
 * else a reconnect when it is due; whether the daemon is still there. */
static void tend_connection(uint64_t now, uint64_t *next_connect) {
    take_pending();
    if (sink.starting_fd >= 0)
        check_start();
    if (sink.socket_path[0] && sink.fd < 0 && sink.starting_fd < 0 && now >= *next_connect) {
        *next_connect = now + CONNECT_PERIOD_MS;
        reconnect();
    }
    if (sink.fd >= 0)
        check_peer();
}

static void *sink_thread(void *arg) {
    (void)arg;
    if (sink.hooks.started)
        sink.hooks.started();
    uint64_t next_connect = now_ms() + CONNECT_PERIOD_MS, next_stats = now_ms() + STATS_PERIOD_MS;
    for (;;) {
        bool go_on = wait_period();
        uint64_t now = now_ms();
        if (!sink.file_mode)
            tend_connection(now, &next_connect);
        if (go_on && sink.activated && sink.status == NP_HELLO_ACTIVE && sink.hooks.flush)
            sink.hooks.flush();
        deliver(take_queue());
        if (sink.fd >= 0 && now >= next_stats) {
            next_stats = now + STATS_PERIOD_MS;
            send_stats();
        }
        if (!go_on)
            break;
    }
    if (sink.fd >= 0)
        send_stats();
    if (sink.file)
        write_trailer();
    pthread_mutex_lock(&sink.lock);
    sink.done = true;
    int pending = __atomic_exchange_n(&sink.pending_fd, -1, __ATOMIC_ACQ_REL);
    pthread_cond_broadcast(&sink.done_cond);
    pthread_mutex_unlock(&sink.lock);
    if (pending >= 0)
        close(pending);
    forget_starting();
    return NULL;
}

/* File mode: the trace's head is written now. 0 or -errno. */
static int open_file(const char *file) {
    sink.file = fopen(file, "we");
    if (!sink.file)
        return -errno;
    sink.file_mode = true;
    fputs("{\"traceEvents\":[", sink.file);
    fflush(sink.file);
    return 0;
}

/* Socket mode with a path: a daemon already listening gets CUPTI turned
 * on now, on the thread initializing CUDA, before any context exists. */
static int connect_first(const char *socket_path) {
    if (strlen(socket_path) >= sizeof(sink.socket_path))
        return -ENAMETOOLONG;
    snprintf(sink.socket_path, sizeof(sink.socket_path), "%s", socket_path);
    reconnect();
    return 0;
}

/* Our thread, with every signal blocked: it must not take the
 * application's signals (it inherits the mask). 0 or -errno. */
static int start_thread(void) {
    sigset_t all, old;
    sigfillset(&all);
    int err = pthread_sigmask(SIG_SETMASK, &all, &old);
    if (err)
        return -err;
    err = pthread_create(&sink.thread, NULL, sink_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        return -err;
    pthread_setname_np(sink.thread, "ncclprobe-cupti");
    return 0;
}

int np_sink_start(const struct np_sink_config *cfg, const struct np_sink_hooks *hooks) {
    if (__atomic_load_n(&sink.running, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&sink.stopping, __ATOMIC_ACQUIRE))
        return -ESHUTDOWN;
    sink.pid = getpid();
    sink.hooks = *hooks;
    sink.origin = cfg->origin;
    int err = 0;
    if (cfg->file)
        err = open_file(cfg->file);
    else if (cfg->socket_path)
        err = connect_first(cfg->socket_path);
    if (err)
        return err;
    __atomic_store_n(&sink.pending_fd, cfg->fd, __ATOMIC_RELEASE);
    __atomic_store_n(&sink.running, true, __ATOMIC_RELEASE);
    err = start_thread();
    if (err) {
        __atomic_store_n(&sink.running, false, __ATOMIC_RELEASE);
        __atomic_store_n(&sink.pending_fd, -1, __ATOMIC_RELEASE); /* cfg->fd stays the caller's */
        drop_connection();
        if (sink.file)
            fclose(sink.file);
        sink.file = NULL;
        sink.file_mode = false;
    }
    return err;
}

bool np_sink_running(void) {
    return __atomic_load_n(&sink.running, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&sink.stopping, __ATOMIC_ACQUIRE);
}

/* Lock-free: the caller may be a thread stopped inside np_sink_submit. Our
 * thread takes the descriptor at its next period. */
int np_sink_adopt(int fd) {
    if (!np_sink_running())
        return -ESHUTDOWN;
    if (sink.file_mode)
        return -EEXIST;
    int old = __atomic_exchange_n(&sink.pending_fd, fd, __ATOMIC_ACQ_REL);
    if (old >= 0) /* two wakes before our thread took the first */
        close(old);
    return 0;
}

void np_sink_set_status(uint32_t status, const char *message) {
    sink.status = status;
    sink.activated = true;
    snprintf(sink.message, sizeof(sink.message), "%s", message);
}

void np_sink_set_cupti(const struct np_wire_cupti *info) {
    sink.cupti = *info;
    sink.have_cupti = true;
}

void np_sink_stop(int timeout_ms) {
    if (!__atomic_load_n(&sink.running, __ATOMIC_ACQUIRE))
        return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&sink.lock);
    __atomic_store_n(&sink.stopping, true, __ATOMIC_RELEASE);
    pthread_cond_signal(&sink.wake);
    int err = 0;
    while (!sink.done && err != ETIMEDOUT)
        err = pthread_cond_timedwait(&sink.done_cond, &sink.lock, &until);
    bool done = sink.done;
    pthread_mutex_unlock(&sink.lock);
    if (done)
        pthread_join(sink.thread, NULL);
    __atomic_store_n(&sink.running, false, __ATOMIC_RELEASE);
}

void np_sink_forget_after_fork(void) {
    /* The child has no sink thread; its socket fd is the parent's; a lock
     * another thread held at fork() stays held in the child: make a new one. */
    pthread_mutex_init(&sink.lock, NULL);
    __atomic_store_n(&sink.running, false, __ATOMIC_RELEASE);
    sink.head = sink.tail = NULL;
    sink.queued_bytes = 0;
    drop_connection(); /* quiet: no connection, nothing converted or sent */
    int pending = __atomic_exchange_n(&sink.pending_fd, -1, __ATOMIC_ACQ_REL);
    if (pending >= 0)
        close(pending);
    forget_starting();
    sink.file = NULL; /* the parent's stream: never written or closed here */
}
