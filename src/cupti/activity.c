/* activity.c - CUPTI activity buffers of libncclprobe_cupti.so: hands CUPTI
 * host buffers (bounded in number), and turns each completed buffer into
 * wire frames of struct np_gpu_record (gpu_wire.h) for the sink. Only the
 * fields ncclprobe uses are copied, read by the record layouts of the
 * CUPTI version in use (records.c), so CUPTI's struct versions stay here.
 * While no daemon listens (sink.h) a completed buffer's records are only
 * counted (dropped_no_daemon) and the buffer freed: nothing is converted. */
#define _GNU_SOURCE
#include "cupti/activity.h"
#include "cupti/launch_api.h"

#include <stdlib.h>
#include <string.h>

#include "cupti/records.h"
#include "cupti/sink.h"
#include "ncclprobe/gpu_wire.h"

#define BUFFER_SIZE (1u << 20) /* ~4800 kernel records */
#define MAX_BUFFERS 64         /* CUPTI drops (and counts) beyond this */
#define FRAME_SIZE (256u << 10)

static const struct np_cupti_api *cupti;
static const struct np_cupti_layouts *layouts;
static int buffers_out;

void np_activity_init(const struct np_cupti_api *api, const struct np_cupti_layouts *l) {
    cupti = api;
    layouts = l;
}

void CUPTIAPI np_activity_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = NULL;
    *size = 0;
    *max_records = 0; /* fill the buffer */
    if (__atomic_add_fetch(&buffers_out, 1, __ATOMIC_RELAXED) > MAX_BUFFERS) {
        __atomic_sub_fetch(&buffers_out, 1, __ATOMIC_RELAXED);
        np_sink_count(&np_sink_counters()->dropped_no_buffer, 1);
        return;
    }
    void *buf = aligned_alloc(8, BUFFER_SIZE);
    if (!buf) {
        __atomic_sub_fetch(&buffers_out, 1, __ATOMIC_RELAXED);
        np_sink_count(&np_sink_counters()->dropped_no_buffer, 1);
        return;
    }
    *buffer = buf;
    *size = BUFFER_SIZE;
}

/* Room for one more record of name_len in the current frame, a new frame
 * (the full one submitted) if not. NULL when out of memory. */
static struct np_gpu_record *next_record(struct np_frame **frame, uint32_t name_len) {
    uint32_t size = np_gpu_record_size(name_len);
    if (*frame && (*frame)->len + size > (*frame)->cap) {
        np_sink_submit(*frame);
        *frame = NULL;
    }
    if (!*frame)
        *frame = np_frame_new(NP_WIRE_ACTIVITY, FRAME_SIZE);
    if (!*frame)
        return NULL;
    struct np_gpu_record *r = (struct np_gpu_record *)((*frame)->data + (*frame)->len);
    memset(r, 0, size);
    r->size = (uint16_t)size;
    r->name_len = (uint16_t)name_len;
    (*frame)->len += size;
    (*frame)->count++;
    return r;
}

static uint32_t name_length(const char *name) {
    size_t n = name ? strlen(name) : 0;
    return n > NP_WIRE_MAX_NAME ? NP_WIRE_MAX_NAME : (uint32_t)n;
}

/* One CUPTI record into the frame, read by the layouts in use (records.c).
 * A kind we do not read, or an API record whose callback id is not one of
 * the launch APIs of this CUPTI, is counted (records_unknown), never
 * converted under another name. */
static void add_record(struct np_frame **frame, const CUpti_Activity *rec) {
    struct np_gpu_record fixed;
    const char *name = NULL;
    memset(&fixed, 0, sizeof(fixed));
    if (!layouts || !np_cupti_decode(layouts, rec, &fixed, &name)) {
        np_sink_count(&np_sink_counters()->records_unknown, 1);
        return;
    }
    bool api = fixed.kind == NP_GPU_API_RUNTIME || fixed.kind == NP_GPU_API_DRIVER;
    if (api && !(name = np_launch_api_name(fixed.kind == NP_GPU_API_RUNTIME, fixed.cbid))) {
        np_sink_count(&np_sink_counters()->records_unknown, 1);
        return;
    }
    uint32_t n = name_length(name);
    struct np_gpu_record *r = next_record(frame, n);
    if (!r)
        return;
    uint16_t size = r->size;
    memcpy(r, &fixed, sizeof(fixed));
    r->size = size;
    r->name_len = (uint16_t)n;
    if (n) /* name is NULL for copies */
        memcpy(r->name, name, n);
}

void CUPTIAPI np_activity_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                           size_t size, size_t valid_size) {
    (void)ctx, (void)stream_id, (void)size;
    struct np_frame *frame = NULL;
    CUpti_Activity *rec = NULL;
    bool wanted = np_sink_wants_records();
    uint64_t unwanted = 0;
    while (buffer && cupti &&
           cupti->ActivityGetNextRecord(buffer, valid_size, &rec) == CUPTI_SUCCESS) {
        if (wanted)
            add_record(&frame, rec);
        else
            unwanted++;
    }
    if (unwanted)
        np_sink_count(&np_sink_counters()->dropped_no_daemon, unwanted);
    if (frame && frame->count)
        np_sink_submit(frame);
    else
        free(frame);
    size_t dropped = 0;
    if (cupti && cupti->ActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped)
        np_sink_count(&np_sink_counters()->dropped_by_cupti, dropped);
    if (buffer) {
        free(buffer);
        __atomic_sub_fetch(&buffers_out, 1, __ATOMIC_RELAXED);
    }
}
