/* records.c - decoding one CUPTI activity record by the layouts of the
 * CUPTI version in use (see records.h). */
#include "cupti/records.h"

#include <string.h>

/* Field f of the record, 0 when it has none (or not within its size). */
static uint64_t get(const struct np_cupti_layouts *l, enum np_cupti_record rec, const uint8_t *p,
                    enum np_cupti_field f) {
    uint64_t v = 0;
    return np_cupti_field(l, rec, p, f, &v) ? v : 0;
}

/* What every GPU record has: its times and where it ran. */
static void place(const struct np_cupti_layouts *l, enum np_cupti_record rec, const uint8_t *p,
                  struct np_gpu_record *out) {
    out->correlation_id = (uint32_t)get(l, rec, p, NP_CF_CORRELATION_ID);
    out->start_ns = get(l, rec, p, NP_CF_START);
    out->end_ns = get(l, rec, p, NP_CF_END);
    out->device = (uint32_t)get(l, rec, p, NP_CF_DEVICE_ID);
    out->context = (uint32_t)get(l, rec, p, NP_CF_CONTEXT_ID);
    out->stream = (uint32_t)get(l, rec, p, NP_CF_STREAM_ID);
    out->graph_id = (uint32_t)get(l, rec, p, NP_CF_GRAPH_ID);
    out->graph_node_id = get(l, rec, p, NP_CF_GRAPH_NODE_ID);
}

static void kernel(const struct np_cupti_layouts *l, const uint8_t *p, struct np_gpu_record *out,
                   const char **name) {
    enum np_cupti_record k = NP_CUPTI_REC_KERNEL;
    out->kind = NP_GPU_KERNEL;
    place(l, k, p, out);
    static const enum np_cupti_field grid[3] = {NP_CF_GRID_X, NP_CF_GRID_Y, NP_CF_GRID_Z};
    static const enum np_cupti_field block[3] = {NP_CF_BLOCK_X, NP_CF_BLOCK_Y, NP_CF_BLOCK_Z};
    for (int i = 0; i < 3; i++) {
        out->grid[i] = (uint32_t)get(l, k, p, grid[i]);
        out->block[i] = (uint32_t)get(l, k, p, block[i]);
    }
    *name = (const char *)(uintptr_t)get(l, k, p, NP_CF_NAME);
}

static void copy(const struct np_cupti_layouts *l, const uint8_t *p, struct np_gpu_record *out) {
    enum np_cupti_record m = NP_CUPTI_REC_MEMCPY;
    out->kind = NP_GPU_MEMCPY;
    place(l, m, p, out);
    out->copy_kind = (uint8_t)get(l, m, p, NP_CF_COPY_KIND);
    out->bytes = get(l, m, p, NP_CF_BYTES);
    /* the driver API's id; a runtime call's own id when only that is set */
    if (!out->correlation_id)
        out->correlation_id = (uint32_t)get(l, m, p, NP_CF_RUNTIME_CORRELATION_ID);
}

static void set(const struct np_cupti_layouts *l, const uint8_t *p, struct np_gpu_record *out) {
    out->kind = NP_GPU_MEMSET;
    place(l, NP_CUPTI_REC_MEMSET, p, out);
    out->bytes = get(l, NP_CUPTI_REC_MEMSET, p, NP_CF_BYTES);
}

static void api(const struct np_cupti_layouts *l, const uint8_t *p, bool runtime,
                struct np_gpu_record *out) {
    enum np_cupti_record a = NP_CUPTI_REC_API;
    out->kind = runtime ? NP_GPU_API_RUNTIME : NP_GPU_API_DRIVER;
    out->correlation_id = (uint32_t)get(l, a, p, NP_CF_CORRELATION_ID);
    out->start_ns = get(l, a, p, NP_CF_START);
    out->end_ns = get(l, a, p, NP_CF_END);
    out->cbid = (uint32_t)get(l, a, p, NP_CF_CBID);
    out->thread_id = (uint32_t)get(l, a, p, NP_CF_THREAD_ID);
}

bool np_cupti_decode(const struct np_cupti_layouts *l, const void *record,
                     struct np_gpu_record *out, const char **name) {
    const uint8_t *p = record;
    uint32_t kind;
    bool runtime = false;
    *name = NULL;
    if (!l->v)
        return false;
    memcpy(&kind, p, sizeof(kind)); /* CUpti_Activity.kind: the first field of every record */
    switch (np_cupti_record_of(l->v, kind, &runtime)) {
    case NP_CUPTI_REC_KERNEL:
        kernel(l, p, out, name);
        return true;
    case NP_CUPTI_REC_MEMCPY:
        copy(l, p, out);
        return true;
    case NP_CUPTI_REC_MEMSET:
        set(l, p, out);
        return true;
    case NP_CUPTI_REC_API:
        api(l, p, runtime, out);
        return true;
    default:
        return false;
    }
}
