/* layouts.c - which CUPTI version's record layouts libncclprobe_cupti.so
 * reads, and reading one field of a record by them (see layouts.h). The
 * table itself is generated (record_layouts.h). */
#include "cupti/layouts.h"

#include <stdio.h>
#include <string.h>

#include "cupti/record_layouts.h"

#define KNOWN (sizeof(np_cupti_known_layouts) / sizeof(np_cupti_known_layouts[0]))

static const char *const record_names[NP_CUPTI_RECORDS] = {"kernel", "memcpy", "memset", "API"};

size_t np_cupti_known_count(void) {
    return KNOWN;
}

const struct np_cupti_version_layouts *np_cupti_known(size_t i) {
    return i < KNOWN ? &np_cupti_known_layouts[i] : NULL;
}

/* One activity kind of each record, to ask the CUPTI its size by. */
static uint32_t kind_of(const struct np_cupti_version_layouts *v, enum np_cupti_record rec) {
    switch (rec) {
    case NP_CUPTI_REC_KERNEL:
        return v->kind.concurrent_kernel;
    case NP_CUPTI_REC_MEMCPY:
        return v->kind.memcpy;
    case NP_CUPTI_REC_MEMSET:
        return v->kind.memset;
    default:
        return v->kind.runtime;
    }
}

enum np_cupti_record np_cupti_record_of(const struct np_cupti_version_layouts *v, uint32_t kind,
                                        bool *runtime) {
    *runtime = kind == v->kind.runtime;
    if (kind == v->kind.kernel || kind == v->kind.concurrent_kernel)
        return NP_CUPTI_REC_KERNEL;
    if (kind == v->kind.memcpy)
        return NP_CUPTI_REC_MEMCPY;
    if (kind == v->kind.memset)
        return NP_CUPTI_REC_MEMSET;
    if (kind == v->kind.runtime || kind == v->kind.driver)
        return NP_CUPTI_REC_API;
    return NP_CUPTI_RECORDS;
}

uint32_t np_cupti_launch_cbid(const struct np_cupti_version_layouts *v, bool runtime,
                              const char *name) {
    const char *const *names =
        runtime ? np_cupti_runtime_launch_names : np_cupti_driver_launch_names;
    size_t n = runtime ? NP_CUPTI_RUNTIME_LAUNCHES : NP_CUPTI_DRIVER_LAUNCHES;
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return runtime ? v->runtime_cbid[i] : v->driver_cbid[i];
    return 0;
}

/* Whether two versions put every field read at the same place. */
static bool same_fields(const struct np_cupti_version_layouts *a,
                        const struct np_cupti_version_layouts *b) {
    for (int r = 0; r < NP_CUPTI_RECORDS; r++)
        if (memcmp(a->record[r].at, b->record[r].at, sizeof(a->record[r].at)) != 0)
            return false;
    return memcmp(&a->kind, &b->kind, sizeof(a->kind)) == 0;
}

/* Each record's size as the CUPTI states it (0: it cannot say), into sizes. */
static void stated_sizes(const struct np_cupti_version_layouts *v, np_cupti_struct_size_fn size_of,
                         void *ctx, uint32_t sizes[NP_CUPTI_RECORDS]) {
    for (int r = 0; r < NP_CUPTI_RECORDS; r++)
        sizes[r] = size_of ? size_of(ctx, kind_of(v, (enum np_cupti_record)r)) : 0;
}

static bool all_stated(const uint32_t sizes[NP_CUPTI_RECORDS]) {
    for (int r = 0; r < NP_CUPTI_RECORDS; r++)
        if (!sizes[r])
            return false;
    return true;
}

static void unsupported(struct np_cupti_layouts *out, const char *why) {
    out->v = NULL;
    out->support = NP_CUPTI_UNSUPPORTED;
    memset(out->record_size, 0, sizeof(out->record_size));
    out->size_confirmed = 0;
    snprintf(out->note, sizeof(out->note), "%s", why);
}

/* A version of the table: its sizes, or smaller ones the CUPTI states. */
static void use_known(struct np_cupti_layouts *out, const struct np_cupti_version_layouts *v,
                      const uint32_t stated[NP_CUPTI_RECORDS]) {
    out->v = v;
    out->support = NP_CUPTI_KNOWN;
    for (int r = 0; r < NP_CUPTI_RECORDS; r++) {
        out->record_size[r] = v->record[r].size;
        if (!stated[r])
            continue;
        out->size_confirmed |= 1u << r;
        if (stated[r] == v->record[r].size)
            continue;
        if (stated[r] < out->record_size[r])
            out->record_size[r] = stated[r];
        out->support = NP_CUPTI_ASSUMED;
        snprintf(out->note, sizeof(out->note),
                 "CUPTI %s says its %s records are %u bytes, its headers %u (%s): read up to %u",
                 v->cuda, record_names[r], stated[r], v->record[r].size, v->record[r].type,
                 out->record_size[r]);
    }
}

/* An unknown version read with base's layouts, every record checked to be
 * large enough by the sizes the CUPTI states; false when one is not. */
static bool assume_stated(struct np_cupti_layouts *out, const struct np_cupti_version_layouts *base,
                          const uint32_t stated[NP_CUPTI_RECORDS]) {
    for (int r = 0; r < NP_CUPTI_RECORDS; r++) {
        if (stated[r] < base->record[r].size) {
            char why[256];
            snprintf(why, sizeof(why),
                     "CUPTI API version %u is not known, and its %s records (%u bytes) are "
                     "smaller than CUDA %s's %s (%u): not read",
                     out->api_version, record_names[r], stated[r], base->cuda, base->record[r].type,
                     base->record[r].size);
            unsupported(out, why);
            return false;
        }
        out->record_size[r] = stated[r];
    }
    out->size_confirmed = (1u << NP_CUPTI_RECORDS) - 1;
    return true;
}

/* An unknown version between base and next, which agree on every field:
 * read up to the smaller of their sizes. */
static void assume_between(struct np_cupti_layouts *out,
                           const struct np_cupti_version_layouts *base,
                           const struct np_cupti_version_layouts *next) {
    for (int r = 0; r < NP_CUPTI_RECORDS; r++) {
        uint32_t a = base->record[r].size, b = next->record[r].size;
        out->record_size[r] = a < b ? a : b;
    }
}

/* The newest known version below api_version; NULL when none is. */
static const struct np_cupti_version_layouts *below(uint32_t api_version, size_t *index) {
    const struct np_cupti_version_layouts *base = NULL;
    for (size_t i = 0; i < KNOWN && np_cupti_known_layouts[i].api_version < api_version; i++) {
        base = &np_cupti_known_layouts[i];
        *index = i;
    }
    return base;
}

static void pick_unknown(uint32_t api_version, np_cupti_struct_size_fn size_of, void *ctx,
                         struct np_cupti_layouts *out) {
    char why[256];
    size_t i = 0;
    const struct np_cupti_version_layouts *base = below(api_version, &i);
    const struct np_cupti_version_layouts *next =
        i + 1 < KNOWN ? &np_cupti_known_layouts[i + 1] : NULL;
    const struct np_cupti_version_layouts *oldest = &np_cupti_known_layouts[0];
    if (!base) {
        snprintf(why, sizeof(why),
                 "CUPTI API version %u is older than CUDA %s's (%u), the oldest whose record "
                 "layouts are known",
                 api_version, oldest->cuda, oldest->api_version);
        unsupported(out, why);
        return;
    }
    uint32_t stated[NP_CUPTI_RECORDS];
    stated_sizes(base, size_of, ctx, stated);
    const char *how;
    if (all_stated(stated)) {
        if (!assume_stated(out, base, stated))
            return;
        how = "its record sizes checked";
    } else if (next && same_fields(base, next)) {
        assume_between(out, base, next);
        how = "which agrees on every field read with the next known one";
    } else {
        const struct np_cupti_version_layouts *newest = &np_cupti_known_layouts[KNOWN - 1];
        snprintf(why, sizeof(why),
                 "CUPTI API version %u is not known (newest known: CUDA %s, %u), and it cannot "
                 "say its record sizes (no cuptiActivityGetStructSize)",
                 api_version, newest->cuda, newest->api_version);
        unsupported(out, why);
        return;
    }
    out->v = base;
    out->support = NP_CUPTI_ASSUMED;
    snprintf(out->note, sizeof(out->note),
             "CUPTI API version %u %s: layouts assumed from CUDA %s (%u), %s", api_version,
             next ? "not known" : "newer than known", base->cuda, base->api_version, how);
}

void np_cupti_layouts_pick(uint32_t api_version, np_cupti_struct_size_fn size_of, void *ctx,
                           struct np_cupti_layouts *out) {
    memset(out, 0, sizeof(*out));
    out->api_version = api_version;
    for (size_t i = 0; i < KNOWN; i++) {
        const struct np_cupti_version_layouts *v = &np_cupti_known_layouts[i];
        if (v->api_version == api_version) {
            uint32_t stated[NP_CUPTI_RECORDS];
            stated_sizes(v, size_of, ctx, stated);
            use_known(out, v, stated);
            return;
        }
    }
    pick_unknown(api_version, size_of, ctx, out);
}

bool np_cupti_field(const struct np_cupti_layouts *l, enum np_cupti_record rec,
                    const uint8_t *record, enum np_cupti_field f, uint64_t *value) {
    const struct np_cupti_field_at *at = &l->v->record[rec].at[f];
    if (!at->size || (uint32_t)at->offset + at->size > l->record_size[rec])
        return false;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    switch (at->size) {
    case 1:
        memcpy(&u8, record + at->offset, 1);
        *value = u8;
        return true;
    case 2:
        memcpy(&u16, record + at->offset, 2);
        *value = u16;
        return true;
    case 4:
        memcpy(&u32, record + at->offset, 4);
        *value = u32;
        return true;
    case 8:
        memcpy(value, record + at->offset, 8);
        return true;
    default:
        return false;
    }
}
