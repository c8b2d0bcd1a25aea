/* layouts.h - where the fields libncclprobe_cupti.so reads lie in CUPTI's
 * activity records, per CUPTI version, and which version's layouts the
 * library reads in this process (layouts.c). Every CUDA release may add a
 * struct version (CUpti_ActivityKernel9 in 12.x, Kernel10 in 13.0, Kernel11
 * in 13.2, Kernel13 in 13.5), and a CUPTI writes the newest one its headers
 * define: the library never compiles a CUPTI struct in, it reads fields by
 * offset from the table of the CUPTI it loaded (record_layouts.h, generated
 * from each version's headers by tools/gen-cupti-layouts.py). Nothing here
 * includes cupti.h, so the decoder can be checked against any version's
 * headers (tests/test_runtimes_cupti.py). */
#ifndef NP_CUPTI_LAYOUTS_H
#define NP_CUPTI_LAYOUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ncclprobe/gpu_wire.h"

/* The fields read (not every record has every one). */
enum np_cupti_field {
    NP_CF_CORRELATION_ID,
    NP_CF_START,
    NP_CF_END,
    NP_CF_DEVICE_ID,
    NP_CF_CONTEXT_ID,
    NP_CF_STREAM_ID,
    NP_CF_GRAPH_ID,
    NP_CF_GRAPH_NODE_ID,
    NP_CF_GRID_X,
    NP_CF_GRID_Y,
    NP_CF_GRID_Z,
    NP_CF_BLOCK_X,
    NP_CF_BLOCK_Y,
    NP_CF_BLOCK_Z,
    NP_CF_NAME,
    NP_CF_COPY_KIND,
    NP_CF_BYTES,
    NP_CF_RUNTIME_CORRELATION_ID,
    NP_CF_CBID,
    NP_CF_THREAD_ID,
    NP_CF_COUNT
};

struct np_cupti_field_at {
    uint16_t offset;
    uint16_t size; /* bytes; 0: the struct has no such field */
};

struct np_cupti_record_layout {
    const char *type; /* "CUpti_ActivityKernel9" */
    uint32_t size;    /* sizeof */
    struct np_cupti_field_at at[NP_CF_COUNT];
};

/* CUpti_ActivityKind values of the records read. */
struct np_cupti_kinds {
    uint32_t memcpy, memset, kernel, driver, runtime, concurrent_kernel;
};

#define NP_CUPTI_MAX_LAUNCHES 16

/* One CUPTI version, as its headers say. */
struct np_cupti_version_layouts {
    uint32_t api_version; /* CUPTI_API_VERSION */
    const char *cuda;     /* "12.4" */
    struct np_cupti_kinds kind;
    struct np_cupti_record_layout record[NP_CUPTI_RECORDS];
    uint32_t runtime_cbid_size, driver_cbid_size; /* CUPTI_*_TRACE_CBID_SIZE */
    /* the launch APIs' callback ids, in record_layouts.h's order; 0: none */
    uint32_t runtime_cbid[NP_CUPTI_MAX_LAUNCHES], driver_cbid[NP_CUPTI_MAX_LAUNCHES];
};

/* What the library reads in this process. */
struct np_cupti_layouts {
    const struct np_cupti_version_layouts *v; /* NULL: unsupported */
    uint32_t api_version;                     /* the CUPTI's own */
    uint32_t support;                         /* NP_CUPTI_KNOWN, _ASSUMED or _UNSUPPORTED */
    uint32_t record_size[NP_CUPTI_RECORDS];   /* a field beyond its record's size is absent */
    uint32_t size_confirmed;                  /* bit per record: the CUPTI said its size */
    char note[256];                           /* why assumed, or unsupported; "" when known */
};

/* The size of a CUPTI record of activity kind `kind` as the loaded CUPTI
 * writes it (cuptiActivityGetStructSize), 0 when it cannot say. */
typedef uint32_t (*np_cupti_struct_size_fn)(void *ctx, uint32_t kind);

/* Picks the layouts for CUPTI API version api_version (size_of may be NULL:
 * a CUPTI without cuptiActivityGetStructSize):
 *   - a version of the table: its layouts (known);
 *   - older than the table's oldest: unsupported;
 *   - otherwise an unknown version, between two known ones or newer than
 *     all: the layouts of the newest known version below it (assumed),
 *     only when every field read is then surely inside the record - the
 *     CUPTI says each record is at least as large as that version's, or,
 *     when it cannot say, the version lies between two known ones that
 *     agree on every field read (the smaller record size counts) -; else
 *     unsupported. NVIDIA adds fields at the end of a new struct version
 *     (every field read kept its offset from 12.4 to 13.5), so a newer
 *     CUPTI's records are read as the newest known ones, with a warning,
 *     rather than not at all.
 * A known version whose CUPTI states other record sizes than its headers is
 * read only up to the smaller size, and said. */
void np_cupti_layouts_pick(uint32_t api_version, np_cupti_struct_size_fn size_of, void *ctx,
                           struct np_cupti_layouts *out);

/* The record (NP_CUPTI_REC_*) activity kind `kind` is read as, or
 * NP_CUPTI_RECORDS for a kind not read; *runtime tells RUNTIME from DRIVER. */
enum np_cupti_record np_cupti_record_of(const struct np_cupti_version_layouts *v, uint32_t kind,
                                        bool *runtime);

/* The callback id of launch API `name` (as CUPTI names it:
 * "cudaLaunchKernel_v7000", "cuLaunchKernel") in version v; 0 when v has none. */
uint32_t np_cupti_launch_cbid(const struct np_cupti_version_layouts *v, bool runtime,
                              const char *name);

/* The table, oldest version first. */
size_t np_cupti_known_count(void);
const struct np_cupti_version_layouts *np_cupti_known(size_t i);

/* Reads field f of a record (of layout rec, `rec_size` bytes as read) into
 * *value: false when the record has no such field or it lies beyond the
 * record's size. Fields of 1, 2, 4 or 8 bytes. */
bool np_cupti_field(const struct np_cupti_layouts *l, enum np_cupti_record rec,
                    const uint8_t *record, enum np_cupti_field f, uint64_t *value);

#endif
