/* activity.h - CUPTI activity buffers of libncclprobe_cupti.so: handed to
 * CUPTI, and their records sent on when CUPTI returns them (activity.c). */
#ifndef NP_CUPTI_ACTIVITY_H
#define NP_CUPTI_ACTIVITY_H

#include <stdbool.h>

#include "cupti/cupti_api.h"
#include "cupti/layouts.h"

/* Records are read with layouts l (kept, not copied), before CUPTI can
 * hand back a buffer. */
void np_activity_init(const struct np_cupti_api *api, const struct np_cupti_layouts *l);
void CUPTIAPI np_activity_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records);
void CUPTIAPI np_activity_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                           size_t size, size_t valid_size);

#endif
