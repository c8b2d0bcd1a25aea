/* cupti_replay_check: a tiny CUPTI subscriber that tests of the CUPTI test double
 * (libcupti_replay.so) drive step by step. Each argument is one step ("subscribe:NAME",
 * "cb:2:211:1", "api:2:211", "kernel:1:k:100:200", "flush", ...; see usage()); every step and
 * every callback the double makes (API and resource callbacks, buffer requests, completed buffers
 * and the records in them) is printed as one JSON object per line, so a test can compare what a
 * client receives with what the test scripted.
 *
 * With --lib PATH the CUPTI functions come from that library (dlopen, dlsym on its handle)
 * instead of the linked double (the real libcupti.so is linked -Bsymbolic, so it never calls
 * into the double's exports): run against the real libcupti.so, the driver-free steps (walk:,
 * result:, bad parameters, getnode:0, getgraph:0) tell whether the double answers as CUPTI does.
 * The script's own steps (api:, enter:, resource:, kernel:, nodeid:, ...) always go to the
 * double. */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "cupti_replay.h"
#include "progs_common.h"

/* The CUPTI functions the steps call, from the double or from --lib. */
struct cupti_api {
    CUptiResult (*get_result_string)(CUptiResult, const char **);
    CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*subscribe_v2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                                CUpti_SubscriberParams *);
    CUptiResult (*unsubscribe)(CUpti_SubscriberHandle);
    CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                   CUpti_CallbackId);
    CUptiResult (*enable_domain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
    CUptiResult (*register_timestamp)(CUpti_TimestampCallbackFunc);
    CUptiResult (*set_thread_id_type)(CUpti_ActivityThreadIdType);
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                      CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*disable)(CUpti_ActivityKind);
    CUptiResult (*enable_runtime_api)(CUpti_CallbackId, uint8_t);
    CUptiResult (*enable_driver_api)(CUpti_CallbackId, uint8_t);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*get_next_record)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*get_num_dropped)(CUcontext, uint32_t, size_t *);
    CUptiResult (*get_timestamp)(uint64_t *);
    CUptiResult (*set_attribute)(CUpti_ActivityAttribute, size_t *, void *);
    CUptiResult (*finalize)(void);
    CUptiResult (*get_graph_node_id)(CUgraphNode, uint64_t *);
    CUptiResult (*get_graph_id)(CUgraph, uint32_t *);
};

/* What the client side keeps between steps. */
static struct {
    struct cupti_api api;
    CUpti_SubscriberHandle subscriber;
    size_t buffer_size;
    size_t max_records;
    bool null_buffers;
    bool flush_in_exit;
    atomic_uint requests;
    atomic_ullong fake_clock;
    pthread_mutex_t out;
} client = {
    .buffer_size = 1 << 16,
    .out = PTHREAD_MUTEX_INITIALIZER,
};

/* ---- output ---- */

static void out_lock(void) {
    pthread_mutex_lock(&client.out);
}

static void out_unlock(void) {
    fflush(stdout);
    pthread_mutex_unlock(&client.out);
}

static void print_string(const char *s) {
    if (!s) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        if ((unsigned char)*s >= 0x20)
            putchar(*s);
    }
    putchar('"');
}

static void print_rc(const char *op, CUptiResult rc) {
    out_lock();
    printf("{\"op\":\"%s\",\"rc\":%d}\n", op, (int)rc);
    out_unlock();
}

/* ---- client callbacks ---- */

/* The deterministic clock `tsclock` registers: 1000000, 1001000, 1002000, ... */
static uint64_t CUPTIAPI fake_timestamp(void) {
    return 1000000 + 1000 * atomic_fetch_add(&client.fake_clock, 1);
}

static void print_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                           const CUpti_CallbackData *data) {
    uint64_t ts = 0;
    client.api.get_timestamp(&ts);
    bool exit_site = data->callbackSite == CUPTI_API_EXIT;
    out_lock();
    printf("{\"ev\":\"callback\",\"domain\":%d,\"cbid\":%u,\"site\":\"%s\",\"corr\":%u,"
           "\"function\":",
           (int)domain, cbid, exit_site ? "exit" : "enter", data->correlationId);
    print_string(data->functionName);
    fputs(",\"symbol\":", stdout);
    print_string(data->symbolName);
    printf(",\"ts\":%" PRIu64 ",\"tid\":%ld,\"correlation_data\":%" PRIu64
           ",\"has_params\":%d,\"return_value\":%d}\n",
           ts, progs_gettid(), *data->correlationData, data->functionParams != NULL,
           exit_site ? *(const int *)data->functionReturnValue : 0);
    out_unlock();
}

static uint64_t handle_value(const void *handle) {
    return (uint64_t)(uintptr_t)handle;
}

/* A resource callback; with a descriptor (the check only passes CUpti_GraphData) its graph
 * fields and what cuptiGetGraphNodeId / cuptiGetGraphId say of the node and graph, asked from
 * inside the callback. */
static void print_resource(CUpti_CallbackId cbid, const CUpti_ResourceData *data) {
    const CUpti_GraphData *g = data->resourceDescriptor;
    uint64_t node_id = 0;
    uint32_t graph_id = 0;
    CUptiResult node_rc = g ? client.api.get_graph_node_id(g->node, &node_id) : CUPTI_SUCCESS;
    CUptiResult graph_rc = g ? client.api.get_graph_id(g->graph, &graph_id) : CUPTI_SUCCESS;
    out_lock();
    printf("{\"ev\":\"resource\",\"cbid\":%u,\"context\":%" PRIu64 ",\"stream\":%" PRIu64
           ",\"tid\":%ld,\"descriptor\":%d",
           cbid, handle_value(data->context), handle_value(data->resourceHandle.stream),
           progs_gettid(), g != NULL);
    if (g)
        printf(",\"graph\":%" PRIu64 ",\"original_graph\":%" PRIu64 ",\"node\":%" PRIu64
               ",\"original_node\":%" PRIu64 ",\"node_type\":%d,\"dependency\":%" PRIu64
               ",\"graph_exec\":%" PRIu64 ",\"node_rc\":%d,\"node_id\":%" PRIu64
               ",\"graph_rc\":%d,\"graph_id\":%u",
               handle_value(g->graph), handle_value(g->originalGraph), handle_value(g->node),
               handle_value(g->originalNode), (int)g->nodeType, handle_value(g->dependency),
               handle_value(g->graphExec), (int)node_rc, node_id, (int)graph_rc, graph_id);
    puts("}");
    out_unlock();
}

/* At ENTER stores corr * 1000 + 7 in correlationData; EXIT prints what it finds there. */
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *cbdata) {
    (void)userdata;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
        print_resource(cbid, cbdata);
        return;
    }
    const CUpti_CallbackData *data = cbdata;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)
        return;
    if (data->callbackSite == CUPTI_API_ENTER)
        *data->correlationData = (uint64_t)data->correlationId * 1000 + 7;
    print_callback(domain, cbid, data);
    if (data->callbackSite == CUPTI_API_EXIT && client.flush_in_exit)
        print_rc("flush_in_exit", client.api.flush_all(0));
}

/* Hands out buffers whose first 8 bytes (before the returned pointer) hold their request
 * number, so completions can say which request a buffer came from. */
static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    unsigned index = atomic_fetch_add(&client.requests, 1);
    *buffer = NULL;
    *size = 0;
    *max_records = client.max_records;
    if (!client.null_buffers) {
        uint64_t *block = aligned_alloc(8, 8 + ((client.buffer_size + 7) & ~(size_t)7));
        block[0] = index;
        *buffer = (uint8_t *)(block + 1);
        *size = client.buffer_size;
    }
    out_lock();
    printf("{\"ev\":\"request\",\"buffer\":%u,\"size\":%zu,\"null\":%d}\n", index, *size,
           client.null_buffers);
    out_unlock();
}

static void print_kernel(const CUpti_ActivityKernel10 *k) {
    printf(",\"corr\":%u,\"name\":", k->correlationId);
    print_string(k->name);
    printf(",\"name_ptr\":\"%p\",\"start\":%" PRIu64 ",\"end\":%" PRIu64 ",\"completed\":%" PRIu64
           ",\"device\":%u,\"context\":%u,\"stream\":%u,\"grid_id\":%" PRId64
           ",\"graph_id\":%u,\"graph_node_id\":%" PRIu64,
           (const void *)k->name, k->start, k->end, k->completed, k->deviceId, k->contextId,
           k->streamId, k->gridId, k->graphId, k->graphNodeId);
}

static void print_memcpy(const CUpti_ActivityMemcpy6 *m) {
    printf(",\"corr\":%u,\"runtime_corr\":%u,\"copy_kind\":%u,\"src_kind\":%u,\"dst_kind\":%u,"
           "\"bytes\":%" PRIu64 ",\"start\":%" PRIu64 ",\"end\":%" PRIu64
           ",\"device\":%u,\"stream\":%u,\"graph_id\":%u,\"graph_node_id\":%" PRIu64,
           m->correlationId, m->runtimeCorrelationId, m->copyKind, m->srcKind, m->dstKind, m->bytes,
           m->start, m->end, m->deviceId, m->streamId, m->graphId, m->graphNodeId);
}

static void print_memset(const CUpti_ActivityMemset4 *m) {
    printf(",\"corr\":%u,\"bytes\":%" PRIu64 ",\"start\":%" PRIu64 ",\"end\":%" PRIu64
           ",\"device\":%u,\"stream\":%u,\"memory_kind\":%u,\"graph_id\":%u,"
           "\"graph_node_id\":%" PRIu64,
           m->correlationId, m->bytes, m->start, m->end, m->deviceId, m->streamId, m->memoryKind,
           m->graphId, m->graphNodeId);
}

static void print_api_record(const CUpti_ActivityAPI *a) {
    printf(",\"cbid\":%u,\"corr\":%u,\"start\":%" PRIu64 ",\"end\":%" PRIu64
           ",\"pid\":%u,\"thread_id\":%u,\"return_value\":%u",
           a->cbid, a->correlationId, a->start, a->end, a->processId, a->threadId, a->returnValue);
}

static void print_record(unsigned buffer, size_t offset, const CUpti_Activity *rec) {
    printf("{\"ev\":\"record\",\"buffer\":%u,\"offset\":%zu,\"kind\":%d", buffer, offset,
           (int)rec->kind);
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        print_kernel((const CUpti_ActivityKernel10 *)rec);
        break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        print_memcpy((const CUpti_ActivityMemcpy6 *)rec);
        break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
        print_memset((const CUpti_ActivityMemset4 *)rec);
        break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        print_api_record((const CUpti_ActivityAPI *)rec);
        break;
    default:
        break;
    }
    puts("}");
}

static void CUPTIAPI on_complete(CUcontext context, uint32_t stream_id, uint8_t *buffer,
                                 size_t size, size_t valid) {
    (void)context;
    uint64_t *block = (uint64_t *)buffer - 1;
    unsigned index = (unsigned)block[0];
    out_lock();
    printf("{\"ev\":\"buffer\",\"buffer\":%u,\"size\":%zu,\"valid\":%zu,\"stream\":%u,"
           "\"tid\":%ld}\n",
           index, size, valid, stream_id, progs_gettid());
    CUpti_Activity *rec = NULL;
    CUptiResult rc;
    while ((rc = client.api.get_next_record(buffer, valid, &rec)) == CUPTI_SUCCESS)
        print_record(index, (size_t)((uint8_t *)rec - buffer), rec);
    printf("{\"ev\":\"walk_end\",\"buffer\":%u,\"rc\":%d}\n", index, (int)rc);
    out_unlock();
    free(block);
}

/* ---- steps ---- */

#define MAX_FIELDS 10

struct step {
    const char *name;
    int n; /* fields after the name */
    const char *field[MAX_FIELDS];
};

static unsigned long long field_num(const struct step *s, int i, unsigned long long fallback) {
    return i < s->n ? strtoull(s->field[i], NULL, 0) : fallback;
}

static const char *field_str(const struct step *s, int i, const char *fallback) {
    return i < s->n ? s->field[i] : fallback;
}

static void step_subscribe(const struct step *s) {
    char old[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = "";
    CUpti_SubscriberParams params = {
        .structSize = CUpti_SubscriberParams_STRUCT_SIZE,
        .subscriberName = field_str(s, 0, "check"),
        .oldSubscriberName = old,
        .oldSubscriberSize = sizeof(old),
    };
    CUptiResult rc = client.api.subscribe_v2(&client.subscriber, on_callback, NULL, &params);
    out_lock();
    printf("{\"op\":\"subscribe\",\"rc\":%d,\"old\":", (int)rc);
    print_string(old);
    puts("}");
    out_unlock();
}

static void step_subscribe_v1(const struct step *s) {
    (void)s;
    print_rc("subscribe_v1", client.api.subscribe(&client.subscriber, on_callback, NULL));
}

static void step_subscribe_badsize(const struct step *s) {
    (void)s;
    CUpti_SubscriberParams params = {.structSize = 0};
    CUpti_SubscriberHandle handle = NULL;
    print_rc("subscribe_badsize", client.api.subscribe_v2(&handle, on_callback, NULL, &params));
}

static void step_unsubscribe(const struct step *s) {
    (void)s;
    print_rc("unsubscribe", client.api.unsubscribe(client.subscriber));
}

/* A handle CUPTI never gave out. */
static CUpti_SubscriberHandle bogus_handle(void) {
    return (CUpti_SubscriberHandle)(uintptr_t)0x1234;
}

static void step_unsubscribe_bad(const struct step *s) {
    (void)s;
    print_rc("unsubscribe_bad", client.api.unsubscribe(bogus_handle()));
}

/* cb:DOMAIN:CBID[:ENABLE] */
static void step_cb(const struct step *s) {
    print_rc("cb", client.api.enable_callback((uint32_t)field_num(s, 2, 1), client.subscriber,
                                              (CUpti_CallbackDomain)field_num(s, 0, 0),
                                              (CUpti_CallbackId)field_num(s, 1, 0)));
}

static void step_cb_bad(const struct step *s) {
    print_rc("cb_bad",
             client.api.enable_callback(1, bogus_handle(), (CUpti_CallbackDomain)field_num(s, 0, 2),
                                        (CUpti_CallbackId)field_num(s, 1, 211)));
}

/* domain:DOMAIN[:ENABLE] */
static void step_domain(const struct step *s) {
    print_rc("domain", client.api.enable_domain((uint32_t)field_num(s, 1, 1), client.subscriber,
                                                (CUpti_CallbackDomain)field_num(s, 0, 0)));
}

static void step_register(const struct step *s) {
    (void)s;
    print_rc("register", client.api.register_callbacks(on_request, on_complete));
}

static void step_register_null(const struct step *s) {
    (void)s;
    print_rc("register_null", client.api.register_callbacks(NULL, on_complete));
}

static void step_bufsize(const struct step *s) {
    client.buffer_size = (size_t)field_num(s, 0, 1 << 16);
}

static void step_maxrec(const struct step *s) {
    client.max_records = (size_t)field_num(s, 0, 0);
}

static void step_nullbuf(const struct step *s) {
    client.null_buffers = field_num(s, 0, 1) != 0;
}

static void step_tsclock(const struct step *s) {
    (void)s;
    print_rc("tsclock", client.api.register_timestamp(fake_timestamp));
}

static void step_tsclock_null(const struct step *s) {
    (void)s;
    print_rc("tsclock_null", client.api.register_timestamp(NULL));
}

/* tid:default|system|NUMBER */
static void step_tid(const struct step *s) {
    const char *type = field_str(s, 0, "default");
    CUpti_ActivityThreadIdType t =
        strcmp(type, "system") == 0    ? CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM
        : strcmp(type, "default") == 0 ? CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT
                                       : (CUpti_ActivityThreadIdType)strtol(type, NULL, 0);
    print_rc("tid", client.api.set_thread_id_type(t));
}

static void step_enable(const struct step *s) {
    print_rc("enable", client.api.enable((CUpti_ActivityKind)field_num(s, 0, 0)));
}

static void step_disable(const struct step *s) {
    print_rc("disable", client.api.disable((CUpti_ActivityKind)field_num(s, 0, 0)));
}

static void step_rtapi(const struct step *s) {
    print_rc("rtapi", client.api.enable_runtime_api((CUpti_CallbackId)field_num(s, 0, 0),
                                                    (uint8_t)field_num(s, 1, 1)));
}

static void step_drvapi(const struct step *s) {
    print_rc("drvapi", client.api.enable_driver_api((CUpti_CallbackId)field_num(s, 0, 0),
                                                    (uint8_t)field_num(s, 1, 1)));
}

/* api:DOMAIN:CBID[:FUNCTION[:SYMBOL[:RETURN]]] */
static void step_api(const struct step *s) {
    uint64_t before = 0, after = 0;
    client.api.get_timestamp(&before);
    uint32_t corr = cupti_replay_api_ex((CUpti_CallbackDomain)field_num(s, 0, 2),
                                        (CUpti_CallbackId)field_num(s, 1, 211),
                                        field_str(s, 2, "cudaLaunchKernel"),
                                        field_str(s, 3, "kern"), NULL, (int)field_num(s, 4, 0));
    client.api.get_timestamp(&after);
    out_lock();
    printf("{\"op\":\"api\",\"corr\":%u,\"pthread\":%u,\"gettid\":%ld,\"pid\":%d,"
           "\"before\":%" PRIu64 ",\"after\":%" PRIu64 "}\n",
           corr, (uint32_t)(uintptr_t)pthread_self(), progs_gettid(), (int)getpid(), before, after);
    out_unlock();
}

/* enter:DOMAIN:CBID[:FUNCTION[:SYMBOL]] -> cupti_replay_api_enter */
static void step_enter(const struct step *s) {
    uint32_t corr = cupti_replay_api_enter(
        (CUpti_CallbackDomain)field_num(s, 0, 2), (CUpti_CallbackId)field_num(s, 1, 211),
        field_str(s, 2, "cudaLaunchKernel"), field_str(s, 3, "kern"), NULL);
    out_lock();
    printf("{\"op\":\"enter\",\"corr\":%u}\n", corr);
    out_unlock();
}

/* exit:CORR[:RETURN] -> cupti_replay_api_exit */
static void step_exit(const struct step *s) {
    uint32_t corr = (uint32_t)field_num(s, 0, 1);
    cupti_replay_api_exit(corr, (int)field_num(s, 1, 0));
    out_lock();
    printf("{\"op\":\"exit\",\"corr\":%u}\n", corr);
    out_unlock();
}

struct exit_job {
    uint32_t corr;
    int return_value;
};

static void *exit_on_thread(void *arg) {
    const struct exit_job *job = arg;
    cupti_replay_api_exit(job->corr, job->return_value);
    return NULL;
}

/* exit_thread:CORR[:RETURN] -> cupti_replay_api_exit on another thread (which has no open
 * call) */
static void step_exit_thread(const struct step *s) {
    struct exit_job job = {(uint32_t)field_num(s, 0, 1), (int)field_num(s, 1, 0)};
    pthread_t thread;
    pthread_create(&thread, NULL, exit_on_thread, &job);
    pthread_join(thread, NULL);
    out_lock();
    printf("{\"op\":\"exit_thread\",\"corr\":%u}\n", job.corr);
    out_unlock();
}

/* resource:CBID[:CONTEXT[:GRAPH:NODE[:ORIG_GRAPH:ORIG_NODE:EXEC[:TYPE[:DEPENDENCY]]]]] ->
 * cupti_replay_resource; from GRAPH on the descriptor is a CUpti_GraphData (else NULL). Handles
 * are numbers (0: NULL). */
static void step_resource(const struct step *s) {
    CUpti_CallbackId cbid =
        (CUpti_CallbackId)field_num(s, 0, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
    CUpti_GraphData g = {
        .graph = (CUgraph)(uintptr_t)field_num(s, 2, 0),
        .node = (CUgraphNode)(uintptr_t)field_num(s, 3, 0),
        .originalGraph = (CUgraph)(uintptr_t)field_num(s, 4, 0),
        .originalNode = (CUgraphNode)(uintptr_t)field_num(s, 5, 0),
        .graphExec = (CUgraphExec)(uintptr_t)field_num(s, 6, 0),
        .nodeType = (CUgraphNodeType)field_num(s, 7, CU_GRAPH_NODE_TYPE_KERNEL),
        .dependency = (CUgraphNode)(uintptr_t)field_num(s, 8, 0),
    };
    cupti_replay_resource(cbid, (CUcontext)(uintptr_t)field_num(s, 1, 0), s->n > 2 ? &g : NULL);
    out_lock();
    printf("{\"op\":\"resource\",\"cbid\":%u}\n", cbid);
    out_unlock();
}

/* nodeid:HANDLE:ID -> cupti_replay_set_graph_node_id */
static void step_nodeid(const struct step *s) {
    cupti_replay_set_graph_node_id((CUgraphNode)(uintptr_t)field_num(s, 0, 0), field_num(s, 1, 0));
}

/* graphid:HANDLE:ID -> cupti_replay_set_graph_id */
static void step_graphid(const struct step *s) {
    cupti_replay_set_graph_id((CUgraph)(uintptr_t)field_num(s, 0, 0), (uint32_t)field_num(s, 1, 0));
}

/* getnode:HANDLE[:null] -> cuptiGetGraphNodeId (with "null": a NULL out pointer); the id is
 * printed as found in the out variable (77 before the call). */
static void step_getnode(const struct step *s) {
    uint64_t handle = field_num(s, 0, 0), id = 77;
    bool null_out = strcmp(field_str(s, 1, ""), "null") == 0;
    CUptiResult rc =
        client.api.get_graph_node_id((CUgraphNode)(uintptr_t)handle, null_out ? NULL : &id);
    out_lock();
    printf("{\"op\":\"getnode\",\"handle\":%" PRIu64 ",\"rc\":%d,\"id\":%" PRIu64 "}\n", handle,
           (int)rc, id);
    out_unlock();
}

/* getgraph:HANDLE[:null] -> cuptiGetGraphId, as getnode. */
static void step_getgraph(const struct step *s) {
    uint64_t handle = field_num(s, 0, 0);
    uint32_t id = 77;
    bool null_out = strcmp(field_str(s, 1, ""), "null") == 0;
    CUptiResult rc = client.api.get_graph_id((CUgraph)(uintptr_t)handle, null_out ? NULL : &id);
    out_lock();
    printf("{\"op\":\"getgraph\",\"handle\":%" PRIu64 ",\"rc\":%d,\"id\":%u}\n", handle, (int)rc,
           id);
    out_unlock();
}

/* kernel:CORR:NAME:START:END[:DEVICE:STREAM:GRAPH:NODE] */
static void step_kernel(const struct step *s) {
    int rc = cupti_replay_kernel((uint32_t)field_num(s, 0, 1), field_str(s, 1, "kern"),
                                 field_num(s, 2, 100), field_num(s, 3, 200),
                                 (uint32_t)field_num(s, 4, 0), (uint32_t)field_num(s, 5, 7),
                                 (uint32_t)field_num(s, 6, 0), field_num(s, 7, 0));
    print_rc("kernel", (CUptiResult)rc);
}

/* memcpy:CORR:COPY_KIND:BYTES:START:END[:DEVICE:STREAM:GRAPH:NODE] */
static void step_memcpy(const struct step *s) {
    int rc = cupti_replay_memcpy((uint32_t)field_num(s, 0, 1), (uint8_t)field_num(s, 1, 1),
                                 field_num(s, 2, 4096), field_num(s, 3, 100), field_num(s, 4, 200),
                                 (uint32_t)field_num(s, 5, 0), (uint32_t)field_num(s, 6, 7),
                                 (uint32_t)field_num(s, 7, 0), field_num(s, 8, 0));
    print_rc("memcpy", (CUptiResult)rc);
}

/* memset:CORR:BYTES:START:END[:DEVICE:STREAM:GRAPH:NODE] */
static void step_memset(const struct step *s) {
    int rc = cupti_replay_memset((uint32_t)field_num(s, 0, 1), field_num(s, 1, 4096),
                                 field_num(s, 2, 100), field_num(s, 3, 200),
                                 (uint32_t)field_num(s, 4, 0), (uint32_t)field_num(s, 5, 7),
                                 (uint32_t)field_num(s, 6, 0), field_num(s, 7, 0));
    print_rc("memset", (CUptiResult)rc);
}

static void step_drop(const struct step *s) {
    cupti_replay_drop(field_num(s, 0, 1));
}

static void step_dropped(const struct step *s) {
    (void)s;
    size_t n = 0;
    CUptiResult rc = client.api.get_num_dropped(NULL, 0, &n);
    out_lock();
    printf("{\"op\":\"dropped\",\"rc\":%d,\"n\":%zu}\n", (int)rc, n);
    out_unlock();
}

static void step_dropped_null(const struct step *s) {
    (void)s;
    print_rc("dropped_null", client.api.get_num_dropped(NULL, 0, NULL));
}

static void step_flush(const struct step *s) {
    print_rc("flush", client.api.flush_all((uint32_t)field_num(s, 0, 0)));
}

static void step_deliver(const struct step *s) {
    cupti_replay_deliver((size_t)field_num(s, 0, 64), (int)field_num(s, 1, 0));
    print_rc("deliver", CUPTI_SUCCESS);
}

static void step_flush_order(const struct step *s) {
    cupti_replay_set_flush_order((size_t)field_num(s, 0, 64), (int)field_num(s, 1, 0));
}

static void step_flush_in_exit(const struct step *s) {
    client.flush_in_exit = field_num(s, 0, 1) != 0;
}

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* now: CUPTI's clock read three ways, with CLOCK_REALTIME before and after. */
static void step_now(const struct step *s) {
    (void)s;
    uint64_t before = realtime_ns();
    uint64_t cupti = 0;
    CUptiResult rc = client.api.get_timestamp(&cupti);
    uint64_t after = realtime_ns();
    out_lock();
    printf("{\"op\":\"now\",\"rc\":%d,\"cupti\":%" PRIu64 ",\"realtime_before\":%" PRIu64
           ",\"realtime_after\":%" PRIu64 "}\n",
           (int)rc, cupti, before, after);
    out_unlock();
}

static void step_replay_now(const struct step *s) {
    (void)s;
    uint64_t now = cupti_replay_now();
    out_lock();
    printf("{\"op\":\"replay_now\",\"ts\":%" PRIu64 "}\n", now);
    out_unlock();
}

static void step_now_null(const struct step *s) {
    (void)s;
    print_rc("now_null", client.api.get_timestamp(NULL));
}

static void step_pending(const struct step *s) {
    (void)s;
    size_t n = cupti_replay_pending();
    out_lock();
    printf("{\"op\":\"pending\",\"n\":%zu}\n", n);
    out_unlock();
}

/* subscribed -> cupti_replay_subscribed */
static void step_subscribed(const struct step *s) {
    (void)s;
    int subscribed = cupti_replay_subscribed();
    out_lock();
    printf("{\"op\":\"subscribed\",\"value\":%d}\n", subscribed);
    out_unlock();
}

static void step_finalize(const struct step *s) {
    (void)s;
    print_rc("finalize", client.api.finalize());
}

/* result:CODE -> cuptiGetResultString */
static void step_result(const struct step *s) {
    const char *str = NULL;
    CUptiResult code = (CUptiResult)field_num(s, 0, 0);
    CUptiResult rc = client.api.get_result_string(code, &str);
    out_lock();
    printf("{\"op\":\"result\",\"code\":%d,\"rc\":%d,\"str\":", (int)code, (int)rc);
    print_string(rc == CUPTI_SUCCESS ? str : NULL);
    puts("}");
    out_unlock();
}

static void step_result_null(const struct step *s) {
    (void)s;
    print_rc("result_null", client.api.get_result_string(CUPTI_SUCCESS, NULL));
}

/* attr:ATTR:VALUE_SIZE (value 1) */
static void step_attr(const struct step *s) {
    uint64_t value = 1;
    size_t size = (size_t)field_num(s, 1, sizeof(size_t));
    print_rc("attr",
             client.api.set_attribute((CUpti_ActivityAttribute)field_num(s, 0, 0), &size, &value));
}

/* Appends one CUpti_ActivityAPI record of `kind` at `offset` of buf. */
static void put_api_record(uint8_t *buf, size_t offset, uint32_t kind) {
    CUpti_ActivityAPI rec;
    memset(&rec, 0, sizeof(rec));
    rec.kind = (CUpti_ActivityKind)kind;
    rec.correlationId = (uint32_t)offset + 1;
    memcpy(buf + offset, &rec, sizeof(rec));
}

/* walk:CASE — cuptiActivityGetNextRecord over a hand-made buffer; prints every status until
 * the first error. CASE: empty (valid 0), zeroes, two (two RUNTIME records), cut (the second
 * record cut short), tiny (the first one cut short), garbage (a bad kind after one record), null
 * (NULL buffer). */
static void step_walk(const struct step *s) {
    const char *which = field_str(s, 0, "two");
    _Alignas(8) uint8_t buf[256];
    memset(buf, 0, sizeof(buf));
    size_t rec = sizeof(CUpti_ActivityAPI), valid = 2 * rec;
    put_api_record(buf, 0, CUPTI_ACTIVITY_KIND_RUNTIME);
    put_api_record(buf, rec, CUPTI_ACTIVITY_KIND_RUNTIME);
    if (strcmp(which, "empty") == 0)
        valid = 0;
    else if (strcmp(which, "zeroes") == 0)
        memset(buf, 0, sizeof(buf));
    else if (strcmp(which, "cut") == 0)
        valid = rec + rec / 2;
    else if (strcmp(which, "tiny") == 0)
        valid = rec / 2;
    else if (strcmp(which, "garbage") == 0)
        memset(buf + rec, 0xff, 8);
    uint8_t *base = strcmp(which, "null") == 0 ? NULL : buf;
    CUpti_Activity *record = NULL;
    out_lock();
    printf("{\"op\":\"walk\",\"case\":\"%s\",\"steps\":[", which);
    for (int i = 0; i < 8; i++) {
        CUptiResult rc = client.api.get_next_record(base, valid, &record);
        long offset = rc == CUPTI_SUCCESS ? (long)((uint8_t *)record - buf) : -1;
        printf("%s[%d,%ld]", i ? "," : "", (int)rc, offset);
        if (rc != CUPTI_SUCCESS)
            break;
    }
    puts("]}");
    out_unlock();
}

/* threads:N:M — N threads released together, each making M API calls, each with one kernel
 * record named "t<thread>"; prints the correlation ids every thread got. */
struct thread_job {
    pthread_t thread;
    pthread_barrier_t *gate;
    int index;
    int calls;
    uint32_t *corrs;
};

static void *thread_calls(void *arg) {
    struct thread_job *job = arg;
    char name[32];
    snprintf(name, sizeof(name), "t%d", job->index);
    pthread_barrier_wait(job->gate);
    for (int i = 0; i < job->calls; i++) {
        job->corrs[i] = cupti_replay_api(CUPTI_CB_DOMAIN_RUNTIME_API,
                                         CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                         "cudaLaunchKernel", name);
        cupti_replay_kernel(job->corrs[i], name, 100 + (uint64_t)i, 200 + (uint64_t)i, 0, 7, 0, 0);
    }
    return NULL;
}

static void print_thread_job(const struct thread_job *job) {
    printf("{\"op\":\"thread\",\"index\":%d,\"corrs\":[", job->index);
    for (int i = 0; i < job->calls; i++)
        printf("%s%u", i ? "," : "", job->corrs[i]);
    puts("]}");
}

static void step_threads(const struct step *s) {
    int n = (int)field_num(s, 0, 4), calls = (int)field_num(s, 1, 10);
    struct thread_job *jobs = calloc((size_t)n, sizeof(*jobs));
    pthread_barrier_t gate;
    pthread_barrier_init(&gate, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct thread_job){.gate = &gate, .index = i, .calls = calls};
        jobs[i].corrs = calloc((size_t)calls, sizeof(uint32_t));
        pthread_create(&jobs[i].thread, NULL, thread_calls, &jobs[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(jobs[i].thread, NULL);
    out_lock();
    for (int i = 0; i < n; i++) {
        print_thread_job(&jobs[i]);
        free(jobs[i].corrs);
    }
    out_unlock();
    pthread_barrier_destroy(&gate);
    free(jobs);
}

typedef void (*step_fn)(const struct step *);

static const struct {
    const char *name;
    step_fn run;
} steps[] = {
    {"subscribe", step_subscribe},
    {"subscribe_v1", step_subscribe_v1},
    {"subscribe_badsize", step_subscribe_badsize},
    {"unsubscribe", step_unsubscribe},
    {"unsubscribe_bad", step_unsubscribe_bad},
    {"cb", step_cb},
    {"cb_bad", step_cb_bad},
    {"domain", step_domain},
    {"register", step_register},
    {"register_null", step_register_null},
    {"bufsize", step_bufsize},
    {"maxrec", step_maxrec},
    {"nullbuf", step_nullbuf},
    {"tsclock", step_tsclock},
    {"tsclock_null", step_tsclock_null},
    {"tid", step_tid},
    {"enable", step_enable},
    {"disable", step_disable},
    {"rtapi", step_rtapi},
    {"drvapi", step_drvapi},
    {"api", step_api},
    {"enter", step_enter},
    {"exit", step_exit},
    {"exit_thread", step_exit_thread},
    {"resource", step_resource},
    {"nodeid", step_nodeid},
    {"graphid", step_graphid},
    {"getnode", step_getnode},
    {"getgraph", step_getgraph},
    {"kernel", step_kernel},
    {"memcpy", step_memcpy},
    {"memset", step_memset},
    {"drop", step_drop},
    {"dropped", step_dropped},
    {"dropped_null", step_dropped_null},
    {"flush", step_flush},
    {"deliver", step_deliver},
    {"flush_order", step_flush_order},
    {"flush_in_exit", step_flush_in_exit},
    {"now", step_now},
    {"replay_now", step_replay_now},
    {"now_null", step_now_null},
    {"pending", step_pending},
    {"subscribed", step_subscribed},
    {"finalize", step_finalize},
    {"result", step_result},
    {"result_null", step_result_null},
    {"attr", step_attr},
    {"walk", step_walk},
    {"threads", step_threads},
};

/* Splits "name:f1:f2" in place. */
static struct step parse_step(char *text) {
    struct step s = {.name = strtok(text, ":")};
    char *field;
    while (s.n < MAX_FIELDS && (field = strtok(NULL, ":")))
        s.field[s.n++] = field;
    return s;
}

static int run_step(char *text) {
    struct step s = parse_step(text);
    for (size_t i = 0; s.name && i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (strcmp(steps[i].name, s.name) == 0) {
            steps[i].run(&s);
            return 0;
        }
    }
    fprintf(stderr, "cupti_replay_check: unknown step '%s'\n", s.name ? s.name : "");
    return -1;
}

/* ---- resolving the CUPTI functions ---- */

static void *resolve(void *lib, const char *name) {
    void *fn = dlsym(lib, name);
    if (!fn) {
        fprintf(stderr, "cupti_replay_check: %s: %s\n", name, dlerror());
        exit(PROGS_EXIT_RUNTIME);
    }
    return fn;
}

#define RESOLVE(field, symbol) *(void **)(&client.api.field) = resolve(lib, #symbol)

static void resolve_api(void *lib) {
    RESOLVE(get_result_string, cuptiGetResultString);
    RESOLVE(subscribe, cuptiSubscribe);
    RESOLVE(subscribe_v2, cuptiSubscribe_v2);
    RESOLVE(unsubscribe, cuptiUnsubscribe);
    RESOLVE(enable_callback, cuptiEnableCallback);
    RESOLVE(enable_domain, cuptiEnableDomain);
    RESOLVE(register_timestamp, cuptiActivityRegisterTimestampCallback);
    RESOLVE(set_thread_id_type, cuptiSetThreadIdType);
    RESOLVE(register_callbacks, cuptiActivityRegisterCallbacks);
    RESOLVE(enable, cuptiActivityEnable);
    RESOLVE(disable, cuptiActivityDisable);
    RESOLVE(enable_runtime_api, cuptiActivityEnableRuntimeApi);
    RESOLVE(enable_driver_api, cuptiActivityEnableDriverApi);
    RESOLVE(flush_all, cuptiActivityFlushAll);
    RESOLVE(get_next_record, cuptiActivityGetNextRecord);
    RESOLVE(get_num_dropped, cuptiActivityGetNumDroppedRecords);
    RESOLVE(get_timestamp, cuptiGetTimestamp);
    RESOLVE(set_attribute, cuptiActivitySetAttribute);
    RESOLVE(finalize, cuptiFinalize);
    RESOLVE(get_graph_node_id, cuptiGetGraphNodeId);
    RESOLVE(get_graph_id, cuptiGetGraphId);
}

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: cupti_replay_check [--lib LIBCUPTI] STEP...\n"
        "steps: subscribe[:NAME] subscribe_v1 subscribe_badsize unsubscribe unsubscribe_bad\n"
        "       cb:DOMAIN:CBID[:ON] cb_bad[:DOMAIN:CBID] domain:DOMAIN[:ON] register\n"
        "       register_null bufsize:N maxrec:N nullbuf[:ON] tsclock tsclock_null\n"
        "       tid:default|system|N enable:KIND disable:KIND rtapi:CBID[:ON] drvapi:CBID[:ON]\n"
        "       api:DOMAIN:CBID[:FN[:SYM[:RET]]] kernel:CORR:NAME:START:END[:DEV:STREAM:G:N]\n"
        "       memcpy:CORR:KIND:BYTES:START:END[...] memset:CORR:BYTES:START:END[...]\n"
        "       drop:N dropped dropped_null flush[:FLAG] deliver:N:REV flush_order:N:REV\n"
        "       flush_in_exit[:ON] now replay_now now_null pending finalize result:CODE\n"
        "       result_null attr:ATTR:SIZE walk:CASE threads:N:M\n"
        "       enter:DOMAIN:CBID[:FN[:SYM]] exit:CORR[:RET] exit_thread:CORR[:RET]\n"
        "       resource:CBID[:CTX[:GRAPH:NODE[:ORIG_GRAPH:ORIG_NODE:EXEC[:TYPE[:DEP]]]]]\n"
        "       nodeid:HANDLE:ID graphid:HANDLE:ID getnode:HANDLE[:null] getgraph:HANDLE[:null]\n");
}

int main(int argc, char **argv) {
    int first = 1;
    void *lib = RTLD_DEFAULT;
    if (argc > 2 && strcmp(argv[1], "--lib") == 0) {
        lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            fprintf(stderr, "cupti_replay_check: %s\n", dlerror());
            return PROGS_EXIT_RUNTIME;
        }
        first = 3;
    }
    if (argc <= first || strcmp(argv[first], "--help") == 0) {
        usage(argc <= first ? stderr : stdout);
        return argc <= first ? PROGS_EXIT_USAGE : PROGS_EXIT_OK;
    }
    resolve_api(lib);
    for (int i = first; i < argc; i++)
        if (run_step(argv[i]) != 0)
            return PROGS_EXIT_USAGE;
    return PROGS_EXIT_OK;
}
