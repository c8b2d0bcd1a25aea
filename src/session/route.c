/* route.c - what happens to a record once ingest has decoded it (see
 * session.h): a launch gets its kernel's name and, for NCCL, its [NCCL]Op
 * frame and communicator totals (correlate/launch.c); then it is written,
 * or - when its process's CUPTI library sends GPU records - held in the
 * GPU join until they come. Handle records feed the kernel-name table,
 * CUPTI markers the join, library loads the attacher. Records go to the
 * session's output, or where its sink says (the daemon's output sets). */
#define _GNU_SOURCE
#include <bpf/libbpf.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "correlate/gpu.h"
#include "correlate/graphs.h"
#include "correlate/kernels.h"
#include "correlate/launch.h"
#include "ingest/launch.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"
#include "session/session.h"
#include "session/target.h"
#include "writers/output.h"

struct np_output *np_session_output_for(struct np_session *s, struct np_target *t) {
    return s->sink && s->sink->output_for ? s->sink->output_for(s, t) : s->out;
}

static struct np_session *session_of(struct np_ingest *in) {
    return np_container_of(in, struct np_session, ingest);
}

static struct np_ingest_proc *find_proc(struct np_ingest *in, pid_t pid) {
    struct np_target *t = np_session_find_target(session_of(in), pid);
    return t ? &t->in : NULL;
}

static bool recording(struct np_ingest *in, struct np_ingest_proc *p) {
    return np_session_output_for(session_of(in), np_target_of_ingest(p)) != NULL;
}

static void new_mapping(struct np_ingest *in, struct np_ingest_proc *p, uint64_t ts_ns) {
    np_session_on_new_mapping(session_of(in), np_target_of_ingest(p), ts_ns);
}

/* Whether the process's CUPTI library sends GPU records for its launches -
 * or is being brought in: when it comes it names kernels whose handles were
 * made before we attached. */
static bool gpu_records_come(const struct np_session *s, const struct np_target *t) {
    bool coming = t->agent.requested && !t->agent.done;
    return s->gpu_join && (t->proc.gpu_marker || coming) && !t->gpu_off;
}

/* A launch of a process whose CUPTI library sends GPU records waits in the
 * join for them (and is written when they are in); any other is written now. */
static void write_launch(struct np_session *s, struct np_target *t, struct np_output *out,
                         const struct np_launch *l, const struct np_stack_texts *stack,
                         const char *kernel, struct np_graph_replay *replay, uint64_t cookie) {
    bool hold = gpu_records_come(s, t) && !l->nested;
    uint64_t sid = np_output_launch(out, l, stack, kernel, hold ? &s->held : NULL);
    if (!hold) {
        np_graph_replay_free(replay);
        return;
    }
    /* The join's clock is CLOCK_MONOTONIC, the clock of the event's own time. */
    const struct np_launch_event *e = l->ev;
    if (!t->gpu_first_held_ns)
        t->gpu_first_held_ns = e->hdr.ts_ns;
    bool runtime_api = l->def->family == NP_FAMILY_RUNTIME || l->def->family == NP_FAMILY_NCCL;
    struct np_gpu_held held = {
        .stack_id = sid,
        .json = np_str_cstr(&s->held.json),
        .ext = np_str_cstr(&s->held.ext),
        .cpu_kernel = kernel,
        .handle = l->func,
        /* an NCCL launch's GPU time goes to its communicator's totals */
        .tag = l->nccl_plan ? l->nccl_plan->comm : 0,
        .owner = out,
        /* a graph launch: its records are tied to their capture at retirement */
        .extra = replay,
        .free_extra = replay ? np_graph_replay_free : NULL,
        .cookie = cookie,
        /* read after its library's HELLO, made before it: CUPTI was off */
        .before_start = e->hdr.ts_ns < t->gpu_started_ns,
    };
    int err =
        np_gpu_join_launch(s->gpu_join, e->hdr.pid, e->hdr.tid, &held, runtime_api, e->hdr.ts_ns);
    if (!err && s->sink && s->sink->held)
        s->sink->held(s, out);
    if (err) { /* cannot wait: written now, as never matched */
        np_graph_replay_free(replay);
        struct np_gpu_launch now = {.stack_id = sid,
                                    .json = (char *)held.json,
                                    .ext = (char *)held.ext,
                                    .cpu_kernel = (char *)kernel};
        np_output_gpu_launch(out, &now, NP_GPU_PENDING, kernel, NULL);
        if (s->sink && s->sink->gpu_retired && cookie)
            s->sink->gpu_retired(s, e->hdr.pid, cookie, kernel, 0);
    }
}

/* The capture an outermost kernel launch goes into (0: none). */
static uint64_t capture_of(struct np_target *t, const struct np_launch *l) {
    if (l->is_nccl_op || l->nested || np_probe_is_graph(l->def))
        return 0;
    return np_graphs_capture_of(&t->graphs, l->stream, l->ev->hdr.tid, l->def);
}

/* A graph launch: each kernel its exec's capture made is counted once per
 * replay, under the line that captured it - when GPU records come for it,
 * each record under the line that captured its node (tied at retirement:
 * gpu.c) - unless its capture was not seen. */
static void write_graph_launch(struct np_session *s, struct np_target *t, struct np_output *out,
                               const struct np_launch *l, const struct np_stack_texts *stack,
                               const char *kernel, uint64_t cookie) {
    const char *why = NULL;
    struct np_graph_nodes *nodes = np_graphs_replay(&t->graphs, l->func, &why);
    if (gpu_records_come(s, t)) {
        /* without memory for it, the records stay under the replay's stack */
        write_launch(s, t, out, l, stack, kernel, np_graph_replay_new(nodes, stack), cookie);
    } else if (nodes) {
        t->graphs.stats.replayed_kernels += nodes->n;
        np_output_graph_replay(out, l, stack, kernel, nodes);
    } else
        np_output_graph_unknown(out, l, stack, kernel, why);
    if (!nodes && why && !t->graphs_unknown_said++)
        np_info("pid %d (%s): a graph launch whose capture was not seen (%s): its kernels show "
                "as one launch (summary.json targets[].graphs counts them)",
                t->proc.pid, t->comm, why);
    np_graph_nodes_put(nodes);
}

static void on_launch(struct np_ingest *in, struct np_ingest_proc *p, const struct np_launch *l,
                      struct np_stack_texts *stack) {
    struct np_session *s = session_of(in);
    struct np_target *t = np_target_of_ingest(p);
    struct np_output *out = np_session_output_for(s, t);
    uint64_t capture = capture_of(t, l);
    if (!l->nested && !l->is_nccl_op) /* its CUPTI markers follow on this thread */
        np_graphs_thread_launch(&t->graphs, l->ev->hdr.tid, 0);
    if (!out && !capture)
        return;
    if (l->is_nccl_op) {
        if (l->nccl_internal)
            return;
        t->nccl_ops++;
        np_launch_count_nccl_op(&s->nccl_comms, l);
        np_output_nccl_op(out, l, stack);
        return;
    }
    char buf[600];
    const char *kernel = np_launch_kernel_name(t->kernels, p->sym, l, stack, buf, sizeof(buf));
    if (l->def->layout == NP_LAYOUT_NCCL_LAUNCH)
        np_launch_add_nccl_kernel(capture ? NULL : &s->nccl_comms, l, kernel, stack);
    if (capture) { /* ran nothing: a node of the graph being captured */
        int err = np_graphs_add_node(&t->graphs, capture, kernel, stack);
        if (!err)
            np_graphs_thread_launch(&t->graphs, l->ev->hdr.tid, capture);
        if (err && !t->graphs_bound_said++)
            np_warn("pid %d: a graph capture is not kept (over %u nodes or %llu MiB of "
                    "capture stacks): its replays show as one launch",
                    t->proc.pid, NP_GRAPH_MAX_NODES, NP_GRAPH_MAX_STACK_BYTES >> 20);
        if (out)
            np_output_captured(out, l, stack, kernel);
        return;
    }
    uint64_t cookie = 0;
    if (l->nested) {
        t->nested++;
    } else {
        t->launches++;
        if (s->sink && s->sink->launched)
            cookie = s->sink->launched(s, t, l, stack, kernel, gpu_records_come(s, t));
    }
    if (np_probe_is_graph(l->def) && !l->nested)
        write_graph_launch(s, t, out, l, stack, kernel, cookie);
    else
        write_launch(s, t, out, l, stack, kernel, NULL, cookie);
}

static void on_handle(struct np_ingest *in, struct np_ingest_proc *p,
                      const struct np_probe_site *site, const struct np_handle_event *h) {
    (void)in;
    struct np_target *t = np_target_of_ingest(p);
    int err = t->kernels ? np_kernel_names_on_handle(t->kernels, p->sym, site->def, h) : 0;
    if (err)
        np_warn("pid %d: cannot record kernel handle: %s", t->proc.pid, strerror(-err));
}

static void on_marker(struct np_ingest *in, const struct np_marker_event *m) {
    struct np_session *s = session_of(in);
    struct np_target *t = np_session_find_target(s, (pid_t)m->hdr.pid);
    /* an API call of a captured launch: CUPTI names its node by this id */
    if (t && np_graphs_marker(&t->graphs, m->hdr.tid, m->correlation_id, m->domain))
        return;
    if (s->gpu_join)
        np_gpu_join_marker(s->gpu_join, m->hdr.pid, m->hdr.tid, m->correlation_id, m->domain,
                           m->hdr.ts_ns);
}

static void on_graph(struct np_ingest *in, struct np_ingest_proc *p,
                     const struct np_probe_site *site, const struct np_graph_event *g) {
    (void)in;
    np_graphs_on_call(&np_target_of_ingest(p)->graphs, site->def, g);
}

static bool captured(struct np_ingest *in, struct np_ingest_proc *p, const struct np_launch *l) {
    (void)in;
    return capture_of(np_target_of_ingest(p), l) != 0;
}

static const struct np_ingest_ops ingest_ops = {
    .find = find_proc,
    .recording = recording,
    .new_mapping = new_mapping,
    .launch = on_launch,
    .handle = on_handle,
    .marker = on_marker,
    .graph = on_graph,
    .captured = captured,
};

/* --reader-threads auto: half the CPUs less one, at most 8 - the other half
 * is the workload's; none on a host of 2 or 3 CPUs. */
static unsigned auto_reader_threads(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long n = cpus > 2 ? (cpus - 2) / 2 : 0;
    return n > 8 ? 8 : (unsigned)n;
}

/* Threads that build stacks beside the reader. One that cannot be started
 * is not fatal: the reader works alone, as it does with 0. */
static void start_reader_threads(struct np_session *s) {
    unsigned n =
        s->opt.reader_threads < 0 ? auto_reader_threads() : (unsigned)s->opt.reader_threads;
    int err = np_ingest_set_workers(&s->ingest, n);
    if (err)
        np_warn("cannot start %u reader threads (%s): the reader unwinds alone", n, strerror(-err));
    else if (np_ingest_workers(&s->ingest))
        np_debug("%u reader threads unwind and symbolize", n);
}

void np_session_setup_ingest(struct np_session *s) {
    s->ingest.attacher = &s->attacher;
    s->ingest.ops = &ingest_ops;
    s->ingest.fp_fallback = s->opt.unwind == UNWIND_AUTO;
    s->ingest.inline_folded = s->opt.inline_frames;
    s->ingest.python_mode = s->opt.python;
    np_ingest_set_backlog(&s->ingest, (uint64_t)s->opt.backlog_mb << 20);
    start_reader_threads(s);
    np_stack_hints_init(&s->ingest.hints);
    if (s->skel && s->opt.unwind != UNWIND_FP && !s->opt.fixed_stack_copy) {
        s->ingest.hints.fd = bpf_map__fd(s->skel->maps.stack_hints);
        s->ingest.hints.gen = &s->skel->bss->hints_gen;
    }
}
