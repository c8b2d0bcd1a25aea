/* records.h - one CUPTI activity record into ncclprobe's own record
 * (struct np_gpu_record, gpu_wire.h), read field by field at the offsets of
 * the CUPTI version in use (layouts.h), never through a CUPTI struct: a
 * field the record does not have, or one beyond its size, is left 0. No
 * cupti.h here either (records.c), so that the decoder can be compiled
 * against any CUPTI's headers and checked on that version's records. */
#ifndef NP_CUPTI_RECORDS_H
#define NP_CUPTI_RECORDS_H

#include <stdbool.h>

#include "cupti/layouts.h"
#include "ncclprobe/gpu_wire.h"

/* Fills out's fixed part from the CUPTI record at `record` (every field but
 * size, name_len and name; kind from the record's kind) and *name with the
 * kernel's name (CUPTI's string; NULL for other records or none). False for
 * a kind that is not read (out untouched). */
bool np_cupti_decode(const struct np_cupti_layouts *l, const void *record,
                     struct np_gpu_record *out, const char **name);

#endif
