/* summary.c - summary.json of a session (see session.h): the session
 * gathers what BPF counted, what each target is, and what the stages saw,
 * and hands it to writers/summary.c. */
#include <bpf/libbpf.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>

#include "correlate/gpu.h"
#include "ingest/gpu_socket.h"
#include "ingest/workers.h"
#include "ncclprobe.skel.h"
#include "session/session.h"
#include "session/target.h"
#include "writers/summary.h"

static const char *unwind_mode_name(enum unwind_mode m) {
    return m == UNWIND_FP ? "fp" : m == UNWIND_DWARF ? "dwarf" : "auto";
}

int np_session_write_summary(struct np_session *s, const char *path) {
    size_t nprobes = s->attacher.nsites + 1;
    uint64_t *hits = calloc(nprobes, sizeof(*hits));
    uint64_t *drops = calloc(nprobes, sizeof(*drops));
    const struct np_process **procs = calloc(s->ntargets + 1, sizeof(*procs));
    cJSON *targets = cJSON_CreateArray();
    uint64_t counters[NP_CNT_MAX] = {0};
    uint64_t thread_stacks[NP_WORKERS_MAX];
    unsigned nthreads = np_ingest_workers(&s->ingest);
    for (unsigned i = 0; i < nthreads; i++)
        thread_stacks[i] = np_ingest_worker_jobs(&s->ingest, i);
    int err = (!hits || !drops || !procs || !targets) ? -ENOMEM : 0;

    for (size_t id = 1; !err && id < nprobes; id++) {
        hits[id] = np_session_probe_counter(s->skel->maps.probe_hits, (uint32_t)id);
        drops[id] = np_session_probe_counter(s->skel->maps.probe_drops, (uint32_t)id);
    }
    for (__u32 c = 0; !err && c < NP_CNT_MAX; c++)
        counters[c] = np_session_counter(s, c);
    for (size_t i = 0; !err && i < s->ntargets; i++) {
        procs[i] = &s->targets[i]->proc;
        cJSON_AddItemToArray(targets, np_target_json(s->targets[i]));
    }
    np_ingest_settle(&s->ingest);
    if (!err) {
        struct np_summary sum = {
            .stop_reason = s->stop_reason ? s->stop_reason : "error",
            .start_realtime_ns = s->start_realtime_ns,
            .duration_s = (double)(np_monotonic_ns() - s->start_ns) / 1e9,
            .targets = targets,
            .processes = procs,
            .nprocesses = s->ntargets,
            .attacher = &s->attacher,
            .probe_hits = hits,
            .probe_drops = drops,
            .nprobes = nprobes,
            .counters = counters,
            .ingest = &s->ingest.stats,
            .backlog = s->ingest.queue ? &s->ingest.backlog : NULL,
            .ring_bytes = bpf_map__max_entries(s->skel->maps.events),
            .wakeup_bytes = s->wakeup_bytes,
            .reader_threads = nthreads,
            .thread_stacks = thread_stacks,
            .unwind = s->opt.unwind == UNWIND_FP ? NULL : &s->ingest.unwind,
            .unwind_mode = unwind_mode_name(s->opt.unwind),
            .stack_bytes = s->opt.unwind == UNWIND_FP ? 0 : (uint32_t)s->opt.stack_bytes,
            .out = s->out,
            .gpu_server = s->gpu_server ? np_gpu_server_stats(s->gpu_server) : NULL,
            .gpu_join = s->gpu_join ? np_gpu_join_counters(s->gpu_join) : NULL,
            .gpu_socket = s->gpu_server ? s->opt.cupti_socket : NULL,
            .nccl_comms = &s->nccl_comms,
            .nccl_flows = np_session_flows_json(s),
        };
        targets = NULL; /* the summary's now */
        err = np_summary_write(path, &sum);
    }
    cJSON_Delete(targets);
    free(procs);
    free(hits);
    free(drops);
    return err;
}
