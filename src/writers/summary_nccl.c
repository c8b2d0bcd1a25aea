/* summary_nccl.c - summary.json's "nccl" section (see summary_nccl.h). */
#define _GNU_SOURCE
#include "writers/summary_nccl.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>

#include "attach/nccl_layout.h"
#include "attach/process.h"
#include "correlate/nccl_comms.h"
#include "ingest/ingest.h"
#include "lib/json.h"

static cJSON *hex_u64(uint64_t v) {
    char text[32];
    snprintf(text, sizeof(text), "0x%" PRIx64, v);
    return cJSON_CreateString(text);
}

static cJSON *nccl_comm_json(const struct np_nccl_comm_stats *c) {
    cJSON *o = cJSON_CreateObject();
    np_json_add_u64(o, "pid", c->pid);
    cJSON_AddItemToObject(o, "comm", hex_u64(c->comm));
    if (c->id.known) {
        cJSON_AddItemToObject(o, "comm_hash", hex_u64(c->id.hash));
        cJSON_AddNumberToObject(o, "rank", c->id.rank);
        cJSON_AddNumberToObject(o, "nranks", c->id.nranks);
        cJSON_AddNumberToObject(o, "cuda_dev", c->id.cuda_dev);
    } else {
        cJSON_AddNullToObject(o, "comm_hash");
        cJSON_AddNullToObject(o, "rank");
        cJSON_AddNullToObject(o, "nranks");
        cJSON_AddNullToObject(o, "cuda_dev");
    }
    uint64_t calls = 0, bytes = 0;
    cJSON *ops = cJSON_CreateObject();
    for (int f = 0; np_nccl_api_slot_name(f); f++) {
        if (!c->api[f].calls)
            continue;
        cJSON *op = cJSON_AddObjectToObject(ops, np_nccl_api_slot_name(f));
        np_json_add_u64(op, "calls", c->api[f].calls);
        np_json_add_u64(op, "bytes", c->api[f].bytes);
        calls += c->api[f].calls;
        bytes += c->api[f].bytes;
    }
    np_json_add_u64(o, "calls", calls);
    np_json_add_u64(o, "bytes", bytes);
    cJSON_AddItemToObject(o, "ops", ops);
    np_json_add_u64(o, "kernel_launches", c->launches);
    np_json_add_u64(o, "planned_ops", c->planned_ops);
    np_json_add_u64(o, "gpu_records", c->gpu_records);
    np_json_add_u64(o, "gpu_ns", c->gpu_ns);
    return o;
}

/* "T.path": {offset, size[, bit_size, bit_shift]} or null, for every field read. */
static cJSON *fields_json(const struct np_nccl_layout *l) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < NPF_COUNT; i++) {
        const struct np_field *f = &l->f[i];
        if (f->offset < 0) {
            cJSON_AddNullToObject(o, np_nccl_field_name(i));
            continue;
        }
        cJSON *x = cJSON_AddObjectToObject(o, np_nccl_field_name(i));
        np_json_add_u64(x, "offset", (uint64_t)f->offset);
        np_json_add_u64(x, "size", f->size);
        if (f->bit_size) {
            np_json_add_u64(x, "bit_size", f->bit_size);
            np_json_add_u64(x, "bit_shift", f->bit_shift);
        }
    }
    return o;
}

/* Per enum: the names by value ("" for a gap), and where they came from. */
static void names_json(cJSON *lib, const struct np_nccl_names *n) {
    cJSON *from = cJSON_AddObjectToObject(lib, "names_from");
    cJSON *names = cJSON_AddObjectToObject(lib, "names");
    for (int e = 0; e < NP_NCCL_ENUMS; e++) {
        const char *type = np_nccl_enum_type((enum np_nccl_enum)e);
        np_json_add_text(from, type, n->from_dwarf[e] ? "dwarf" : "built-in");
        cJSON *arr = cJSON_AddArrayToObject(names, type);
        for (int v = 0; v < n->count[e]; v++)
            cJSON_AddItemToArray(arr, cJSON_CreateString(n->name[e][v]));
    }
}

static cJSON *library_json(pid_t pid, const struct np_library *lib) {
    const struct np_nccl_layout *l = lib->nccl;
    cJSON *o = cJSON_CreateObject();
    np_json_add_u64(o, "pid", (uint64_t)pid);
    np_json_add_text(o, "path", lib->path);
    np_json_add_text(o, "build_id", lib->build_id);
    if (l->version[0])
        np_json_add_text(o, "version", l->version);
    else
        cJSON_AddNullToObject(o, "version");
    cJSON_AddBoolToObject(o, "symtab", l->has_symtab);
    cJSON_AddBoolToObject(o, "debug_info", l->status == 0);
    np_json_add_u64(o, "dwarf_version", (uint64_t)l->dwarf_version);
    np_json_add_text(o, "support", np_nccl_support_name(l->support));
    np_json_add_text(o, "support_note", l->note);
    cJSON_AddBoolToObject(o, "communicator_identity", l->comm_ok);
    cJSON_AddBoolToObject(o, "kernel_plans", l->plan_ok);
    const char *stream = np_nccl_stream_path(l);
    if (stream)
        np_json_add_text(o, "launch_stream", stream);
    else
        cJSON_AddNullToObject(o, "launch_stream");
    names_json(o, &l->names);
    cJSON_AddItemToObject(o, "fields", fields_json(l));
    cJSON *missing = cJSON_AddArrayToObject(o, "missing_fields");
    for (int i = 0; i < NPF_COUNT; i++)
        if (l->missing_field[i])
            cJSON_AddItemToArray(missing, cJSON_CreateString(np_nccl_field_name(i)));
    np_json_add_text(o, "missing", l->missing);
    return o;
}

/* What each libnccl's DWARF gave, per process. */
static cJSON *libraries_json(const struct np_summary *s) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < s->nprocesses; i++) {
        const struct np_process *t = s->processes[i];
        for (size_t j = 0; j < t->nlibs; j++)
            if (t->libs[j].nccl)
                cJSON_AddItemToArray(arr, library_json(t->pid, &t->libs[j]));
    }
    return arr;
}

cJSON *np_summary_nccl_json(const struct np_summary *s) {
    cJSON *o = cJSON_CreateObject();
    np_json_add_u64(o, "plans", s->ingest->nccl_plans);
    np_json_add_u64(o, "plans_dropped", s->counters[NP_CNT_NCCL_PLAN_DROPPED]);
    np_json_add_u64(o, "plans_unclaimed", s->ingest->nccl_plans_unclaimed);
    np_json_add_u64(o, "launches_without_plan", s->ingest->nccl_launches_without_plan);
    np_json_add_u64(o, "internal_api_calls", s->ingest->nccl_internal_calls);
    cJSON_AddItemToObject(o, "libraries", libraries_json(s));
    cJSON *comms = cJSON_AddArrayToObject(o, "communicators");
    for (size_t i = 0; s->nccl_comms && i < s->nccl_comms->count; i++)
        cJSON_AddItemToArray(comms, nccl_comm_json(&s->nccl_comms->items[i]));
    return o;
}
