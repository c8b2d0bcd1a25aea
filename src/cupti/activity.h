/* activity.h - CUPTI activity buffers of libncclprobe_cupti.so and the
 * launch APIs it follows (see activity.c, inject.c). */
#ifndef NP_CUPTI_ACTIVITY_H
#define NP_CUPTI_ACTIVITY_H

#include <stdbool.h>

#include "cupti/cupti_api.h"

void np_activity_init(const struct np_cupti_api *api);
void CUPTIAPI np_activity_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records);
void CUPTIAPI np_activity_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                           size_t size, size_t valid_size);

/* The launch APIs whose callbacks name correlation ids (runtime or driver
 * domain): NULL-terminated cbid lists, and the name of one of them. */
const CUpti_CallbackId *np_launch_cbids(bool runtime, size_t *count);
const char *np_launch_api_name(bool runtime, CUpti_CallbackId cbid);

#endif
