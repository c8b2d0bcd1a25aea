/* inject.c - libncclprobe_cupti.so's entry points. CUDA loads the library
 * named by CUDA_INJECTION64_PATH and calls InitializeInjection() once, inside
 * cuInit, on the thread that first uses CUDA.
 *
 * What it does:
 *   - At each launch-API callback (ENTER; the APIs are launch_api.c's) it
 *     calls ncclprobe_cupti_marker() with the call's correlation id on the
 *     launching thread. ncclprobe uprobes that function, so it pairs the id
 *     with that thread's launch event exactly (never through CUPTI's
 *     threadId).
 *   - It turns CUPTI activity on (kernels, memcpys, memsets) with a
 *     CLOCK_MONOTONIC timestamp callback, registered once before anything
 *     is enabled, so GPU times are on the clock BPF uses.
 *   - GPU records go to ncclprobe's socket (record's or the daemon's), or
 *     with NCCLPROBE_CUPTI_OUTPUT to a Chrome-trace JSON file (sink.c).
 * Until ncclprobe is reached (socket mode) CUPTI is not touched at all, so an
 * idle injection costs a connect() attempt a second. Once on, it stays on:
 * toggling CUPTI sessions breaks graph correlation ids in CUPTI 13.0.
 * If another subscriber (torch.profiler, Nsight) holds CUPTI we log one line
 * and stay out. Nothing here may block, abort or throw into the app.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cupti/activity.h"
#include "cupti/cupti_api.h"
#include "cupti/launch_api.h"
#include "cupti/sink.h"
#include "ncclprobe/gpu_wire.h"

#define NP_EXPORT __attribute__((visibility("default")))
#define EXIT_DRAIN_MS 1000

static struct {
    pthread_mutex_t lock;
    bool initialized;
    bool active;
    bool file_mode;
    struct np_cupti_api api;
    CUpti_SubscriberHandle subscriber;
} inj = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The correlation hand-off. ncclprobe puts a uprobe on this symbol; the
 * empty asm with the arguments as inputs keeps the call and its argument
 * registers in place at every optimization level. */
NP_EXPORT __attribute__((noinline, noipa)) void
ncclprobe_cupti_marker(uint32_t correlation_id, uint32_t domain, uint32_t cbid) {
    __asm__ volatile(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00" ::"r"(correlation_id), "r"(domain),
                     "r"(cbid)
                     : "memory");
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data) {
    (void)userdata;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
        const CUpti_CallbackData *cb = data;
        if (cb && cb->callbackSite == CUPTI_API_ENTER)
            ncclprobe_cupti_marker(cb->correlationId, (uint32_t)domain, cbid);
    } else if (domain == CUPTI_CB_DOMAIN_RESOURCE &&
               cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
        inj.api.ActivityFlushAll(0); /* the context's records, while it exists */
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

static int enable_launch_callbacks(char *message, size_t size) {
    struct np_cupti_api *api = &inj.api;
    for (int runtime = 0; runtime <= 1; runtime++) {
        size_t n;
        const CUpti_CallbackId *ids = np_launch_cbids(runtime, &n);
        CUpti_CallbackDomain domain =
            runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
        for (size_t i = 0; i < n; i++) {
            if (check(api->EnableCallback(1, inj.subscriber, domain, ids[i]), "cuptiEnableCallback",
                      message, size))
                return -1;
            /* API records only for the trace file: the daemon pairs by marker */
            if (inj.file_mode && check(runtime ? api->ActivityEnableRuntimeApi(ids[i], 1)
                                               : api->ActivityEnableDriverApi(ids[i], 1),
                                       "cuptiActivityEnable(Runtime|Driver)Api", message, size))
                return -1;
        }
    }
    /* best effort: records of a context are flushed before it goes */
    api->EnableCallback(1, inj.subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                        CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    return 0;
}

/* Turns CUPTI on, once. The order matters: the timestamp callback before
 * any activity kind is enabled (CUPTI's rule). */
static uint32_t activate(char *message, size_t size) {
    pthread_mutex_lock(&inj.lock);
    uint32_t status = NP_HELLO_CUPTI_FAILED;
    struct np_cupti_api *api = &inj.api;
    if (np_cupti_api_load(api, message, size) < 0)
        goto out;
    status = subscribe(message, size);
    if (status != NP_HELLO_ACTIVE)
        goto out;
    status = NP_HELLO_CUPTI_FAILED;
    np_activity_init(api);
    if (check(api->ActivityRegisterTimestampCallback(np_clock_ns),
              "cuptiActivityRegisterTimestampCallback", message, size) ||
        check(api->SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), "cuptiSetThreadIdType",
              message, size) ||
        check(api->ActivityRegisterCallbacks(np_activity_buffer_requested,
                                             np_activity_buffer_completed),
              "cuptiActivityRegisterCallbacks", message, size) ||
        enable_launch_callbacks(message, size) ||
        check(api->ActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
              "cuptiActivityEnable(CONCURRENT_KERNEL)", message, size) ||
        check(api->ActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)",
              message, size) ||
        check(api->ActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(MEMSET)",
              message, size))
        goto out;
    status = NP_HELLO_ACTIVE;
    inj.active = true;
    uint32_t version = 0;
    if (api->GetVersion && api->GetVersion(&version) == CUPTI_SUCCESS && version)
        snprintf(message, size, "CUPTI %s (API version %u)", api->path, version);
    else
        snprintf(message, size, "CUPTI %s", api->path);
out:
    pthread_mutex_unlock(&inj.lock);
    if (status != NP_HELLO_ACTIVE)
        fprintf(stderr, "ncclprobe-cupti: %s\n", message);
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
    np_sink_forget_after_fork();
}

NP_EXPORT int InitializeInjection(void) {
    pthread_mutex_lock(&inj.lock);
    bool first = !inj.initialized;
    inj.initialized = true;
    pthread_mutex_unlock(&inj.lock);
    if (!first)
        return 1;

    const char *file = getenv("NCCLPROBE_CUPTI_OUTPUT");
    const char *socket_path = getenv(NP_WIRE_SOCKET_ENV);
    if (!socket_path || !socket_path[0])
        socket_path = NP_WIRE_DEFAULT_SOCKET;
    inj.file_mode = file && file[0];

    struct np_sink_hooks hooks = {.activate = activate, .flush = flush_periodic};
    int err = np_sink_start(inj.file_mode ? file : NULL, socket_path, &hooks);
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
    pthread_atfork(NULL, NULL, after_fork_in_child);
    atexit(at_exit);
    return 1;
}
