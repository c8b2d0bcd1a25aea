/* inject.c - libncclprobe_cupti.so's entry points:
 *
 *   - InitializeInjection(): CUDA loads the library named by
 *     CUDA_INJECTION64_PATH and calls it once, inside cuInit, on the thread
 *     that first uses CUDA. The library then finds ncclprobe's socket
 *     (NCCLPROBE_CUPTI_SOCKET), now and once a second while unconnected.
 *   - ncclprobe_cupti_attach(fd, flags): ncclprobe loaded the library into
 *     the running process (src/inject) and calls this on a thread it
 *     hijacked, every signal blocked, with one end of a connected socket.
 *     The first call starts what InitializeInjection starts, on that
 *     descriptor alone (no socket path, no reconnecting); CUPTI goes on
 *     later, on our own thread, once ncclprobe sends NP_WIRE_START on the
 *     descriptor (it has probed our marker then), in a process whose CUDA
 *     contexts exist (CUPTI initializes lazily). A later call, or a call in
 *     a process that loaded us at start, is a wake: the new descriptor
 *     replaces the connection (and is used from its START on). It returns
 *     at once: it is part of that thread's pause.
 *
 * What it does:
 *   - At each launch-API callback (ENTER; the APIs are launch_api.c's) it
 *     calls ncclprobe_cupti_marker() with the call's correlation id on the
 *     launching thread. ncclprobe uprobes that function, so it pairs the id
 *     with that thread's launch event exactly (never through CUPTI's
 *     threadId). The first launch of each function handle on a connection
 *     also sends that handle's name (names.c).
 *   - It loads the process's CUPTI, 12.4 to 13.5 (cupti_api.c), calls
 *     nothing of it unless a CUDA driver answers (driver.c: CUPTI 13.2
 *     crashes without one), and reads its records by the layouts of its
 *     version (layouts.c); which CUPTI, and what it lacks, goes to
 *     ncclprobe after the HELLO (NP_WIRE_CUPTI).
 *   - It turns CUPTI activity on (kernels, memcpys, memsets) with a
 *     CLOCK_MONOTONIC timestamp callback, registered once before anything
 *     is enabled, so GPU times are on the clock BPF uses.
 *   - GPU records go to ncclprobe's socket (record's or the daemon's), or
 *     with NCCLPROBE_CUPTI_OUTPUT to a Chrome-trace JSON file (sink.c).
 * Until ncclprobe is reached CUPTI is not touched at all, so an idle
 * injection costs a connect() attempt a second. Once on, it stays on:
 * toggling CUPTI sessions breaks graph correlation ids in CUPTI 13.0. While
 * no ncclprobe listens the library is quiet (sink.h): nothing is sent or
 * converted, and the cost is CUPTI's own callbacks.
 * If another subscriber (torch.profiler, Nsight) holds CUPTI we log one line
 * and stay out (tried again at the next connection). Nothing here may
 * block, abort or throw into the app.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "cupti/activity.h"
#include "cupti/cupti_api.h"
#include "cupti/driver.h"
#include "cupti/graph_nodes.h"
#include "cupti/launch_api.h"
#include "cupti/names.h"
#include "cupti/sink.h"
#include "ncclprobe/gpu_wire.h"

#define NP_EXPORT __attribute__((visibility("default")))
#define EXIT_DRAIN_MS 1000

static struct {
    pthread_mutex_t lock; /* activation */
    bool initialized;     /* InitializeInjection or an attach started us */
    bool loaded_at_start; /* InitializeInjection ran: CUDA loaded us */
    bool exit_hooks;      /* atfork and atexit registered */
    bool active;
    bool file_mode;
    struct np_cupti_api api;
    struct np_cupti_layouts layouts; /* the record layouts read (layouts.h) */
    CUpti_SubscriberHandle subscriber;
} inj = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* InitializeInjection and attach, one at a time (attach never waits for it). */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

/* The correlation hand-off, and the fast path's launch. ncclprobe puts a
 * uprobe on this symbol; it starts with a 5-byte NOP, which Linux 6.18+
 * runs its uprobe on without a trap. params is CUPTI's params struct of
 * the call (its arguments by value) for the outermost launch API call of
 * the thread, NULL for a call made inside another (the driver call of a
 * runtime launch): while ncclprobe has this process on its fast path, BPF
 * takes the whole launch here, from it, instead of at an int3 uprobe on
 * the API function. The empty asm with the arguments as inputs keeps the
 * call and its argument registers in place at every optimization level. */
NP_EXPORT __attribute__((noinline, noipa)) void ncclprobe_cupti_marker(uint32_t correlation_id,
                                                                       uint32_t domain,
                                                                       uint32_t cbid,
                                                                       const void *params) {
    __asm__ volatile(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00" ::"r"(correlation_id), "r"(domain),
                     "r"(cbid), "r"(params)
                     : "memory");
}

/* The outermost launch API call this thread is in: its correlation id and
 * the frame of its ENTER callback. A later ENTER is nested only when it is
 * deeper on the stack, so an EXIT that never came cannot stick. */
static __thread uint32_t outer_corr;
static __thread uintptr_t outer_frame;

static const void *outermost_params(const CUpti_CallbackData *cb) {
    uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
    if (outer_corr && frame < outer_frame)
        return NULL;
    outer_corr = cb->correlationId;
    outer_frame = frame;
    /* an outermost call must never look nested: without params (CUPTI always has them;
     * a caller of a test double may not) the launch is still taken, its arguments unread */
    return cb->functionParams ? cb->functionParams : (const void *)1;
}

/* The launch's function handle named to ncclprobe, if this connection has
 * not had it yet (nothing at all while no ncclprobe listens). */
static void note_launch_name(bool runtime, CUpti_CallbackId cbid, const CUpti_CallbackData *cb) {
    uint32_t connection = np_sink_connection();
    struct np_launch_fn fn;
    if (connection && np_launch_function(runtime, cbid, cb->functionParams, &fn))
        np_names_note(connection, &fn, cb->symbolName);
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data) {
    (void)userdata;
    bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
    if (runtime || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
        const CUpti_CallbackData *cb = data;
        if (!cb)
            return;
        np_graph_nodes_api(cb->callbackSite, cb->correlationId);
        if (cb->callbackSite == CUPTI_API_ENTER) {
            ncclprobe_cupti_marker(cb->correlationId, (uint32_t)domain, cbid, outermost_params(cb));
            note_launch_name(runtime, cbid, cb);
        } else if (cb->callbackSite == CUPTI_API_EXIT && cb->correlationId == outer_corr) {
            outer_corr = 0;
        }
    } else if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
        if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
            inj.api.ActivityFlushAll(0); /* the context's records, while it exists */
        else
            np_graph_nodes_resource(&inj.api, cbid, data);
    }
}

/* Subscribes; NP_HELLO_CUPTI_BUSY with the holder's name when a profiler
 * already has CUPTI. */
static uint32_t subscribe(char *message, size_t size) {
    struct np_cupti_api *api = &inj.api;
    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = "";
    CUptiResult res;
    if (api->Subscribe_v2) {
        CUpti_SubscriberParams params;
        memset(&params, 0, sizeof(params));
        params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
        params.subscriberName = "ncclprobe";
        params.oldSubscriberName = holder;
        params.oldSubscriberSize = sizeof(holder) - 1;
        res = api->Subscribe_v2(&inj.subscriber, on_callback, NULL, &params);
    } else {
        res = api->Subscribe(&inj.subscriber, on_callback, NULL);
    }
    if (res == CUPTI_SUCCESS)
        return NP_HELLO_ACTIVE;
    char buf[32];
    if (res == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        snprintf(message, size,
                 "CUPTI is already used by %s%s%s (a profiler such as torch.profiler or "
                 "Nsight): ncclprobe stays out of this process, stacks are recorded without "
                 "GPU times",
                 holder[0] ? "'" : "another subscriber", holder, holder[0] ? "'" : "");
        return NP_HELLO_CUPTI_BUSY;
    }
    snprintf(message, size, "cuptiSubscribe failed: %s", np_cupti_result(api, res, buf, 32));
    return NP_HELLO_CUPTI_FAILED;
}

static int check(CUptiResult res, const char *what, char *message, size_t size) {
    if (res == CUPTI_SUCCESS)
        return 0;
    char buf[32];
    snprintf(message, size, "%s failed: %s", what, np_cupti_result(&inj.api, res, buf, 32));
    return -1;
}

/* One more line of what is lost in info->degraded. */
static void degrade(struct np_wire_cupti *info, const char *what) {
    size_t used = strnlen(info->degraded, sizeof(info->degraded));
    snprintf(info->degraded + used, sizeof(info->degraded) - used, "%s%s", used ? "\n" : "", what);
}

static int enable_launch_callbacks(char *message, size_t size) {
    struct np_cupti_api *api = &inj.api;
    for (int runtime = 0; runtime <= 1; runtime++) {
        CUpti_CallbackDomain domain =
            runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
        CUptiResult (*api_records)(CUpti_CallbackId, uint8_t) =
            runtime ? api->ActivityEnableRuntimeApi : api->ActivityEnableDriverApi;
        for (size_t i = 0; i < np_launch_api_count(runtime); i++) {
            CUpti_CallbackId id = np_launch_api_cbid(runtime, i);
            if (!id) /* not in this CUPTI (np_launch_api_use said so) */
                continue;
            if (check(api->EnableCallback(1, inj.subscriber, domain, id), "cuptiEnableCallback",
                      message, size))
                return -1;
            /* API records only for the trace file: the daemon pairs by marker */
            if (inj.file_mode && api_records &&
                check(api_records(id, 1), "cuptiActivityEnable(Runtime|Driver)Api", message, size))
                return -1;
        }
    }
    /* best effort: records of a context are flushed before it goes */
    api->EnableCallback(1, inj.subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                        CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    return 0;
}

/* Graph nodes made and cloned (graph_nodes.c); without them replays are
 * tied to their capture by kernel order (said). */
static void enable_graph_node_callbacks(struct np_wire_cupti *info) {
    struct np_cupti_api *api = &inj.api;
    if (!api->GetGraphNodeId)
        return; /* np_cupti_api_missing said so */
    for (size_t i = 0; i < sizeof(np_graph_node_cbids) / sizeof(np_graph_node_cbids[0]); i++) {
        CUptiResult res = api->EnableCallback(1, inj.subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                              np_graph_node_cbids[i]);
        if (res != CUPTI_SUCCESS) {
            char buf[32], line[160];
            snprintf(line, sizeof(line),
                     "cuptiEnableCallback(graph nodes) failed: %s: CUDA graph replays are tied "
                     "to their capture by kernel order, not by node",
                     np_cupti_result(api, res, buf, sizeof(buf)));
            degrade(info, line);
            return;
        }
    }
}

/* cuptiActivityGetStructSize for layouts.c: a record's size as this CUPTI
 * writes it, 0 when it cannot say (before 13.2). */
static uint32_t struct_size(void *ctx, uint32_t kind) {
    const struct np_cupti_api *api = ctx;
    size_t size = 0;
    if (!api->ActivityGetStructSize ||
        api->ActivityGetStructSize((CUpti_ActivityKind)kind, 0, &size) != CUPTI_SUCCESS ||
        size > UINT32_MAX)
        return 0;
    return (uint32_t)size;
}

/* What the library reads in this CUPTI, into info. */
static void describe_layouts(struct np_wire_cupti *info) {
    const struct np_cupti_layouts *l = &inj.layouts;
    info->layouts_version = l->v->api_version;
    snprintf(info->cuda, sizeof(info->cuda), "%s", l->v->cuda);
    for (int r = 0; r < NP_CUPTI_RECORDS; r++) {
        info->record_size[r] = l->record_size[r];
        snprintf(info->record_type[r], sizeof(info->record_type[r]), "%s", l->v->record[r].type);
    }
    info->size_confirmed = l->size_confirmed;
}

/* The CUPTI's version and the record layouts and launch callback ids read
 * for it: NP_HELLO_ACTIVE, or why not (message). */
static uint32_t pick_layouts(struct np_wire_cupti *info, char *message, size_t size) {
    struct np_cupti_api *api = &inj.api;
    uint32_t version = 0;
    if (check(api->GetVersion(&version), "cuptiGetVersion", message, size))
        return NP_HELLO_CUPTI_FAILED;
    info->api_version = version;
    np_cupti_layouts_pick(version, struct_size, api, &inj.layouts);
    info->support = inj.layouts.support;
    if (!inj.layouts.v) {
        snprintf(message, size, "CUPTI %s not supported: %s", api->path, inj.layouts.note);
        return NP_HELLO_UNSUPPORTED;
    }
    describe_layouts(info);
    if (inj.layouts.support == NP_CUPTI_ASSUMED)
        degrade(info, inj.layouts.note);
    char missing[256], line[384];
    if (np_launch_api_use(inj.layouts.v, missing, sizeof(missing))) {
        snprintf(line, sizeof(line),
                 "no callback ids for %s in CUDA %s's CUPTI: not followed themselves (a launch "
                 "they pass on to another launch API still is)",
                 missing, inj.layouts.v->cuda);
        degrade(info, line);
    }
    return NP_HELLO_ACTIVE;
}

/* CUPTI loaded, a driver there, its layouts known: NP_HELLO_ACTIVE, or why
 * not. Nothing of CUPTI is called without a driver. */
static uint32_t load_cupti(struct np_wire_cupti *info, char *message, size_t size) {
    struct np_cupti_api *api = &inj.api;
    int err = np_cupti_api_load(api, message, size);
    snprintf(info->path, sizeof(info->path), "%s", api->path);
    snprintf(info->chosen_by, sizeof(info->chosen_by), "%s", api->chosen_by);
    info->support = err == -ENOENT ? NP_CUPTI_NOT_LOADED : NP_CUPTI_NOT_ASKED;
    if (err < 0)
        return NP_HELLO_CUPTI_FAILED;
    char missing[384];
    np_cupti_api_missing(api, missing, sizeof(missing));
    if (missing[0])
        degrade(info, missing);
    char why[200];
    info->driver_version = np_cuda_driver_version(why, sizeof(why));
    if (!info->driver_version) {
        snprintf(message, size, "no CUDA driver (%s): CUPTI %s not used", why, api->path);
        return NP_HELLO_NO_DRIVER;
    }
    return pick_layouts(info, message, size);
}

/* Subscribed: the clock, the buffers, the callbacks and the kinds, in
 * CUPTI's order (the timestamp callback before any kind is enabled). */
static uint32_t turn_on(struct np_wire_cupti *info, char *message, size_t size) {
    struct np_cupti_api *api = &inj.api;
    const struct np_cupti_kinds *kind = &inj.layouts.v->kind;
    np_activity_init(api, &inj.layouts);
    if (check(api->ActivityRegisterTimestampCallback(np_clock_ns),
              "cuptiActivityRegisterTimestampCallback", message, size) ||
        check(api->SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), "cuptiSetThreadIdType",
              message, size) ||
        check(api->ActivityRegisterCallbacks(np_activity_buffer_requested,
                                             np_activity_buffer_completed),
              "cuptiActivityRegisterCallbacks", message, size) ||
        enable_launch_callbacks(message, size) ||
        check(api->ActivityEnable((CUpti_ActivityKind)kind->concurrent_kernel),
              "cuptiActivityEnable(CONCURRENT_KERNEL)", message, size) ||
        check(api->ActivityEnable((CUpti_ActivityKind)kind->memcpy), "cuptiActivityEnable(MEMCPY)",
              message, size) ||
        check(api->ActivityEnable((CUpti_ActivityKind)kind->memset), "cuptiActivityEnable(MEMSET)",
              message, size))
        return NP_HELLO_CUPTI_FAILED;
    enable_graph_node_callbacks(info);
    return NP_HELLO_ACTIVE;
}

/* Turns CUPTI on, once; what it is and why not goes to the sink either way. */
static uint32_t activate(char *message, size_t size) {
    pthread_mutex_lock(&inj.lock);
    struct np_wire_cupti info;
    memset(&info, 0, sizeof(info));
    uint32_t status = load_cupti(&info, message, size);
    if (status == NP_HELLO_ACTIVE) {
        np_names_init(); /* before the first launch callback can come */
        status = subscribe(message, size);
    }
    if (status == NP_HELLO_ACTIVE)
        status = turn_on(&info, message, size);
    if (status == NP_HELLO_ACTIVE) {
        inj.active = true;
        snprintf(message, size, "CUPTI %s (API version %u, CUDA %s record layouts%s)", inj.api.path,
                 info.api_version, info.cuda, info.support == NP_CUPTI_ASSUMED ? ", assumed" : "");
    }
    np_sink_set_cupti(&info);
    pthread_mutex_unlock(&inj.lock);
    if (status != NP_HELLO_ACTIVE)
        fprintf(stderr, "ncclprobe-cupti: %s\n", message);
    else if (info.support == NP_CUPTI_ASSUMED)
        fprintf(stderr, "ncclprobe-cupti: %s\n", inj.layouts.note);
    return status;
}

/* One flush at a time: our thread's periodic one and the exit one. */
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;

static void flush(uint32_t flags) {
    if (!inj.active)
        return;
    pthread_mutex_lock(&flush_lock);
    inj.api.ActivityFlushAll(flags);
    pthread_mutex_unlock(&flush_lock);
}

static void flush_periodic(void) {
    flush(0);
}

/* Best effort: what CUPTI still holds, including records not complete
 * yet, then the queue, within a bounded time. */
static void at_exit(void) {
    flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    np_sink_stop(EXIT_DRAIN_MS);
}

static void after_fork_in_child(void) {
    inj.active = false; /* CUPTI state does not survive fork; send nothing */
    pthread_mutex_init(&flush_lock, NULL);
    pthread_mutex_init(&start_lock, NULL);
    np_sink_forget_after_fork();
    /* what an attach to the child will be told: CUPTI is not turned on here */
    np_sink_set_status(NP_HELLO_CUPTI_FAILED,
                       "a forked child of the process that loaded ncclprobe's CUPTI library: "
                       "CUPTI does not survive fork");
}

/* Once per process: the child of a fork sends nothing, and the exit
 * flushes what CUPTI holds. A failure is said and lived with. Called under
 * start_lock, or first on our thread (a live start: nothing else calls it). */
static void add_exit_hooks(void) {
    if (inj.exit_hooks)
        return;
    inj.exit_hooks = true;
    int err = pthread_atfork(NULL, NULL, after_fork_in_child);
    if (err)
        fprintf(stderr, "ncclprobe-cupti: pthread_atfork: %s\n", strerror(err));
    if (atexit(at_exit) != 0)
        fprintf(stderr, "ncclprobe-cupti: atexit failed: GPU records of the last 100 ms are "
                        "lost at exit\n");
}

static const struct np_sink_hooks sink_hooks = {.activate = activate, .flush = flush_periodic};
/* Live: the exit hooks are registered on our thread, not on the attaching
 * one (which may have been stopped anywhere that holds no lock of libc's:
 * as little as possible runs there). */
static const struct np_sink_hooks live_hooks = {
    .activate = activate, .flush = flush_periodic, .started = add_exit_hooks};

/* InitializeInjection's part, under start_lock: 1, or 0 when the library
 * stays out. */
static int start_at_cuinit(void) {
    inj.initialized = true;
    inj.loaded_at_start = true;
    const char *file = getenv("NCCLPROBE_CUPTI_OUTPUT");
    const char *socket_path = getenv(NP_WIRE_SOCKET_ENV);
    if (!socket_path || !socket_path[0])
        socket_path = NP_WIRE_DEFAULT_SOCKET;
    inj.file_mode = file && file[0];

    struct np_sink_config cfg = {.file = inj.file_mode ? file : NULL,
                                 .socket_path = inj.file_mode ? NULL : socket_path,
                                 .fd = -1,
                                 .origin = NP_ORIGIN_START};
    int err = np_sink_start(&cfg, &sink_hooks);
    if (err < 0) {
        fprintf(stderr, "ncclprobe-cupti: cannot start (%s): %s\n",
                inj.file_mode ? file : socket_path, strerror(-err));
        return 0;
    }
    if (inj.file_mode) { /* no daemon to wait for: on now */
        char message[256] = "";
        uint32_t status = activate(message, sizeof(message));
        np_sink_set_status(status, message);
        if (status != NP_HELLO_ACTIVE) {
            np_sink_stop(EXIT_DRAIN_MS); /* an empty trace that says why */
            return 0;
        }
    }
    add_exit_hooks();
    return 1;
}

NP_EXPORT int InitializeInjection(void) {
    pthread_mutex_lock(&start_lock);
    int rc = inj.initialized ? 1 : start_at_cuinit();
    pthread_mutex_unlock(&start_lock);
    return rc;
}

/* A connected AF_UNIX stream socket, close-on-exec from now on: 0 or -errno. */
static int check_socket(int fd) {
    int type = 0, domain = 0;
    socklen_t len = sizeof(type);
    if (fd < 0)
        return -EBADF;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
        return -errno; /* -ENOTSOCK, -EBADF */
    len = sizeof(domain);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
        return -errno;
    if (type != SOCK_STREAM || domain != AF_UNIX)
        return -EPROTOTYPE;
    struct sockaddr_un peer;
    len = sizeof(peer);
    if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
        return -errno; /* -ENOTCONN */
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -errno;
    return 0;
}

/* The first start in this process, on fd (under start_lock). */
static int start_live(int fd) {
    inj.initialized = true;
    struct np_sink_config cfg = {
        .fd = fd, .origin = inj.loaded_at_start ? NP_ORIGIN_START : NP_ORIGIN_INJECTED};
    return np_sink_start(&cfg, &live_hooks);
}

/* The live entry point (see the top of this file). flags: none defined yet.
 * 0 with fd the library's from then on; else -errno and fd left to the
 * caller: -EBADF, -ENOTSOCK, -EPROTOTYPE, -ENOTCONN (not a connected
 * AF_UNIX stream socket), -EBUSY (InitializeInjection is running on another thread: try
 * again), -EEXIST (the library writes a trace file, NCCLPROBE_CUPTI_OUTPUT),
 * -ESHUTDOWN (the process is exiting), or what starting our thread gave. */
NP_EXPORT int ncclprobe_cupti_attach(int sock_fd, unsigned flags) {
    (void)flags;
    int err = check_socket(sock_fd);
    if (err < 0)
        return err;
    if (pthread_mutex_trylock(&start_lock) != 0)
        return -EBUSY;
    if (inj.file_mode)
        err = -EEXIST;
    else if (np_sink_running())
        err = np_sink_adopt(sock_fd);
    else
        err = start_live(sock_fd);
    pthread_mutex_unlock(&start_lock);
    return err;
}
