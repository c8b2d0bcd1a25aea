/* sink.c - the bounded frame queue and the one background thread of
 * libncclprobe_cupti.so (see sink.h). Application threads only ever take
 * the queue lock for a pointer swap; sockets, files and CUPTI flushes
 * happen on our thread. */
#define _GNU_SOURCE
#include "cupti/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
    bool running, stopping, done;
    pthread_t thread;
    struct np_sink_hooks hooks;
    pid_t pid;
    /* socket mode */
    char socket_path[108];
    int fd;
    bool activated; /* hooks.activate ran (once: CUPTI stays on) */
    uint32_t status;
    char message[256];
    /* file mode */
    FILE *file;
    bool file_has_events;
    struct np_sink_counters counters;
} sink = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done_cond = PTHREAD_COND_INITIALIZER,
    .fd = -1,
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

struct np_frame *np_frame_new(size_t cap) {
    struct np_frame *f = malloc(sizeof(*f) + cap);
    if (!f)
        return NULL;
    f->next = NULL;
    f->cap = (uint32_t)cap;
    f->len = sizeof(struct np_wire_activity);
    f->count = 0;
    return f;
}

void np_sink_submit(struct np_frame *f) {
    struct np_wire_activity *a = (struct np_wire_activity *)f->data;
    fill_header(&a->hdr, NP_WIRE_ACTIVITY, f->len);
    a->count = f->count;
    a->pad = 0;

    pthread_mutex_lock(&sink.lock);
    bool keep = sink.running && !sink.done && sink.queued_bytes + f->len <= QUEUE_CAP_BYTES;
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
        np_sink_count(&sink.counters.dropped_queue_full, f->count);
        free(f);
    }
}

/* ---- socket mode -------------------------------------------------------- */

static bool send_all(const void *data, size_t len) {
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = send(sink.fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(sink.fd);
            sink.fd = -1;
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static void send_hello(void) {
    struct np_wire_hello h;
    memset(&h, 0, sizeof(h));
    fill_header(&h.hdr, NP_WIRE_HELLO, sizeof(h));
    h.status = sink.status;
    h.clock_mono_ns = np_clock_ns();
    snprintf(h.message, sizeof(h.message), "%s", sink.message);
    send_all(&h, sizeof(h));
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

static bool try_connect(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sink.socket_path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        return false;
    }
    /* A stalled daemon costs this thread at most the timeout per frame. */
    struct timeval tv = {.tv_sec = 0, .tv_usec = SEND_TIMEOUT_MS * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sink.fd = fd;
    return true;
}

/* Connected, and CUPTI turned on for this first daemon if it was not yet. */
static void on_connected(void) {
    if (!sink.activated && sink.hooks.activate) {
        sink.status = sink.hooks.activate(sink.message, sizeof(sink.message));
        sink.activated = true;
    }
    send_hello();
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

static void write_trailer(void) {
    struct np_sink_counters *c = &sink.counters;
    fprintf(sink.file,
            "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"tool\":\"ncclprobe_cupti\","
            "\"clock\":\"CLOCK_MONOTONIC\",\"status\":%u,\"message\":",
            sink.status);
    json_string(sink.file, sink.message, strlen(sink.message));
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
            write_frame_events(list);
            np_sink_count(&sink.counters.records_sent, list->count);
        } else if (sink.fd >= 0 && send_all(list->data, list->len)) {
            np_sink_count(&sink.counters.records_sent, list->count);
        } else {
            np_sink_count(&sink.counters.dropped_no_daemon, list->count);
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

static bool wait_period(void) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += FLUSH_PERIOD_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&sink.lock);
    if (!sink.stopping && !sink.head)
        pthread_cond_timedwait(&sink.wake, &sink.lock, &until);
    bool stopping = sink.stopping;
    pthread_mutex_unlock(&sink.lock);
    return !stopping;
}

static void *sink_thread(void *arg) {
    (void)arg;
    uint64_t next_connect = now_ms() + CONNECT_PERIOD_MS, next_stats = now_ms() + STATS_PERIOD_MS;
    for (;;) {
        bool go_on = wait_period();
        uint64_t now = now_ms();
        if (!sink.file && sink.fd < 0 && now >= next_connect) {
            next_connect = now + CONNECT_PERIOD_MS;
            if (try_connect())
                on_connected();
        }
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
    pthread_cond_broadcast(&sink.done_cond);
    pthread_mutex_unlock(&sink.lock);
    return NULL;
}

int np_sink_start(const char *file, const char *socket_path, const struct np_sink_hooks *hooks) {
    sink.pid = getpid();
    sink.hooks = *hooks;
    if (file) {
        sink.file = fopen(file, "we");
        if (!sink.file)
            return -errno;
        fputs("{\"traceEvents\":[", sink.file);
        fflush(sink.file);
    } else {
        if (strlen(socket_path) >= sizeof(sink.socket_path))
            return -ENAMETOOLONG;
        snprintf(sink.socket_path, sizeof(sink.socket_path), "%s", socket_path);
        /* A daemon already listening: CUPTI goes on now, on the thread
         * initializing CUDA, before any context exists. */
        if (try_connect())
            on_connected();
    }
    sink.running = true;
    /* Our thread must not take the application's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&sink.thread, NULL, sink_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        sink.running = false;
        return -err;
    }
    pthread_setname_np(sink.thread, "ncclprobe-cupti");
    return 0;
}

void np_sink_set_status(uint32_t status, const char *message) {
    sink.status = status;
    sink.activated = true;
    snprintf(sink.message, sizeof(sink.message), "%s", message);
}

void np_sink_stop(int timeout_ms) {
    if (!sink.running)
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
    sink.stopping = true;
    pthread_cond_signal(&sink.wake);
    int err = 0;
    while (!sink.done && err != ETIMEDOUT)
        err = pthread_cond_timedwait(&sink.done_cond, &sink.lock, &until);
    bool done = sink.done;
    pthread_mutex_unlock(&sink.lock);
    if (done)
        pthread_join(sink.thread, NULL);
    sink.running = false;
}

void np_sink_forget_after_fork(void) {
    /* The child has no sink thread; its socket fd is the parent's; a lock
     * another thread held at fork() stays held in the child: make a new one. */
    pthread_mutex_init(&sink.lock, NULL);
    sink.running = false;
    sink.head = sink.tail = NULL;
    sink.queued_bytes = 0;
    if (sink.fd >= 0)
        close(sink.fd);
    sink.fd = -1;
    sink.file = NULL; /* the parent's stream: never written or closed here */
}
