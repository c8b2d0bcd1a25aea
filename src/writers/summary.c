/* summary.c - summary.json writer (see summary.h), built with cJSON. */
#define _GNU_SOURCE
#include "writers/summary.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "correlate/gpu.h"
#include "ingest/gpu_socket.h"
#include "ingest/ingest.h"
#include "lib/json.h"
#include "ncclprobe/recording.h"
#include "writers/output.h"
#include "writers/summary_nccl.h"

static uint64_t at(const uint64_t *arr, size_t len, size_t i) {
    return arr && i < len ? arr[i] : 0;
}

static const char *role_name(const struct np_probe_site *site) {
    if (site->is_thunk)
        return "thunk";
    switch (site->def->role) {
    case NP_ROLE_API:
        return "api";
    case NP_ROLE_HANDLE_ENTRY:
        return "handle";
    case NP_ROLE_GRAPH_CALL:
        return "graph";
    case NP_ROLE_LOADER:
        return "loader";
    case NP_ROLE_MARKER:
        return "marker";
    case NP_ROLE_PY_CODE_FREE:
        return "python";
    default:
        return "launch";
    }
}

static cJSON *probe_json(const struct np_summary *s, const struct np_probe_site *site) {
    const struct np_process *t = NULL;
    for (size_t i = 0; i < s->nprocesses; i++)
        if (s->processes[i]->pid == site->pid)
            t = s->processes[i];
    cJSON *p = cJSON_CreateObject();
    np_json_add_u64(p, "id", site->id);
    np_json_add_u64(p, "pid", (uint64_t)site->pid);
    np_json_add_text(p, "symbol", site->def->symbol);
    np_json_add_text(p, "api", site->def->api);
    np_json_add_text(p, "library",
                     t && site->lib_index < t->nlibs ? t->libs[site->lib_index].path : "");
    char off[32];
    snprintf(off, sizeof(off), "0x%" PRIx64, site->offset);
    np_json_add_text(p, "offset", off);
    np_json_add_text(p, "role", role_name(site));
    cJSON_AddBoolToObject(p, "attached", site->err == 0);
    if (site->err)
        np_json_add_text(p, "error", strerror(-site->err));
    np_json_add_u64(p, "hits", at(s->probe_hits, s->nprobes, site->id));
    np_json_add_u64(p, "dropped",
                    at(s->probe_drops, s->nprobes, site->id) +
                        (s->backlog ? at(s->backlog->dropped_by_probe,
                                         s->backlog->dropped_by_probe_len, site->id)
                                    : 0));
    np_json_add_u64(p, "launches", at(s->ingest->per_probe, s->ingest->per_probe_len, site->id));
    return p;
}

static cJSON *totals_json(const struct np_summary *s) {
    const uint64_t *c = s->counters;
    const struct np_output_totals *ot = np_output_totals(s->out);
    uint64_t hits = 0;
    for (size_t i = 0; i < s->attacher->nsites; i++) {
        const struct np_probe_site *site = &s->attacher->sites[i];
        if (!site->is_thunk &&
            (site->def->role == NP_ROLE_LAUNCH || site->def->role == NP_ROLE_API))
            hits += at(s->probe_hits, s->nprobes, site->id);
    }
    cJSON *o = cJSON_CreateObject();
    np_json_add_u64(o, "probe_hits", hits);
    np_json_add_u64(o, "events_captured", s->ingest->launch_events);
    /* lost in the ring (BPF) or, past its memory budget, in the reader's backlog */
    np_json_add_u64(o, "events_dropped",
                    c[NP_CNT_LAUNCH_DROPPED] + (s->backlog ? s->backlog->dropped_launches : 0));
    np_json_add_u64(o, "events_sent_by_bpf", c[NP_CNT_LAUNCH_SENT]);
    np_json_add_u64(o, "launches", ot->launches);
    np_json_add_u64(o, "nested_launches", ot->nested);
    np_json_add_u64(o, "nccl_ops", ot->nccl_ops);
    np_json_add_u64(o, "handle_events", s->ingest->handle_events);
    np_json_add_u64(o, "handle_events_dropped", c[NP_CNT_HANDLE_DROPPED]);
    np_json_add_u64(o, "library_load_events", s->ingest->map_events);
    np_json_add_u64(o, "library_load_events_dropped", c[NP_CNT_MAP_DROPPED]);
    np_json_add_u64(o, "thunk_hits", c[NP_CNT_THUNK_HITS]);
    np_json_add_u64(o, "python_walks", c[NP_CNT_PY_WALKS]);
    np_json_add_u64(o, "python_threads_without_state", c[NP_CNT_PY_NO_THREAD]);
    np_json_add_u64(o, "python_read_errors", c[NP_CNT_PY_ERRORS]);
    np_json_add_u64(o, "python_truncated", c[NP_CNT_PY_TRUNCATED]);
    np_json_add_u64(o, "python_frames_read", c[NP_CNT_PY_FRAMES]);
    np_json_add_u64(o, "python_frames_from_bulk_reads", c[NP_CNT_PY_FRAMES_BULK]);
    np_json_add_u64(o, "python_code_objects_freed", c[NP_CNT_PY_CODE_FREED]);
    np_json_add_u64(o, "python_code_events_dropped", c[NP_CNT_PY_CODE_DROPPED]);
    np_json_add_u64(o, "cupti_markers", s->ingest->marker_events);
    np_json_add_u64(o, "cupti_markers_dropped", c[NP_CNT_MARKER_DROPPED]);
    /* the agent's fast path: launches taken at the CUPTI marker (docs/gpu.md) */
    np_json_add_u64(o, "launches_at_marker", s->ingest->fast_launches);
    np_json_add_u64(o, "launches_at_marker_sent", c[NP_CNT_FAST_LAUNCHES]);
    np_json_add_u64(o, "markers_of_int3_launches", s->ingest->fast_doubles);
    np_json_add_u64(o, "foreign_hits", c[NP_CNT_FOREIGN_HITS]);
    np_json_add_u64(o, "malformed_records", s->ingest->malformed);
    np_json_add_u64(o, "records_from_unknown_source", s->ingest->unknown_source);
    np_json_add_u64(o, "launches_without_symbols", s->ingest->unsymbolized);
    np_json_add_u64(o, "write_errors", ot->write_errors);
    return o;
}

/* The reader's backlog: how far behind it fell, and what did not fit. */
static cJSON *reader_json(const struct np_summary *s) {
    cJSON *o = cJSON_CreateObject();
    const struct np_backlog *b = s->backlog;
    np_json_add_u64(o, "ring_buffer_bytes", s->ring_bytes);
    np_json_add_u64(o, "wakeup_bytes", s->wakeup_bytes);
    np_json_add_u64(o, "backlog_budget_bytes", b ? b->budget : 0);
    np_json_add_u64(o, "backlog_peak_bytes", b ? b->peak_bytes : 0);
    np_json_add_u64(o, "backlog_peak_records", b ? b->peak_records : 0);
    np_json_add_u64(o, "records_queued", b ? b->queued : 0);
    np_json_add_u64(o, "backlog_chunks_mapped", b ? b->mapped : 0);
    np_json_add_u64(o, "launches_dropped", b ? b->dropped_launches : 0);
    np_json_add_u64(o, "other_records_dropped", b ? b->dropped_other : 0);
    np_json_add_u64(o, "threads", s->reader_threads);
    cJSON *stacks = cJSON_AddArrayToObject(o, "thread_stacks");
    for (unsigned i = 0; stacks && i < s->reader_threads; i++)
        cJSON_AddItemToArray(stacks, cJSON_CreateNumber((double)s->thread_stacks[i]));
    return o;
}

/* Whether the per-launch files are whole, or were cut (a full disk). */
static cJSON *files_json(const struct np_summary *s) {
    const struct np_output_totals *ot = np_output_totals(s->out);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, NP_KEY_PER_LAUNCH_COMPLETE, ot->cut_error == 0);
    np_json_add_u64(o, NP_KEY_RECORDS_WRITTEN, ot->records_written);
    np_json_add_u64(o, NP_KEY_RECORDS_CUT, ot->records_cut);
    cJSON_AddStringToObject(o, NP_KEY_CUT_REASON, ot->cut_error ? strerror(-ot->cut_error) : "");
    return o;
}

static cJSON *gpu_json(const struct np_summary *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "listening", s->gpu_server != NULL);
    np_json_add_text(o, "socket", s->gpu_socket ? s->gpu_socket : "");
    if (s->gpu_join) {
        const struct np_gpu_counters *c = s->gpu_join;
        np_json_add_u64(o, "launches_held", c->launches_held);
        np_json_add_u64(o, "launches_matched", c->launches_matched);
        np_json_add_u64(o, "launches_pending", c->launches_pending);
        np_json_add_u64(o, "launches_evicted", c->launches_evicted);
        np_json_add_u64(o, "markers", c->markers);
        np_json_add_u64(o, "markers_unpaired", c->markers_unpaired);
        np_json_add_u64(o, "records", c->records);
        np_json_add_u64(o, "records_matched", c->records_matched);
        np_json_add_u64(o, "records_unmatched", c->records_unmatched);
    }
    if (s->gpu_server) {
        const struct np_gpu_server_stats *st = s->gpu_server;
        np_json_add_u64(o, "clients_accepted", st->clients_accepted);
        np_json_add_u64(o, "clients_rejected", st->clients_rejected);
        cJSON *why = cJSON_AddObjectToObject(o, "rejected");
        for (int r = 0; r < NP_REJECT_MAX; r++)
            np_json_add_u64(why, np_reject_reason_name((enum np_reject_reason)r), st->rejected[r]);
        np_json_add_u64(o, "frames", st->frames);
        np_json_add_u64(o, "records_ignored", st->records_ignored);
    }
    return o;
}

static cJSON *kernels_json(const struct np_output *out) {
    const struct np_map *m = np_output_kernel_counts(out);
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used)
            continue;
        char *clean = np_utf8_clean(m->slots[i].skey);
        if (clean)
            cJSON_AddNumberToObject(o, clean, (double)(uintptr_t)m->slots[i].value);
        free(clean);
    }
    return o;
}

static cJSON *launches_by_api(const struct np_summary *s) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < s->attacher->nsites; i++) {
        const struct np_probe_site *site = &s->attacher->sites[i];
        uint64_t n = at(s->ingest->per_probe, s->ingest->per_probe_len, site->id);
        if (!n)
            continue;
        cJSON *cur = cJSON_GetObjectItemCaseSensitive(o, site->def->api);
        if (cur)
            cJSON_SetNumberValue(cur, cur->valuedouble + (double)n);
        else
            cJSON_AddNumberToObject(o, site->def->api, (double)n);
    }
    return o;
}

/* The upper bound of the histogram bucket holding the q-quantile. */
static uint64_t bucket_quantile(const struct np_unwind_stats *u, double q) {
    uint64_t total = 0, seen = 0;
    for (int i = 0; i < NP_UNWIND_BUCKETS; i++)
        total += u->bytes_needed[i];
    for (int i = 0; i < NP_UNWIND_BUCKETS; i++) {
        seen += u->bytes_needed[i];
        if (total && (double)seen >= q * (double)total)
            return 256ull << i;
    }
    return 0;
}

static cJSON *unwind_json(const struct np_summary *s) {
    cJSON *o = cJSON_CreateObject();
    np_json_add_text(o, "mode", s->unwind_mode);
    np_json_add_u64(o, "stack_bytes", s->stack_bytes);
    if (!s->unwind)
        return o;
    const struct np_unwind_stats *u = s->unwind;
    np_json_add_u64(o, "complete", u->complete);
    np_json_add_u64(o, "truncated", u->truncated);
    np_json_add_u64(o, "unknown", u->unknown);
    np_json_add_u64(o, "fp_fallback_frames", u->fp_fallback_frames);
    cJSON *need = cJSON_AddObjectToObject(o, "stack_bytes_needed");
    np_json_add_u64(need, "p50_at_most", bucket_quantile(u, 0.50));
    np_json_add_u64(need, "p90_at_most", bucket_quantile(u, 0.90));
    np_json_add_u64(need, "p99_at_most", bucket_quantile(u, 0.99));
    np_json_add_u64(need, "max", u->max_bytes_needed);
    /* copies cut to what unwinding needed at that thread and call site */
    np_json_add_u64(o, "stack_copies_hinted", u->hinted);
    np_json_add_u64(o, "stack_copies_short", u->hint_short);
    return o;
}

int np_summary_write(const char *path, const struct np_summary *s) {
    cJSON *root = cJSON_CreateObject();
    if (!root) {
        cJSON_Delete(s->targets);
        cJSON_Delete(s->nccl_flows);
        return -ENOMEM;
    }
    np_json_add_u64(root, "format_version", 1);
    np_json_add_text(root, "stop_reason", s->stop_reason);
    np_json_add_u64(root, NP_KEY_START_TIME_UNIX_NS, s->start_realtime_ns);
    cJSON_AddNumberToObject(root, NP_KEY_DURATION_S, s->duration_s);
    cJSON_AddItemToObject(root, "totals", totals_json(s));
    cJSON_AddItemToObject(root, NP_KEY_FILES, files_json(s));
    cJSON_AddItemToObject(root, "unwind", unwind_json(s));
    cJSON_AddItemToObject(root, "reader", reader_json(s));
    cJSON_AddItemToObject(root, NP_KEY_TARGETS, s->targets ? s->targets : cJSON_CreateArray());
    cJSON *probes = cJSON_AddArrayToObject(root, "probes");
    for (size_t i = 0; i < s->attacher->nsites; i++)
        cJSON_AddItemToArray(probes, probe_json(s, &s->attacher->sites[i]));
    cJSON_AddItemToObject(root, "launches_by_api", launches_by_api(s));
    cJSON_AddItemToObject(root, "launches_by_kernel", kernels_json(s->out));
    cJSON_AddItemToObject(root, "gpu", gpu_json(s));
    cJSON_AddItemToObject(root, "nccl", np_summary_nccl_json(s));
    if (s->nccl_flows)
        cJSON_AddItemToObject(root, "nccl_flows", s->nccl_flows);

    return np_json_write_file(path, root);
}
