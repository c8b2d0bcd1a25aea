/* cupti_layout_check.c - libncclprobe_cupti.so's record decoder (src/cupti/layouts.c and
 * records.c, compiled in) on activity records of ONE CUPTI version, built with that version's
 * own headers. Compiled and run by tests/test_runtimes_cupti.py (not by the progs Makefile) with
 * -I the version's include/ and
 *
 *   -DKERNEL_T=... -DMEMCPY_T=... -DMEMSET_T=... -DAPI_T=...   the record structs its
 *       cupti_activity.h documents for CONCURRENT_KERNEL, MEMCPY, MEMSET and RUNTIME
 *   -DHAVE_STRUCT_SIZE       the headers declare cuptiActivityGetStructSize (13.2+)
 *   -include LAUNCH_CBIDS.h  LAUNCH_CBIDS(X): X(runtime, "name", cbid or 0) per launch API
 *
 * Modes:
 *   walk LIBCUPTI  the real libcupti says its version (cuptiGetVersion) and walks the buffer
 *                  (cuptiActivityGetNextRecord): each record must start where it was put, which
 *                  proves the record sizes are that CUPTI's
 *   feed           records handed to the decoder one by one; the version is CUPTI_API_VERSION
 *   abi            the callback side's constants and offsets, one per line
 *
 * Every record carries distinctive values; each decoded np_gpu_record is compared field by field
 * with what was put in. Prints "layouts ..." (what the decoder picked) and "ok N"; exit 1 on a
 * mismatch (said on stderr), 3 when the CUPTI refuses (an error code) in walk mode. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <cupti_version.h>

#include "cupti/layouts.h"
#include "cupti/records.h"

#define MAX_RECORDS 16

static _Alignas(8) uint8_t buffer[16384];
static size_t used;
static size_t offsets[MAX_RECORDS];
static struct np_gpu_record want[MAX_RECORDS];
static const char *want_name[MAX_RECORDS];
static int count;
static int failures;
static const char kernel_name[] = "np_layout_check_kernel";

static void fail(const char *what, int i, uint64_t got, uint64_t expected) {
    fprintf(stderr, "record %d: %s is 0x%" PRIx64 ", want 0x%" PRIx64 "\n", i, what, got, expected);
    failures++;
}

/* Room for the next record: 8-byte aligned, as CUPTI lays them out. */
static struct np_gpu_record *next(const void *rec, size_t size) {
    if (count == MAX_RECORDS || used + size > sizeof(buffer))
        exit(2);
    offsets[count] = used;
    memcpy(buffer + used, rec, size);
    used += (size + 7) & ~(size_t)7;
    memset(&want[count], 0, sizeof(want[count]));
    return &want[count++];
}

static void put_kernel(CUpti_ActivityKind kind, uint32_t i) {
    KERNEL_T k;
    memset(&k, 0, sizeof(k));
    k.kind = kind;
    k.correlationId = 0x1000 + i;
    k.start = 0x1122334455660000ull + i;
    k.end = k.start + 0x7777 + i;
    k.deviceId = 3 + i;
    k.contextId = 0x51 + i;
    k.streamId = 0x61 + i;
    k.graphId = 0x71 + i;
    k.graphNodeId = 0xabcdef0000000000ull + i;
    k.gridX = 0x101 + (int32_t)i, k.gridY = 0x102, k.gridZ = 0x103;
    k.blockX = 0x201, k.blockY = 0x202 + (int32_t)i, k.blockZ = 0x203;
    k.name = kernel_name;
    struct np_gpu_record *w = next(&k, sizeof(k));
    *w = (struct np_gpu_record){.kind = NP_GPU_KERNEL,
                                .correlation_id = k.correlationId,
                                .start_ns = k.start,
                                .end_ns = k.end,
                                .device = k.deviceId,
                                .context = k.contextId,
                                .stream = k.streamId,
                                .graph_id = k.graphId,
                                .graph_node_id = k.graphNodeId,
                                .grid = {0x101 + i, 0x102, 0x103},
                                .block = {0x201, 0x202 + i, 0x203}};
    want_name[count - 1] = kernel_name;
}

/* corr 0: the record has only the runtime call's id, which the decoder takes. */
static void put_memcpy(uint32_t corr, uint32_t i) {
    MEMCPY_T m;
    memset(&m, 0, sizeof(m));
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    m.bytes = 0x123456789aull + i;
    m.start = 0x2233445566770000ull + i;
    m.end = m.start + 0x999;
    m.deviceId = 5 + i;
    m.contextId = 0x81 + i;
    m.streamId = 0x91 + i;
    m.correlationId = corr;
    m.runtimeCorrelationId = 0x2000 + i;
    m.graphNodeId = 0x1234000000000000ull + i;
    m.graphId = 0xa1 + i;
    struct np_gpu_record *w = next(&m, sizeof(m));
    *w = (struct np_gpu_record){.kind = NP_GPU_MEMCPY,
                                .copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD,
                                .correlation_id = corr ? corr : m.runtimeCorrelationId,
                                .start_ns = m.start,
                                .end_ns = m.end,
                                .device = m.deviceId,
                                .context = m.contextId,
                                .stream = m.streamId,
                                .graph_id = m.graphId,
                                .graph_node_id = m.graphNodeId,
                                .bytes = m.bytes};
}

static void put_memset(uint32_t i) {
    MEMSET_T m;
    memset(&m, 0, sizeof(m));
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    m.value = 0x5a;
    m.bytes = 0x4455667788ull + i;
    m.start = 0x3344556677880000ull + i;
    m.end = m.start + 0x555;
    m.deviceId = 9 + i;
    m.contextId = 0xb1 + i;
    m.streamId = 0xc1 + i;
    m.correlationId = 0x3000 + i;
    m.graphNodeId = 0x5678000000000000ull + i;
    m.graphId = 0xd1 + i;
    struct np_gpu_record *w = next(&m, sizeof(m));
    *w = (struct np_gpu_record){.kind = NP_GPU_MEMSET,
                                .correlation_id = m.correlationId,
                                .start_ns = m.start,
                                .end_ns = m.end,
                                .device = m.deviceId,
                                .context = m.contextId,
                                .stream = m.streamId,
                                .graph_id = m.graphId,
                                .graph_node_id = m.graphNodeId,
                                .bytes = m.bytes};
}

static void put_api(CUpti_ActivityKind kind, uint32_t cbid, uint32_t i) {
    API_T a;
    memset(&a, 0, sizeof(a));
    a.kind = kind;
    a.cbid = cbid;
    a.start = 0x4455667788990000ull + i;
    a.end = a.start + 0x333;
    a.processId = 0x4141;
    a.threadId = 0x4242 + i;
    a.correlationId = 0x4000 + i;
    a.returnValue = 0;
    struct np_gpu_record *w = next(&a, sizeof(a));
    *w = (struct np_gpu_record){.kind = kind == CUPTI_ACTIVITY_KIND_RUNTIME ? NP_GPU_API_RUNTIME
                                                                            : NP_GPU_API_DRIVER,
                                .correlation_id = a.correlationId,
                                .start_ns = a.start,
                                .end_ns = a.end,
                                .cbid = cbid,
                                .thread_id = a.threadId};
}

static void build(void) {
    put_kernel(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0);
    put_memcpy(0x2100, 1);
    put_memcpy(0, 2);
    put_memset(3);
    put_api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 4);
    put_api(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 5);
    put_kernel(CUPTI_ACTIVITY_KIND_KERNEL, 6);
}

static void compare(int i, const struct np_gpu_record *g, const char *name) {
    const struct np_gpu_record *w = &want[i];
#define SAME(f)                                                                                    \
    do {                                                                                           \
        if ((uint64_t)g->f != (uint64_t)w->f)                                                      \
            fail(#f, i, (uint64_t)g->f, (uint64_t)w->f);                                           \
    } while (0)
    SAME(kind);
    SAME(copy_kind);
    SAME(correlation_id);
    SAME(start_ns);
    SAME(end_ns);
    SAME(device);
    SAME(context);
    SAME(stream);
    SAME(graph_id);
    SAME(graph_node_id);
    SAME(bytes);
    SAME(grid[0]);
    SAME(grid[1]);
    SAME(grid[2]);
    SAME(block[0]);
    SAME(block[1]);
    SAME(block[2]);
    SAME(cbid);
    SAME(thread_id);
#undef SAME
    if (name != want_name[i] || (name && strcmp(name, want_name[i]) != 0))
        fail("name", i, (uint64_t)(uintptr_t)name, (uint64_t)(uintptr_t)want_name[i]);
}

static void decode_at(const struct np_cupti_layouts *l, int i, const void *rec) {
    struct np_gpu_record got;
    const char *name = NULL;
    memset(&got, 0, sizeof(got));
    if (!np_cupti_decode(l, rec, &got, &name)) {
        fprintf(stderr, "record %d: not decoded\n", i);
        failures++;
        return;
    }
    compare(i, &got, name);
}

/* ---- the version and its record sizes ---- */

typedef CUptiResult (*struct_size_fn)(CUpti_ActivityKind, uint32_t, size_t *);
static struct_size_fn real_struct_size;

static uint32_t header_size(void *ctx, uint32_t kind) {
    (void)ctx;
#ifdef HAVE_STRUCT_SIZE
    switch (kind) { /* what the real cuptiActivityGetStructSize of this version says */
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        return sizeof(KERNEL_T);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        return sizeof(MEMCPY_T);
    case CUPTI_ACTIVITY_KIND_MEMSET:
        return sizeof(MEMSET_T);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return sizeof(API_T);
    }
#endif
    (void)kind;
    return 0;
}

static uint32_t cupti_size(void *ctx, uint32_t kind) {
    size_t size = 0;
    (void)ctx;
    if (real_struct_size((CUpti_ActivityKind)kind, 0, &size) != CUPTI_SUCCESS)
        return 0;
    return (uint32_t)size;
}

static void pick(uint32_t version, struct np_cupti_layouts *l) {
    np_cupti_layouts_pick(version, real_struct_size ? cupti_size : header_size, NULL, l);
    if (!l->v || l->support != NP_CUPTI_KNOWN || l->v->api_version != version) {
        fprintf(stderr, "CUPTI API version %u: layouts %u (%s)\n", version, l->support, l->note);
        exit(1);
    }
    printf("layouts cuda=%s api=%u kernel=%s/%u memcpy=%s/%u memset=%s/%u api=%s/%u "
           "confirmed=%u\n",
           l->v->cuda, l->v->api_version, l->v->record[NP_CUPTI_REC_KERNEL].type,
           l->record_size[NP_CUPTI_REC_KERNEL], l->v->record[NP_CUPTI_REC_MEMCPY].type,
           l->record_size[NP_CUPTI_REC_MEMCPY], l->v->record[NP_CUPTI_REC_MEMSET].type,
           l->record_size[NP_CUPTI_REC_MEMSET], l->v->record[NP_CUPTI_REC_API].type,
           l->record_size[NP_CUPTI_REC_API], l->size_confirmed);
}

/* ---- what else the decoder must do ---- */

/* A field that lies beyond the record's size is absent: cut the kernel record before its name. */
static void check_cut(const struct np_cupti_layouts *l) {
    struct np_cupti_layouts cut = *l;
    uint32_t end = (uint32_t)offsetof(KERNEL_T, name);
    cut.record_size[NP_CUPTI_REC_KERNEL] = end;
    struct np_gpu_record got;
    const char *name = NULL;
    memset(&got, 0, sizeof(got));
    np_cupti_decode(&cut, buffer + offsets[0], &got, &name);
    if (name)
        fail("name beyond the record's size", 0, (uint64_t)(uintptr_t)name, 0);
    uint64_t corr = offsetof(KERNEL_T, correlationId) + 4 <= end ? want[0].correlation_id : 0;
    uint64_t graph = offsetof(KERNEL_T, graphId) + 4 <= end ? want[0].graph_id : 0;
    if (got.correlation_id != corr)
        fail("correlation_id of a cut record", 0, got.correlation_id, corr);
    if (got.graph_id != graph)
        fail("graph_id of a cut record", 0, got.graph_id, graph);
}

/* A kind the decoder does not read is not decoded. */
static void check_other_kind(const struct np_cupti_layouts *l) {
    CUpti_ActivityAPI other;
    memset(&other, 0, sizeof(other));
    other.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
    struct np_gpu_record got;
    const char *name;
    if (np_cupti_decode(l, &other, &got, &name)) {
        fprintf(stderr, "a CONTEXT record was decoded\n");
        failures++;
    }
}

/* The launch APIs' callback ids as the headers define them. */
static void check_launch_cbids(const struct np_cupti_layouts *l) {
    (void)l; /* an empty LAUNCH_CBIDS (the abi build) uses none */
#define CHECK_CBID(runtime, name, cbid)                                                            \
    do {                                                                                           \
        uint32_t got = np_cupti_launch_cbid(l->v, runtime, name);                                  \
        if (got != (uint32_t)(cbid)) {                                                             \
            fprintf(stderr, "launch cbid of %s: %u, want %u\n", name, got, (uint32_t)(cbid));      \
            failures++;                                                                            \
        }                                                                                          \
        printf("launch %s %u\n", name, got);                                                       \
    } while (0);
    LAUNCH_CBIDS(CHECK_CBID)
#undef CHECK_CBID
}

static void check_all(const struct np_cupti_layouts *l) {
    check_cut(l);
    check_other_kind(l);
    check_launch_cbids(l);
}

/* ---- modes ---- */

static int walk(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    CUptiResult (*get_version)(uint32_t *);
    CUptiResult (*get_next)(uint8_t *, size_t, CUpti_Activity **);
    *(void **)&get_version = dlsym(h, "cuptiGetVersion");
    *(void **)&get_next = dlsym(h, "cuptiActivityGetNextRecord");
    *(void **)&real_struct_size = dlsym(h, "cuptiActivityGetStructSize");
    uint32_t version = 0;
    CUptiResult res = get_version(&version);
    if (res != CUPTI_SUCCESS) {
        printf("refused cuptiGetVersion %d\n", (int)res);
        return 3;
    }
    struct np_cupti_layouts l;
    pick(version, &l);
    CUpti_Activity *rec = NULL;
    int i = 0;
    while ((res = get_next(buffer, used, &rec)) == CUPTI_SUCCESS && i < count) {
        size_t at = (size_t)((uint8_t *)rec - buffer);
        if (at != offsets[i])
            fail("offset in the buffer (the record sizes differ)", i, at, offsets[i]);
        decode_at(&l, i++, rec);
    }
    if (i == 0 && res != CUPTI_ERROR_MAX_LIMIT_REACHED) {
        printf("refused cuptiActivityGetNextRecord %d\n", (int)res);
        return 3;
    }
    if (i != count || res != CUPTI_ERROR_MAX_LIMIT_REACHED) {
        fprintf(stderr, "the walk gave %d of %d records, then %d\n", i, count, (int)res);
        failures++;
    }
    check_all(&l);
    return failures ? 1 : (printf("ok %d walked\n", i), 0);
}

static int feed(void) {
    struct np_cupti_layouts l;
    pick(CUPTI_API_VERSION, &l);
    for (int i = 0; i < count; i++)
        decode_at(&l, i, buffer + offsets[i]);
    check_all(&l);
    return failures ? 1 : (printf("ok %d fed\n", count), 0);
}

/* What the library uses of the callback side, compiled with this version's headers. */
static int abi(void) {
    printf("MULTIPLE_SUBSCRIBERS %d\n", (int)CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    printf("CONTEXT_DESTROY_STARTING %d\n", (int)CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    printf("DOMAINS %d %d %d\n", (int)CUPTI_CB_DOMAIN_DRIVER_API, (int)CUPTI_CB_DOMAIN_RUNTIME_API,
           (int)CUPTI_CB_DOMAIN_RESOURCE);
    printf("API_ENTER %d\n", (int)CUPTI_API_ENTER);
    printf("THREAD_ID_TYPE_SYSTEM %d\n", (int)CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    printf("FLUSH_FORCED %d\n", (int)CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    printf("CallbackData %zu %zu %zu %zu %zu\n", offsetof(CUpti_CallbackData, callbackSite),
           offsetof(CUpti_CallbackData, functionParams), offsetof(CUpti_CallbackData, symbolName),
           offsetof(CUpti_CallbackData, correlationId), sizeof(CUpti_CallbackData));
#if CUPTI_API_VERSION >= 130000 /* cuptiSubscribe_v2's, which 12.x has not */
    printf("SubscriberParams %zu %zu %zu %zu\n", offsetof(CUpti_SubscriberParams, structSize),
           offsetof(CUpti_SubscriberParams, subscriberName),
           offsetof(CUpti_SubscriberParams, oldSubscriberName),
           offsetof(CUpti_SubscriberParams, oldSubscriberSize));
#endif
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "abi") == 0)
        return abi();
    build();
    if (argc >= 3 && strcmp(argv[1], "walk") == 0)
        return walk(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "feed") == 0)
        return feed();
    fprintf(stderr, "usage: cupti_layout_check walk LIBCUPTI | feed | abi\n");
    return 2;
}
