/* libcupti_replay.so: a TEST DOUBLE of CUPTI (see cupti_replay.h). It owns CUPTI's state in
 * one process: the single callback subscriber and what it enabled, the activity kinds and
 * per-API activity switches, the clock and thread-id settings, the buffer callbacks, the queue of
 * scripted records not yet delivered, the dropped-record count and the ids of graph objects
 * (cuptiGetGraphNodeId, cuptiGetGraphId); each thread keeps its open API calls (entered, not yet
 * exited) in thread-local storage. CUPTI semantics follow the 13.0 headers (cupti_callbacks.h,
 * cupti_activity.h) and shared/notes/cupti.md; where the headers are silent the choice is written
 * next to the code.
 *
 * Locking: one mutex guards all state. No client code (API callbacks, the timestamp callback,
 * buffer request/completion callbacks) is ever called while it is held, because clients call
 * back into CUPTI from there (cuptiActivityFlushAll inside an API callback, for instance). */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cupti_replay.h"
#include "progs_common.h"

#define MAX_DOMAIN_CBIDS 1024
#define RECORD_ALIGNMENT 8

_Static_assert(CUPTI_DRIVER_TRACE_CBID_SIZE <= MAX_DOMAIN_CBIDS, "driver cbids fit");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_SIZE <= MAX_DOMAIN_CBIDS, "runtime cbids fit");

/* The one subscriber CUPTI 13.0 allows; its address is the CUpti_SubscriberHandle. */
struct CUpti_Subscriber_st {
    CUpti_CallbackFunc callback;
    void *userdata;
    char name[CUPTI_SUBSCRIBER_NAME_MAX_LEN + 1];
    uint8_t enabled[CUPTI_CB_DOMAIN_SIZE][MAX_DOMAIN_CBIDS];
};

/* One record waiting for delivery, stored as CUPTI lays it out in a buffer. */
struct queued_record {
    size_t size; /* bytes in the buffer, a multiple of RECORD_ALIGNMENT */
    union {
        CUpti_Activity header;
        CUpti_ActivityKernel10 kernel;
        CUpti_ActivityMemcpy6 memcpy;
        CUpti_ActivityMemset4 memset;
        CUpti_ActivityAPI api;
    } rec;
};

struct record_queue {
    struct queued_record *records;
    size_t count;
    size_t capacity;
};

/* Interned kernel names: never freed, so record name pointers stay valid until unload. */
struct interned_name {
    struct interned_name *next;
    char text[];
};

/* The ids CUPTI gives graph objects, by handle (what the script registered). */
struct handle_id {
    const void *handle;
    uint64_t id;
};

struct id_registry {
    struct handle_id *entries;
    size_t count;
    size_t capacity;
};

/* How one delivery cuts and orders buffers. */
struct delivery_plan {
    size_t records_per_buffer; /* 0: as many as fit */
    bool reverse;
    CUpti_BuffersCallbackRequestFunc request;
    CUpti_BuffersCallbackCompleteFunc complete;
};

/* A buffer filled and not yet handed back. */
struct filled_buffer {
    uint8_t *data;
    size_t size;
    size_t valid;
};

static struct {
    pthread_mutex_t lock;
    bool subscribed;
    long subscriber_tid;
    struct CUpti_Subscriber_st subscriber;
    CUpti_TimestampCallbackFunc timestamp;
    CUpti_ActivityThreadIdType thread_id_type;
    CUpti_BuffersCallbackRequestFunc request;
    CUpti_BuffersCallbackCompleteFunc complete;
    bool kinds[CUPTI_ACTIVITY_KIND_COUNT];
    uint8_t runtime_api[CUPTI_RUNTIME_TRACE_CBID_SIZE];
    uint8_t driver_api[CUPTI_DRIVER_TRACE_CBID_SIZE];
    size_t attributes[CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_DEVICE_GRAPHS + 1];
    struct record_queue queue;
    uint64_t dropped;
    uint32_t last_correlation_id;
    int64_t last_grid_id;
    size_t flush_records_per_buffer;
    bool flush_reverse;
    struct interned_name *names;
    struct id_registry node_ids;  /* cuptiGetGraphNodeId */
    struct id_registry graph_ids; /* cuptiGetGraphId */
} replay = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .flush_records_per_buffer = CUPTI_REPLAY_DEFAULT_RECORDS_PER_BUFFER,
};

static void lock(void) {
    pthread_mutex_lock(&replay.lock);
}

static void unlock(void) {
    pthread_mutex_unlock(&replay.lock);
}

static size_t align_up(size_t n) {
    return (n + RECORD_ALIGNMENT - 1) & ~(size_t)(RECORD_ALIGNMENT - 1);
}

/* ---- error strings ---- */

#define RESULT_NAME(code) [code] = #code
static const char *const result_names[] = {
    RESULT_NAME(CUPTI_SUCCESS),
    RESULT_NAME(CUPTI_ERROR_INVALID_PARAMETER),
    RESULT_NAME(CUPTI_ERROR_INVALID_DEVICE),
    RESULT_NAME(CUPTI_ERROR_INVALID_CONTEXT),
    RESULT_NAME(CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID),
    RESULT_NAME(CUPTI_ERROR_INVALID_EVENT_ID),
    RESULT_NAME(CUPTI_ERROR_INVALID_EVENT_NAME),
    RESULT_NAME(CUPTI_ERROR_INVALID_OPERATION),
    RESULT_NAME(CUPTI_ERROR_OUT_OF_MEMORY),
    RESULT_NAME(CUPTI_ERROR_HARDWARE),
    RESULT_NAME(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT),
    RESULT_NAME(CUPTI_ERROR_API_NOT_IMPLEMENTED),
    RESULT_NAME(CUPTI_ERROR_MAX_LIMIT_REACHED),
    RESULT_NAME(CUPTI_ERROR_NOT_READY),
    RESULT_NAME(CUPTI_ERROR_NOT_COMPATIBLE),
    RESULT_NAME(CUPTI_ERROR_NOT_INITIALIZED),
    RESULT_NAME(CUPTI_ERROR_INVALID_METRIC_ID),
    RESULT_NAME(CUPTI_ERROR_INVALID_METRIC_NAME),
    RESULT_NAME(CUPTI_ERROR_QUEUE_EMPTY),
    RESULT_NAME(CUPTI_ERROR_INVALID_HANDLE),
    RESULT_NAME(CUPTI_ERROR_INVALID_STREAM),
    RESULT_NAME(CUPTI_ERROR_INVALID_KIND),
    RESULT_NAME(CUPTI_ERROR_INVALID_EVENT_VALUE),
    RESULT_NAME(CUPTI_ERROR_DISABLED),
    RESULT_NAME(CUPTI_ERROR_INVALID_MODULE),
    RESULT_NAME(CUPTI_ERROR_INVALID_METRIC_VALUE),
    RESULT_NAME(CUPTI_ERROR_HARDWARE_BUSY),
    RESULT_NAME(CUPTI_ERROR_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE),
    RESULT_NAME(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES),
    RESULT_NAME(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS),
    RESULT_NAME(CUPTI_ERROR_CDP_TRACING_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE),
    RESULT_NAME(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES),
    /* 36 and 37 have no string in the real 13.0 libcupti either (it returns
     * CUPTI_ERROR_INVALID_PARAMETER for them; measured). */
    RESULT_NAME(CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES),
    RESULT_NAME(CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED),
    RESULT_NAME(CUPTI_ERROR_INVALID_CHIP_NAME),
};

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str) {
    if (!str)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (result == CUPTI_ERROR_UNKNOWN) {
        *str = "CUPTI_ERROR_UNKNOWN";
        return CUPTI_SUCCESS;
    }
    size_t n = sizeof(result_names) / sizeof(result_names[0]);
    if ((size_t)result >= n || !result_names[result])
        return CUPTI_ERROR_INVALID_PARAMETER;
    *str = result_names[result];
    return CUPTI_SUCCESS;
}

/* ---- version ---- */

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version) {
    if (!version)
        return CUPTI_ERROR_INVALID_PARAMETER;
    const char *env = getenv(CUPTI_REPLAY_API_VERSION_ENV);
    *version = env && env[0] ? (uint32_t)strtoul(env, NULL, 10) : CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

/* ---- clock and thread ids ---- */

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CUPTI's clock: the client's timestamp callback (called unlocked), else CLOCK_REALTIME. */
static uint64_t clock_now(void) {
    lock();
    CUpti_TimestampCallbackFunc timestamp = replay.timestamp;
    unlock();
    return timestamp ? timestamp() : realtime_ns();
}

static uint32_t thread_id_of_caller(CUpti_ActivityThreadIdType type) {
    if (type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        return (uint32_t)syscall(SYS_gettid);
    return (uint32_t)(uintptr_t)pthread_self(); /* DEFAULT: pthread_self(), truncated to u32 */
}

uint64_t cupti_replay_now(void) {
    return clock_now();
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp) {
    if (!timestamp)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = clock_now();
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn) {
    if (!fn)
        return CUPTI_ERROR_INVALID_PARAMETER;
    lock();
    replay.timestamp = fn;
    unlock();
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
    if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT &&
        type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        return CUPTI_ERROR_NOT_SUPPORTED;
    lock();
    replay.thread_id_type = type;
    unlock();
    return CUPTI_SUCCESS;
}

/* ---- subscriber and callback switches ---- */

/* Number of callback ids in `domain` (ids 1..size-1 are valid), or 0 for an invalid domain. */
static size_t domain_size(CUpti_CallbackDomain domain) {
    switch (domain) {
    case CUPTI_CB_DOMAIN_DRIVER_API:
        return CUPTI_DRIVER_TRACE_CBID_SIZE;
    case CUPTI_CB_DOMAIN_RUNTIME_API:
        return CUPTI_RUNTIME_TRACE_CBID_SIZE;
    case CUPTI_CB_DOMAIN_RESOURCE:
        return CUPTI_CBID_RESOURCE_SIZE;
    case CUPTI_CB_DOMAIN_SYNCHRONIZE:
        return CUPTI_CBID_SYNCHRONIZE_SIZE;
    case CUPTI_CB_DOMAIN_NVTX:
        return CUPTI_CBID_NVTX_SIZE;
    case CUPTI_CB_DOMAIN_STATE:
        return CUPTI_CBID_STATE_SIZE;
    default:
        return 0;
    }
}

static bool valid_subscriber_locked(CUpti_SubscriberHandle subscriber) {
    return replay.subscribed && subscriber == &replay.subscriber;
}

static void copy_name(char *dst, size_t dst_size, const char *src) {
    if (dst && dst_size > 0)
        snprintf(dst, dst_size, "%s", src);
}

/* Both subscribe entry points. Who holds CUPTI is reported as the real one does: "CUPTI for
 * <name>" for a CUPTI client (CUPTI's own 10-byte prefix), the tool name from CUPTI_REPLAY_BUSY
 * as given. On failure *subscriber is left untouched. */
static CUptiResult subscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                             void *userdata, const char *name, char *old_name, size_t old_size) {
    if (!subscriber)
        return CUPTI_ERROR_INVALID_PARAMETER;
    progs_sleep_env_ms(CUPTI_REPLAY_SUBSCRIBE_DELAY_ENV);
    const char *busy = getenv(CUPTI_REPLAY_BUSY_ENV);
    if (busy && *busy) {
        copy_name(old_name, old_size, busy);
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    lock();
    if (replay.subscribed) {
        char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN];
        snprintf(holder, sizeof(holder), "CUPTI for %s", replay.subscriber.name);
        unlock();
        copy_name(old_name, old_size, holder);
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    memset(&replay.subscriber, 0, sizeof(replay.subscriber));
    replay.subscriber.callback = callback;
    replay.subscriber.userdata = userdata;
    copy_name(replay.subscriber.name, sizeof(replay.subscriber.name), name ? name : "");
    replay.subscribed = true;
    replay.subscriber_tid = (long)syscall(SYS_gettid);
    *subscriber = &replay.subscriber;
    unlock();
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                    void *userdata) {
    return subscribe(subscriber, callback, userdata, NULL, NULL, 0);
}

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle *subscriber,
                                       CUpti_CallbackFunc callback, void *userdata,
                                       CUpti_SubscriberParams *params) {
    if (!params)
        return subscribe(subscriber, callback, userdata, NULL, NULL, 0);
    if (params->structSize < CUpti_SubscriberParams_STRUCT_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER;
    return subscribe(subscriber, callback, userdata, params->subscriberName,
                     params->oldSubscriberName, params->oldSubscriberSize);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
    lock();
    bool valid = valid_subscriber_locked(subscriber);
    if (valid) {
        replay.subscribed = false;
        memset(&replay.subscriber, 0, sizeof(replay.subscriber));
    }
    unlock();
    return valid ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    size_t size = domain_size(domain);
    if (size == 0 || cbid == 0 || cbid >= size)
        return CUPTI_ERROR_INVALID_PARAMETER;
    lock();
    bool valid = valid_subscriber_locked(subscriber);
    if (valid)
        replay.subscriber.enabled[domain][cbid] = enable != 0;
    unlock();
    return valid ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain) {
    size_t size = domain_size(domain);
    if (size == 0)
        return CUPTI_ERROR_INVALID_PARAMETER;
    lock();
    bool valid = valid_subscriber_locked(subscriber);
    if (valid)
        for (size_t cbid = 1; cbid < size; cbid++)
            replay.subscriber.enabled[domain][cbid] = enable != 0;
    unlock();
    return valid ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

/* ---- activity switches ---- */

static bool valid_kind(CUpti_ActivityKind kind) {
    return kind > CUPTI_ACTIVITY_KIND_INVALID && kind < CUPTI_ACTIVITY_KIND_COUNT;
}

/* Enabling or disabling the RUNTIME/DRIVER kind overrides every per-API switch set before (as
 * cuptiActivityEnableRuntimeApi documents); per-API calls made afterwards refine it again. */
static void set_kind_locked(CUpti_ActivityKind kind, bool on) {
    replay.kinds[kind] = on;
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME)
        memset(replay.runtime_api, on, sizeof(replay.runtime_api));
    else if (kind == CUPTI_ACTIVITY_KIND_DRIVER)
        memset(replay.driver_api, on, sizeof(replay.driver_api));
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
    if (!valid_kind(kind))
        return CUPTI_ERROR_INVALID_KIND;
    lock();
    set_kind_locked(kind, true);
    unlock();
    progs_sleep_env_ms(CUPTI_REPLAY_ENABLE_DELAY_ENV);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
    if (!valid_kind(kind))
        return CUPTI_ERROR_INVALID_KIND;
    lock();
    set_kind_locked(kind, false);
    unlock();
    return CUPTI_SUCCESS;
}

/* The headers document no error for an unknown cbid; the double rejects it with
 * CUPTI_ERROR_INVALID_PARAMETER so a typo in a client shows up in tests. */
static CUptiResult set_api_switch(uint8_t *switches, size_t size, CUpti_CallbackId cbid,
                                  uint8_t enable) {
    if (cbid == 0 || cbid >= size)
        return CUPTI_ERROR_INVALID_PARAMETER;
    lock();
    switches[cbid] = enable != 0;
    unlock();
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
    return set_api_switch(replay.runtime_api, sizeof(replay.runtime_api), cbid, enable);
}

CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
    return set_api_switch(replay.driver_api, sizeof(replay.driver_api), cbid, enable);
}

/* Size of an attribute's value, or 0 for an attribute the header does not define. */
static size_t attribute_size(CUpti_ActivityAttribute attr) {
    switch (attr) {
    case CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER:
    case CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED:
    case CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER:
        return sizeof(uint8_t);
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_CDP:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT:
    case CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_POOL_SIZE:
    case CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_POOL_LIMIT:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE:
    case CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_PRE_ALLOCATE_VALUE:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_DEVICE_GRAPHS:
        return sizeof(size_t);
    default:
        return 0;
    }
}

/* Stores the value (nothing in the double depends on it). */
CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t *value_size,
                                               void *value) {
    size_t size = attribute_size(attr);
    if (!value_size || !value || size == 0)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (*value_size < size)
        return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
    size_t stored = 0;
    if (size == sizeof(uint8_t))
        stored = *(const uint8_t *)value;
    else
        memcpy(&stored, value, sizeof(stored));
    lock();
    replay.attributes[attr] = stored;
    unlock();
    return CUPTI_SUCCESS;
}

/* ---- record queue ---- */

static int enqueue_locked(const void *record, size_t size) {
    struct record_queue *q = &replay.queue;
    if (q->count == q->capacity) {
        size_t capacity = q->capacity ? q->capacity * 2 : 256;
        struct queued_record *grown = realloc(q->records, capacity * sizeof(*grown));
        if (!grown)
            return -1;
        q->records = grown;
        q->capacity = capacity;
    }
    struct queued_record *slot = &q->records[q->count++];
    memset(slot, 0, sizeof(*slot));
    memcpy(&slot->rec, record, size);
    slot->size = align_up(size);
    return 0;
}

/* Takes every queued record out of the shared queue (the caller owns and frees the result). */
static struct record_queue take_queue_locked(void) {
    struct record_queue taken = replay.queue;
    memset(&replay.queue, 0, sizeof(replay.queue));
    return taken;
}

int cupti_replay_subscribed(void) {
    lock();
    int subscribed = replay.subscribed;
    unlock();
    return subscribed;
}

long cupti_replay_subscriber_tid(void) {
    lock();
    long tid = replay.subscriber_tid;
    unlock();
    return tid;
}

size_t cupti_replay_pending(void) {
    lock();
    size_t n = replay.queue.count;
    unlock();
    return n;
}

static const char *intern_locked(const char *name) {
    if (!name)
        return NULL;
    for (struct interned_name *n = replay.names; n; n = n->next)
        if (strcmp(n->text, name) == 0)
            return n->text;
    size_t len = strlen(name);
    struct interned_name *n = malloc(sizeof(*n) + len + 1);
    if (!n)
        return NULL;
    memcpy(n->text, name, len + 1);
    n->next = replay.names;
    replay.names = n;
    return n->text;
}

/* ---- scripted API calls ---- */

/* One scripted API call: the callback data lives here for both callbacks, as CUPTI keeps it
 * (including correlationData) from ENTER to EXIT. */
struct api_call {
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
    CUpti_CallbackData data;
    uint64_t correlation_data;
    int return_value;
};

/* The subscriber's callback and userdata if it enabled domain/cbid now, else NULL (takes the
 * lock: call it unlocked, and call what it returns unlocked). */
static CUpti_CallbackFunc enabled_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                           void **userdata) {
    CUpti_CallbackFunc callback = NULL;
    lock();
    if (replay.subscribed && cbid < domain_size(domain) &&
        replay.subscriber.enabled[domain][cbid]) {
        callback = replay.subscriber.callback;
        *userdata = replay.subscriber.userdata;
    }
    unlock();
    return callback;
}

/* Calls the subscriber for `site` if it enabled this domain/cbid, without holding the lock. */
static void call_subscriber(struct api_call *call, CUpti_ApiCallbackSite site) {
    void *userdata = NULL;
    CUpti_CallbackFunc callback = enabled_callback(call->domain, call->cbid, &userdata);
    if (!callback)
        return;
    call->data.callbackSite = site;
    callback(userdata, call->domain, call->cbid, &call->data);
}

static bool api_activity_enabled_locked(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
        return cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE && replay.runtime_api[cbid];
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
        return cbid < CUPTI_DRIVER_TRACE_CBID_SIZE && replay.driver_api[cbid];
    return false;
}

/* Queues the CUpti_ActivityAPI record of a finished call if that API's activity is enabled. */
static void record_api_call(const struct api_call *call, uint64_t start, uint64_t end) {
    CUpti_ActivityAPI rec;
    memset(&rec, 0, sizeof(rec));
    rec.kind = call->domain == CUPTI_CB_DOMAIN_RUNTIME_API ? CUPTI_ACTIVITY_KIND_RUNTIME
                                                           : CUPTI_ACTIVITY_KIND_DRIVER;
    rec.cbid = call->cbid;
    rec.start = start;
    rec.end = end;
    rec.processId = (uint32_t)getpid();
    rec.correlationId = call->data.correlationId;
    rec.returnValue = (uint32_t)call->return_value;
    lock();
    if (api_activity_enabled_locked(call->domain, call->cbid)) {
        rec.threadId = thread_id_of_caller(replay.thread_id_type);
        enqueue_locked(&rec, sizeof(rec));
    }
    unlock();
}

/* The calls open on this thread (entered, not yet exited), innermost last. Each keeps its
 * callback data where the client's pointer to it stays valid until its EXIT. */
struct open_call {
    struct api_call call;
    uint64_t start;
};

static _Thread_local struct {
    struct open_call calls[CUPTI_REPLAY_MAX_OPEN_CALLS];
    int depth;
} open_calls;

uint32_t cupti_replay_api_enter(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const char *function_name, const char *symbol_name,
                                const void *params) {
    if (open_calls.depth == CUPTI_REPLAY_MAX_OPEN_CALLS) {
        fprintf(stderr,
                "libcupti_replay: cupti_replay_api_enter(%s): %d calls open on this thread "
                "already: ignored\n",
                function_name ? function_name : "?", CUPTI_REPLAY_MAX_OPEN_CALLS);
        return 0;
    }
    struct open_call *open = &open_calls.calls[open_calls.depth++];
    struct api_call *call = &open->call;
    memset(open, 0, sizeof(*open));
    call->domain = domain;
    call->cbid = cbid;
    call->data.functionName = function_name;
    call->data.symbolName = symbol_name;
    call->data.functionParams = params;
    call->data.functionReturnValue = &call->return_value;
    call->data.correlationData = &call->correlation_data;
    lock();
    call->data.correlationId = ++replay.last_correlation_id;
    unlock();

    open->start = clock_now();
    call_subscriber(call, CUPTI_API_ENTER);
    return call->data.correlationId;
}

void cupti_replay_api_exit(uint32_t corr, int return_value) {
    int depth = open_calls.depth;
    uint32_t innermost = depth ? open_calls.calls[depth - 1].call.data.correlationId : 0;
    if (depth == 0) {
        fprintf(stderr,
                "libcupti_replay: cupti_replay_api_exit(%u): no call open on this thread: "
                "ignored\n",
                corr);
        return;
    }
    if (corr != innermost) {
        fprintf(stderr,
                "libcupti_replay: cupti_replay_api_exit(%u): the innermost open call of this "
                "thread is %u: ignored\n",
                corr, innermost);
        return;
    }
    struct open_call *open = &open_calls.calls[depth - 1];
    open->call.return_value = return_value;
    uint64_t end = clock_now();
    call_subscriber(&open->call, CUPTI_API_EXIT);
    record_api_call(&open->call, open->start, end);
    open_calls.depth = depth - 1; /* the slot is free once the client is done with it */
}

uint32_t cupti_replay_api_ex(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const char *function_name, const char *symbol_name, const void *params,
                             int return_value) {
    uint32_t corr = cupti_replay_api_enter(domain, cbid, function_name, symbol_name, params);
    if (corr)
        cupti_replay_api_exit(corr, return_value);
    return corr;
}

/* ---- resources and graph ids ---- */

void cupti_replay_resource(CUpti_CallbackId cbid, CUcontext context, void *resource_descriptor) {
    void *userdata = NULL;
    CUpti_CallbackFunc callback = enabled_callback(CUPTI_CB_DOMAIN_RESOURCE, cbid, &userdata);
    if (!callback)
        return;
    CUpti_ResourceData data;
    memset(&data, 0, sizeof(data));
    data.context = context;
    data.resourceHandle.stream = NULL;
    data.resourceDescriptor = resource_descriptor;
    callback(userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, &data);
}

static void register_id(struct id_registry *r, const void *handle, uint64_t id) {
    if (!handle)
        return;
    lock();
    for (size_t i = 0; i < r->count; i++) {
        if (r->entries[i].handle == handle) {
            r->entries[i].id = id;
            unlock();
            return;
        }
    }
    if (r->count == r->capacity) {
        size_t capacity = r->capacity ? r->capacity * 2 : 64;
        struct handle_id *grown = realloc(r->entries, capacity * sizeof(*grown));
        if (!grown) {
            unlock();
            fputs("libcupti_replay: out of memory\n", stderr);
            abort();
        }
        r->entries = grown;
        r->capacity = capacity;
    }
    r->entries[r->count++] = (struct handle_id){.handle = handle, .id = id};
    unlock();
}

/* The id registered for handle, as CUPTI answers: a NULL handle or out pointer, or a handle
 * nobody registered, is CUPTI_ERROR_INVALID_PARAMETER (the real one says so for NULL). */
static CUptiResult lookup_id(const struct id_registry *r, const void *handle, uint64_t *id) {
    if (!handle || !id)
        return CUPTI_ERROR_INVALID_PARAMETER;
    CUptiResult rc = CUPTI_ERROR_INVALID_PARAMETER;
    lock();
    for (size_t i = 0; i < r->count; i++) {
        if (r->entries[i].handle == handle) {
            *id = r->entries[i].id;
            rc = CUPTI_SUCCESS;
            break;
        }
    }
    unlock();
    return rc;
}

void cupti_replay_set_graph_node_id(CUgraphNode node, uint64_t id) {
    register_id(&replay.node_ids, node, id);
}

void cupti_replay_set_graph_id(CUgraph graph, uint32_t id) {
    register_id(&replay.graph_ids, graph, id);
}

CUptiResult CUPTIAPI cuptiGetGraphNodeId(CUgraphNode node, uint64_t *nodeId) {
    return lookup_id(&replay.node_ids, node, nodeId);
}

CUptiResult CUPTIAPI cuptiGetGraphId(CUgraph graph, uint32_t *pId) {
    uint64_t id = 0;
    CUptiResult rc = lookup_id(&replay.graph_ids, graph, pId ? &id : NULL);
    if (rc == CUPTI_SUCCESS)
        *pId = (uint32_t)id;
    return rc;
}

uint32_t cupti_replay_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const char *function_name, const char *symbol_name) {
    return cupti_replay_api_ex(domain, cbid, function_name, symbol_name, NULL, 0);
}

/* ---- scripted GPU records ---- */

int cupti_replay_kernel(uint32_t corr, const char *name, uint64_t start_ns, uint64_t end_ns,
                        uint32_t device, uint32_t stream, uint32_t graph_id,
                        uint64_t graph_node_id) {
    CUpti_ActivityKernel10 rec;
    memset(&rec, 0, sizeof(rec));
    rec.start = start_ns;
    rec.end = end_ns;
    rec.completed = end_ns; /* no child kernels */
    rec.deviceId = device;
    rec.contextId = 1;
    rec.streamId = stream;
    rec.correlationId = corr;
    rec.queued = CUPTI_TIMESTAMP_UNKNOWN; /* latency timestamps are not enabled */
    rec.submitted = CUPTI_TIMESTAMP_UNKNOWN;
    rec.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
    rec.graphNodeId = graph_node_id;
    rec.graphId = graph_id;
    int rc = -1;
    lock();
    if (replay.kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] ||
        replay.kinds[CUPTI_ACTIVITY_KIND_KERNEL]) {
        rec.kind = replay.kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL]
                       ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                       : CUPTI_ACTIVITY_KIND_KERNEL;
        rec.gridId = ++replay.last_grid_id;
        rec.name = intern_locked(name);
        rc = enqueue_locked(&rec, sizeof(rec));
    }
    unlock();
    return rc;
}

/* Where each side of a copy lives, for the record's srcKind/dstKind. */
static void memcpy_memory_kinds(uint8_t copy_kind, uint8_t *src, uint8_t *dst) {
    const uint8_t host = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    const uint8_t dev = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    const uint8_t unknown = CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
    bool from_host = copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ||
                     copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    bool from_dev = copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ||
                    copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    bool to_host = copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ||
                   copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    bool to_dev = copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ||
                  copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    *src = from_host ? host : from_dev ? dev : unknown;
    *dst = to_host ? host : to_dev ? dev : unknown;
}

static int enqueue_if_enabled(CUpti_ActivityKind kind, const void *rec, size_t size) {
    int rc = -1;
    lock();
    if (replay.kinds[kind])
        rc = enqueue_locked(rec, size);
    unlock();
    return rc;
}

/* correlationId and runtimeCorrelationId are both `corr`: the double has one id per scripted
 * call, shared by the runtime call and the driver call it would make. */
int cupti_replay_memcpy(uint32_t corr, uint8_t copy_kind, uint64_t bytes, uint64_t start_ns,
                        uint64_t end_ns, uint32_t device, uint32_t stream, uint32_t graph_id,
                        uint64_t graph_node_id) {
    CUpti_ActivityMemcpy6 rec;
    memset(&rec, 0, sizeof(rec));
    rec.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    rec.copyKind = copy_kind;
    memcpy_memory_kinds(copy_kind, &rec.srcKind, &rec.dstKind);
    rec.bytes = bytes;
    rec.start = start_ns;
    rec.end = end_ns;
    rec.deviceId = device;
    rec.contextId = 1;
    rec.streamId = stream;
    rec.correlationId = corr;
    rec.runtimeCorrelationId = corr;
    rec.graphNodeId = graph_node_id;
    rec.graphId = graph_id;
    rec.copyCount = 1;
    return enqueue_if_enabled(CUPTI_ACTIVITY_KIND_MEMCPY, &rec, sizeof(rec));
}

int cupti_replay_memset(uint32_t corr, uint64_t bytes, uint64_t start_ns, uint64_t end_ns,
                        uint32_t device, uint32_t stream, uint32_t graph_id,
                        uint64_t graph_node_id) {
    CUpti_ActivityMemset4 rec;
    memset(&rec, 0, sizeof(rec));
    rec.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    rec.bytes = bytes;
    rec.start = start_ns;
    rec.end = end_ns;
    rec.deviceId = device;
    rec.contextId = 1;
    rec.streamId = stream;
    rec.correlationId = corr;
    rec.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    rec.graphNodeId = graph_node_id;
    rec.graphId = graph_id;
    return enqueue_if_enabled(CUPTI_ACTIVITY_KIND_MEMSET, &rec, sizeof(rec));
}

void cupti_replay_drop(uint64_t n) {
    lock();
    replay.dropped += n;
    unlock();
}

/* ---- delivery ---- */

static void add_dropped(uint64_t n) {
    lock();
    replay.dropped += n;
    unlock();
}

/* Records the next buffer may take: the plan's batch size capped by the client's maxNumRecords
 * (both 0 = no limit). */
static size_t buffer_record_limit(size_t per_buffer, size_t max_records) {
    if (per_buffer == 0)
        return max_records;
    if (max_records == 0)
        return per_buffer;
    return per_buffer < max_records ? per_buffer : max_records;
}

/* Copies records from q starting at *next into buf; returns the bytes used. */
static size_t pack_records(const struct record_queue *q, size_t *next, uint8_t *buf, size_t size,
                           size_t limit) {
    size_t used = 0;
    for (size_t n = 0; *next < q->count && (limit == 0 || n < limit); n++, (*next)++) {
        const struct queued_record *r = &q->records[*next];
        if (r->size > size - used)
            break;
        memcpy(buf + used, &r->rec, r->size);
        used += r->size;
    }
    return used;
}

/* Requests buffers from the client and fills them with all of q. A NULL buffer loses the records
 * meant for it; a buffer too small for the next record is returned with what it holds and that
 * record is lost (both counted as dropped, as CUPTI does without buffer space). Returns the
 * filled buffers in fill order and their number in *n_out. */
static struct filled_buffer *fill_buffers(const struct record_queue *q,
                                          const struct delivery_plan *plan, size_t *n_out) {
    struct filled_buffer *filled = calloc(q->count + 1, sizeof(*filled));
    size_t n = 0, next = 0;
    while (filled && next < q->count) {
        uint8_t *buf = NULL;
        size_t size = 0, max_records = 0;
        plan->request(&buf, &size, &max_records);
        size_t limit = buffer_record_limit(plan->records_per_buffer, max_records);
        size_t left = q->count - next;
        if (!buf) {
            size_t lost = limit && limit < left ? limit : left;
            next += lost;
            add_dropped(lost);
            continue;
        }
        size_t before = next;
        size_t used = pack_records(q, &next, buf, size, limit);
        if (next == before) {
            next++;
            add_dropped(1);
        }
        filled[n++] = (struct filled_buffer){.data = buf, .size = size, .valid = used};
    }
    *n_out = n;
    return filled;
}

static void deliver_queue(struct record_queue q, const struct delivery_plan *plan) {
    size_t n = 0;
    struct filled_buffer *filled = q.count ? fill_buffers(&q, plan, &n) : NULL;
    free(q.records);
    for (size_t i = 0; i < n; i++) {
        const struct filled_buffer *b = &filled[plan->reverse ? n - 1 - i : i];
        plan->complete(NULL, 0, b->data, b->size, b->valid);
    }
    free(filled);
}

/* Takes the queue and the buffer callbacks under the lock; false if none are registered. */
static bool take_for_delivery(struct delivery_plan *plan, struct record_queue *q) {
    lock();
    bool registered = replay.request && replay.complete;
    if (registered) {
        plan->request = replay.request;
        plan->complete = replay.complete;
        *q = take_queue_locked();
    }
    unlock();
    return registered;
}

void cupti_replay_deliver(size_t records_per_buffer, int reverse) {
    struct delivery_plan plan = {.records_per_buffer = records_per_buffer, .reverse = reverse};
    struct record_queue q;
    if (take_for_delivery(&plan, &q))
        deliver_queue(q, &plan);
}

void cupti_replay_set_flush_order(size_t records_per_buffer, int reverse) {
    lock();
    replay.flush_records_per_buffer = records_per_buffer;
    replay.flush_reverse = reverse != 0;
    unlock();
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                    CUpti_BuffersCallbackCompleteFunc complete) {
    if (!request || !complete)
        return CUPTI_ERROR_INVALID_PARAMETER;
    lock();
    replay.request = request;
    replay.complete = complete;
    unlock();
    return CUPTI_SUCCESS;
}

/* Every scripted record is complete, so the forced flag changes nothing. */
CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    struct delivery_plan plan;
    lock();
    plan.records_per_buffer = replay.flush_records_per_buffer;
    plan.reverse = replay.flush_reverse;
    unlock();
    struct record_queue q;
    if (!take_for_delivery(&plan, &q))
        return CUPTI_ERROR_INVALID_OPERATION;
    deliver_queue(q, &plan);
    return CUPTI_SUCCESS;
}

/* A single context-less queue: the count is global whatever context/stream is asked for. */
CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream_id,
                                                       size_t *dropped) {
    (void)context;
    (void)stream_id;
    if (!dropped)
        return CUPTI_ERROR_INVALID_PARAMETER;
    lock();
    *dropped = (size_t)replay.dropped;
    replay.dropped = 0;
    unlock();
    return CUPTI_SUCCESS;
}

/* ---- walking a buffer ---- */

/* Size of a record of `kind` as the double writes it, 0 for kinds it never writes. */
static size_t record_size(uint32_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET:
        return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME:
        return sizeof(CUpti_ActivityAPI);
    default:
        return 0;
    }
}

/* CUPTI 13.2+'s: version 0 is the CUPTI's own, the only one the double knows. */
CUptiResult CUPTIAPI cuptiActivityGetStructSize(CUpti_ActivityKind kind, uint32_t version,
                                                size_t *size) {
    if (!size)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!getenv(CUPTI_REPLAY_STRUCT_SIZES_ENV) || version != 0)
        return CUPTI_ERROR_NOT_SUPPORTED;
    *size = record_size(kind);
    return *size ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_KIND;
}

static uint32_t kind_at(const uint8_t *p) {
    uint32_t kind;
    memcpy(&kind, p, sizeof(kind));
    return kind;
}

/* As the real 13.0 libcupti does (measured on this toolkit's libcupti.so without a GPU): the end
 * of the valid bytes, or a record cut short by it, is CUPTI_ERROR_MAX_LIMIT_REACHED; a record of
 * an unknown kind (garbage, zeroes) is CUPTI_ERROR_INVALID_KIND. */
CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid_size,
                                                CUpti_Activity **record) {
    if (!buffer || !record)
        return CUPTI_ERROR_INVALID_PARAMETER;
    size_t offset = 0;
    if (*record) {
        const uint8_t *prev = (const uint8_t *)*record;
        if (prev < buffer || prev >= buffer + valid_size)
            return CUPTI_ERROR_INVALID_PARAMETER;
        size_t prev_size = record_size(kind_at(prev));
        if (prev_size == 0)
            return CUPTI_ERROR_INVALID_KIND;
        offset = (size_t)(prev - buffer) + align_up(prev_size);
    }
    if (offset >= valid_size || valid_size - offset < sizeof(uint32_t))
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    size_t size = record_size(kind_at(buffer + offset));
    if (size == 0)
        return CUPTI_ERROR_INVALID_KIND;
    if (size > valid_size - offset)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = (CUpti_Activity *)(buffer + offset);
    return CUPTI_SUCCESS;
}

/* ---- detaching ---- */

/* Detaches everything, as cuptiFinalize documents: the subscriber, callbacks, kinds, settings and
 * undelivered records are gone (the client was to flush first). Correlation ids keep counting and
 * interned names stay valid, so records a client still holds remain readable. */
CUptiResult CUPTIAPI cuptiFinalize(void) {
    lock();
    struct record_queue dropped_queue = take_queue_locked();
    replay.subscribed = false;
    memset(&replay.subscriber, 0, sizeof(replay.subscriber));
    replay.timestamp = NULL;
    replay.thread_id_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;
    replay.request = NULL;
    replay.complete = NULL;
    memset(replay.kinds, 0, sizeof(replay.kinds));
    memset(replay.runtime_api, 0, sizeof(replay.runtime_api));
    memset(replay.driver_api, 0, sizeof(replay.driver_api));
    replay.dropped = 0;
    unlock();
    free(dropped_queue.records);
    return CUPTI_SUCCESS;
}
