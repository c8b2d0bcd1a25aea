/* ingest.c - record validation, decoding and hand-off (see ingest.h), and
 * the batches whose stacks worker threads build ahead of turn ("Worker
 * threads" below). */
#define _GNU_SOURCE
#include "ingest/ingest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "ingest/launch.h"
#include "ingest/nccl_plan.h"
#include "ingest/workers.h"
#include "lib/hashmap.h"
#include "lib/util.h"
#include "ncclprobe/events.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"

/* Records looked ahead per batch: enough to keep the workers busy while
 * this thread writes, few enough that a batch takes a few milliseconds. */
#define BATCH_RECORDS 256

/* A launch's stack, built by a worker thread ("Worker threads" below). */
struct stack_job {
    struct np_job job;
    struct np_ingest *in;
    struct np_ingest_proc *p;
    const struct np_launch_event *e; /* the record, in the backlog */
    const char *entry_name;
    uint64_t entry_pc;           /* a launch taken at the CUPTI marker: the function called, */
    const char *launch_lib;      /* its library */
    bool pinned;                 /* not the process's first job of the batch */
    uint64_t ret_addr;           /* out: at the marker, the launch API's caller */
    struct np_stack_texts texts; /* out */
};

/* Whether a job given out has not been waited for: a worker may be using
 * its process (jobs are waited for in order, in job_of). */
static bool jobs_out(const struct np_ingest *in) {
    return in->next_job < in->njobs;
}

void np_ingest_settle(struct np_ingest *in) {
    in->stats.nccl_plans_unclaimed += in->nccl_pending.count;
    np_map_free(&in->nccl_pending, free);
    np_map_init(&in->nccl_pending);
    np_map_free(&in->fast_awaiting, NULL);
    np_map_init(&in->fast_awaiting);
}

static void free_jobs(struct np_ingest *in);

void np_ingest_free(struct np_ingest *in) {
    np_workers_stop(in->workers);
    in->workers = NULL;
    free_jobs(in);
    np_ingest_settle(in);
    np_stack_hints_free(&in->hints);
    np_str_free(&in->stack.folded);
    np_str_free(&in->stack.detailed);
    np_str_free(&in->stack.locations);
    np_backlog_free(&in->backlog);
    free(in->stats.per_probe);
    in->stats.per_probe = NULL;
    in->stats.per_probe_len = 0;
}

static void count_probe(struct np_ingest *in, uint32_t id) {
    if (id >= in->stats.per_probe_len) {
        size_t len = in->stats.per_probe_len ? in->stats.per_probe_len : 64;
        while (len <= id)
            len *= 2;
        uint64_t *p = realloc(in->stats.per_probe, len * sizeof(*p));
        if (!p)
            return;
        memset(p + in->stats.per_probe_len, 0, (len - in->stats.per_probe_len) * sizeof(*p));
        in->stats.per_probe = p;
        in->stats.per_probe_len = len;
    }
    in->stats.per_probe[id]++;
}

/* The record's caller (its return address) is code of the process's
 * library lib_index. */
static bool called_from_library(struct np_ingest_proc *p, const struct np_launch_event *e,
                                size_t lib_index) {
    if (!p->sym || !e->ret_addr || lib_index >= p->process->nlibs)
        return false;
    const struct np_frame *caller = np_symbolize(p->sym, e->ret_addr, true);
    return strcmp(caller->module_path, p->process->libs[lib_index].path) == 0;
}

/* BPF flags a launch as nested when an earlier launch's activation still
 * looks live on the stack; that is necessary, not sufficient (a caller's
 * stack slots can outlive a call). It really is nested when it was called
 * from inside the outer probe's library: libcudart or libnccl calling the
 * driver on the user's behalf. */
static bool really_nested(struct np_ingest *in, struct np_ingest_proc *p,
                          const struct np_launch_event *e) {
    const struct np_probe_site *outer = np_attacher_site(in->attacher, e->outer_probe);
    if (!(e->flags & NP_LF_NESTED) || !outer || outer->pid != p->process->pid)
        return false;
    return called_from_library(p, e, outer->lib_index);
}

/* Reads the code objects of a Python stack not seen before, while they
 * still exist: a script's module code lives until the script ends. One
 * found where another was cached makes the texts kept by code address
 * (stacks, frames) name the old one: they go. Between batches, as every
 * change to a process (see "Worker threads"). BPF hears of each code
 * object read: when CPython frees it, stacks are reported new again, so a
 * code object allocated at its address later is read too. */
static void load_python_code(struct np_ingest *in, struct np_ingest_proc *p,
                             const struct np_launch_event *e) {
    const struct np_py_frame *py = np_launch_py(e);
    uint64_t sighted[NP_PY_MAX_FRAMES];
    size_t nsighted = 0;
    bool replaced = false;
    for (uint32_t i = 0; i < e->n_py && i < NP_PY_MAX_FRAMES; i++) {
        int r = np_pycode_load(p->pycode, py[i].code);
        replaced |= r == 1;
        if (r >= 0 && np_pycode_first_sight(p->pycode, py[i].code))
            sighted[nsighted++] = py[i].code;
    }
    if (nsighted)
        np_attacher_python_codes(in->attacher, p->process->pid, sighted, nsighted);
    if (replaced)
        np_ingest_proc_forget_stacks(p);
}

static void handle_marker(struct np_ingest *in, const struct np_marker_event *m, size_t size) {
    if (size < sizeof(*m)) {
        in->stats.malformed++;
        return;
    }
    in->stats.marker_events++;
    np_map_del_u64(&in->fast_awaiting, m->hdr.tid);
    if (in->ops->marker)
        in->ops->marker(in, m);
}

/* The correlation id of a launch taken at the CUPTI marker, handed on as
 * its marker would have been. */
static void marker_of(struct np_ingest *in, const struct np_launch_event *e,
                      const struct np_probe_site *called) {
    struct np_marker_event m = {.hdr = e->hdr,
                                .correlation_id = e->corr_id,
                                .domain = called->def->family == NP_FAMILY_DRIVER ? 1 : 2};
    m.hdr.type = NP_EV_MARKER;
    m.hdr.size = sizeof(m);
    in->stats.marker_events++;
    if (in->ops->marker)
        in->ops->marker(in, &m);
}

/* While the fast path is switched on, a call whose int3 uprobe sent its
 * launch can reach its CUPTI callback after the flag was set - BPF sees
 * that only when the callback runs inside the call, as CUPTI's does. The
 * launch record of such a marker is the marker of the thread's launch
 * still waiting for one, when that is the same function, just before. */
#define FAST_DOUBLE_WINDOW_NS 50000000ull

static bool fast_double(struct np_ingest *in, const struct np_launch_event *e) {
    uintptr_t v = (uintptr_t)np_map_del_u64(&in->fast_awaiting, e->hdr.tid);
    uint64_t ts = (uint64_t)v >> 14;
    return v && (v & (NP_MAX_PROBES - 1)) == e->called_as && e->hdr.ts_ns >= ts &&
           e->hdr.ts_ns - ts < FAST_DOUBLE_WINDOW_NS;
}

static void fast_await(struct np_ingest *in, const struct np_launch_event *e,
                       const struct np_probe_site *called) {
    if (!called->fast || (e->flags & NP_LF_NESTED)) {
        np_map_del_u64(&in->fast_awaiting, e->hdr.tid);
        return;
    }
    _Static_assert((NP_MAX_PROBES & (NP_MAX_PROBES - 1)) == 0 && NP_MAX_PROBES <= (1 << 14),
                   "probe ids in 14 bits");
    uintptr_t v = (uintptr_t)(e->hdr.ts_ns << 14) | e->called_as;
    np_map_put_u64(&in->fast_awaiting, e->hdr.tid, (void *)v);
}

/* ---- NCCL ---------------------------------------------------------------
 * A plan record comes just before its launch's record, from the same
 * probe hit on the same thread: it waits per thread until that record. */

static void handle_nccl_plan(struct np_ingest *in, const struct np_nccl_plan_event *e,
                             size_t size) {
    if (size < NP_NCCL_PLAN_FIXED_SIZE) {
        in->stats.malformed++;
        return;
    }
    const struct np_probe_site *site = np_attacher_site(in->attacher, e->probe_id);
    if (!site || !site->nccl) {
        in->stats.unknown_source++;
        return;
    }
    in->stats.nccl_plan_events++;
    struct np_nccl_plan *plan = malloc(sizeof(*plan));
    if (!plan)
        return;
    if (np_nccl_plan_decode(site->nccl, e, size, plan) < 0) {
        free(plan);
        return;
    }
    in->stats.nccl_plans++;
    struct np_nccl_plan *old = np_map_del_u64(&in->nccl_pending, e->hdr.tid);
    if (old) {
        in->stats.nccl_plans_unclaimed++;
        free(old);
    }
    if (np_map_put_u64(&in->nccl_pending, e->hdr.tid, plan) < 0)
        free(plan);
}

/* The plan of this launch record, if it came; the caller frees it. BPF
 * stamps both records of one probe hit with the same time. */
static struct np_nccl_plan *take_nccl_plan(struct np_ingest *in, const struct np_launch_event *e) {
    struct np_nccl_plan *plan = np_map_del_u64(&in->nccl_pending, e->hdr.tid);
    if (plan && plan->probe_id == e->probe_id && plan->ts_ns == e->hdr.ts_ns)
        return plan;
    if (plan) {
        in->stats.nccl_plans_unclaimed++;
        free(plan);
    }
    return NULL;
}

/* What of this plan could not be read, in words; NULL when nothing. */
static const char *nccl_plan_missing(const struct np_nccl_layout *layout,
                                     const struct np_nccl_plan *plan) {
    if (plan->flags & NP_NF_PLAN_ERR)
        return "the plan could not be read (freed or unmapped memory)";
    if (plan->flags & NP_NF_TASK_ERR)
        return "a task could not be read: the operations stop there";
    if (plan->flags & NP_NF_COMM_ERR)
        return "the communicator could not be read";
    if (plan->flags & NP_NF_STREAM_ERR)
        return "the launch stream could not be read";
    if (plan->copy_engine && (plan->flags & NP_NF_AUX_ERR))
        return "the copy-engine arguments could not be read";
    if (plan->rma && plan->nops == 0 && (plan->flags & NP_NF_AUX_ERR))
        return "the RMA arguments could not be read";
    if (layout->missing[0])
        return layout->missing;
    if (plan->symmetric && plan->nops == 0)
        return "symmetric kernel: NCCL frees its tasks before the launch; the operations are "
               "in nccl.jsonl (API calls)";
    return NULL;
}

/* An NCCL kernel launch takes its dimensions and stream from its plan, and
 * says what of it could not be read. */
static void add_nccl_plan(struct np_ingest *in, const struct np_probe_site *site,
                          struct np_launch *l, const struct np_nccl_plan *plan) {
    l->nccl_plan = plan;
    if (!plan) {
        in->stats.nccl_launches_without_plan++;
        l->nccl_missing = site->nccl && site->nccl->status != 0
                              ? site->nccl->missing
                              : "the plan record was not received (see summary.json nccl)";
        return;
    }
    if (plan->grid && plan->block) {
        l->has_dims = true;
        l->grid[0] = plan->grid, l->grid[1] = l->grid[2] = 1;
        l->block[0] = plan->block, l->block[1] = l->block[2] = 1;
    }
    if (plan->has_stream)
        l->stream = plan->stream;
    l->nccl_missing = nccl_plan_missing(site->nccl, plan);
}

/* An NCCL API call: its communicator's identity, which BPF copied into
 * deref. */
static void add_nccl_comm_id(const struct np_probe_site *site, struct np_launch *l) {
    const struct np_nccl_layout *layout = site->nccl;
    if (layout && layout->comm_ok && l->comm && !(l->ev->flags & NP_LF_DEREF_ERR))
        np_nccl_comm_id_decode(layout, l->ev->deref, layout->cfg.comm_len, &l->comm_id);
}

/* The fixed part of a launch the CUPTI marker took, its arguments rebuilt
 * from CUPTI's params bytes (*out), not yet its return address; false: not
 * a launch the fast path knows. */
static bool at_marker_args(const struct np_launch_event *e, const struct np_probe_site *called,
                           struct np_launch_event *out) {
    const struct np_fast_def *f = np_fast_def_by_symbol(called->def->symbol);
    if (!f || !(e->flags & NP_LF_STACK_COPY))
        return false;
    memcpy(out, e, NP_LAUNCH_FIXED_SIZE);
    np_fast_regs_from_params(f, out->args, out->stack_args);
    return true;
}

/* The library of the launch function a site probes (NULL: not known). */
static const char *site_library(struct np_ingest_proc *p, const struct np_probe_site *site) {
    return site->lib_index < p->process->nlibs ? p->process->libs[site->lib_index].path : NULL;
}

/* A launch the CUPTI marker took (the agent's fast path): its fixed part
 * as the int3 probe would have sent it - the arguments rebuilt, the return
 * address the launch API's caller's - with its stack unwound and cut
 * (np_ingest_unwind_at_marker; by its worker, when it has one). NULL: not a
 * launch the fast path knows. */
static const struct np_launch_event *at_marker_fixed(struct np_ingest *in, struct np_ingest_proc *p,
                                                     const struct np_launch_event *e,
                                                     const struct np_probe_site *site,
                                                     const struct np_probe_site *called) {
    static struct np_launch_event fixed; /* only the fixed part is used; one thread handles */
    if (!at_marker_args(e, called, &fixed))
        return NULL;
    if (in->current_job) { /* unwound by a worker */
        fixed.ret_addr = in->current_job->ret_addr;
        return &fixed;
    }
    if (jobs_out(in)) /* a worker may be using the process */
        np_workers_wait_all(in->workers);
    fixed.ret_addr = np_ingest_unwind_at_marker(in, p, e, called->addr, site_library(p, site));
    return &fixed;
}

static bool launch_malformed(const struct np_launch_event *e, size_t size) {
    return size < NP_LAUNCH_FIXED_SIZE || e->n_ips > NP_MAX_STACK ||
           e->stack_len > NP_MAX_STACK_BYTES || ((e->flags & NP_LF_STACK_COPY) && e->n_ips < 1) ||
           size < NP_LAUNCH_FIXED_SIZE + (size_t)e->n_ips * 8 + e->stack_len ||
           e->n_py > NP_PY_MAX_FRAMES ||
           size < NP_LAUNCH_FIXED_SIZE + (size_t)np_launch_py_index(e->n_ips, e->stack_len) * 8 +
                      (size_t)e->n_py * sizeof(struct np_py_frame);
}

/* What a launch record needs done as soon as it is read, before it may
 * wait in the backlog: its new code objects read, its process's symbols. */
static void launch_arrived(struct np_ingest *in, const struct np_launch_event *e, size_t size) {
    if (launch_malformed(e, size))
        return; /* counted when it is handled */
    struct np_ingest_proc *p = in->ops->find(in, (pid_t)e->hdr.pid);
    if (p && p->pycode && (e->flags & NP_LF_PY_NEW)) {
        load_python_code(in, p, e); /* first: the code objects may not live long */
        if (p->process->hold_loads) /* BPF stopped a process we started until they were read */
            np_continue_stopped(p->process->pid, 20);
    }
    if (p && !p->sym) /* first record of a process we started */
        in->ops->new_mapping(in, p, e->hdr.ts_ns);
}

/* The process and probe sites of a launch record; NULL when we do not know
 * them (the process is gone, or a probe id reused since it was sent). */
static struct np_ingest_proc *launch_source(struct np_ingest *in, const struct np_launch_event *e,
                                            const struct np_probe_site **site,
                                            const struct np_probe_site **called) {
    struct np_ingest_proc *p = in->ops->find(in, (pid_t)e->hdr.pid);
    /* Looked up only now: attaching (at its arrival) can grow the site array. */
    *site = np_attacher_site(in->attacher, e->probe_id);
    *called = np_attacher_site(in->attacher, e->called_as);
    pid_t pid = p ? p->process->pid : -1;
    if (!*site || !*called || !p || (*site)->pid != pid || (*called)->pid != pid)
        return NULL;
    return p;
}

/* What names the stack's entry frame instead of its own symbol: via a
 * thunk, ips[0] is the thunk's target, so the function called is named;
 * so it is when there is no symbolizer. NULL: its symbol. */
static const char *entry_name_of(const struct np_ingest_proc *p, const struct np_launch_event *e,
                                 const struct np_probe_site *called) {
    return (e->flags & NP_LF_VIA_THUNK) || !p->sym ? called->def->symbol : NULL;
}

/* Whether a decoded launch of p is handed on now: recorded, or going into
 * a graph being captured (whose replays may be recorded). */
static bool launch_wanted(struct np_ingest *in, struct np_ingest_proc *p,
                          const struct np_launch *l) {
    return !in->ops->recording || in->ops->recording(in, p) ||
           (in->ops->captured && in->ops->captured(in, p, l));
}

/* The texts of e's stack: its job's, or built here - after every job out
 * has run (a worker may be using the process), with the stack cache pinned
 * while their texts wait to be handled (they may be read in place). */
static struct np_stack_texts *launch_stack(struct np_ingest *in, struct np_ingest_proc *p,
                                           const struct np_launch_event *e,
                                           const char *entry_name) {
    if (in->current_job)
        return &in->current_job->texts;
    bool pinned = jobs_out(in);
    if (pinned)
        np_workers_wait_all(in->workers);
    np_ingest_build_stack(in, p, e, entry_name, pinned, &in->stack);
    return &in->stack;
}

static void handle_launch(struct np_ingest *in, const struct np_launch_event *e, size_t size) {
    if (launch_malformed(e, size)) {
        in->stats.malformed++;
        return;
    }
    const struct np_probe_site *site, *called;
    struct np_ingest_proc *p = launch_source(in, e, &site, &called);
    if (!p) {
        in->stats.unknown_source++;
        return;
    }
    const struct np_launch_event *raw = e;
    if ((e->flags & NP_LF_AT_MARKER) && fast_double(in, e)) {
        in->stats.fast_doubles++;
        marker_of(in, e, called);
        return;
    }
    if (!(e->flags & NP_LF_AT_MARKER))
        fast_await(in, e, called);
    if (e->flags & NP_LF_AT_MARKER) {
        e = at_marker_fixed(in, p, e, site, called);
        if (!e) {
            in->stats.malformed++;
            return;
        }
    }
    struct np_launch l;
    np_launch_decode(e, called->def, &l);
    struct np_nccl_plan *plan =
        called->def->layout == NP_LAYOUT_NCCL_LAUNCH ? take_nccl_plan(in, e) : NULL;
    if (plan && plan->has_stream)
        l.stream = plan->stream;
    l.nested = really_nested(in, p, e);
    if (!launch_wanted(in, p, &l)) {
        in->stats.not_recorded++;
        free(plan);
        return;
    }
    /* Without a symbolizer (the process exited before we could read its
     * mappings) the launch is still written, with raw addresses. */
    if (!p->sym)
        in->stats.unsymbolized++;
    in->stats.launch_events++;
    count_probe(in, e->called_as);

    l.nccl_names = called->nccl ? &called->nccl->names : NULL; /* the library's own names */
    if (called->def->layout == NP_LAYOUT_NCCL_LAUNCH)
        add_nccl_plan(in, called, &l, plan);

    struct np_stack_texts *stack = launch_stack(in, p, raw, entry_name_of(p, raw, called));

    if (l.is_nccl_op) {
        add_nccl_comm_id(called, &l);
        /* an API function libnccl calls itself (2.28's ncclBcast calls
         * ncclBroadcast) is part of the outer call, not an operation */
        l.nccl_internal = called_from_library(p, e, called->lib_index);
        if (l.nccl_internal)
            in->stats.nccl_internal_calls++;
    }
    in->ops->launch(in, p, &l, stack);
    free(plan);
    if (e->flags & NP_LF_AT_MARKER) { /* its correlation id, as its marker would have said */
        in->stats.fast_launches++;
        marker_of(in, e, called);
    }
}

static void handle_handle(struct np_ingest *in, const struct np_handle_event *h, size_t size) {
    if (size < sizeof(*h)) {
        in->stats.malformed++;
        return;
    }
    const struct np_probe_site *site = np_attacher_site(in->attacher, h->probe_id);
    struct np_ingest_proc *p = in->ops->find(in, (pid_t)h->hdr.pid);
    if (!site || !p || site->pid != p->process->pid) {
        in->stats.unknown_source++;
        return;
    }
    in->stats.handle_events++;
    in->ops->handle(in, p, site, h);
}

static void handle_graph(struct np_ingest *in, const struct np_graph_event *g, size_t size) {
    if (size < sizeof(*g)) {
        in->stats.malformed++;
        return;
    }
    const struct np_probe_site *site = np_attacher_site(in->attacher, g->probe_id);
    struct np_ingest_proc *p = in->ops->find(in, (pid_t)g->hdr.pid);
    if (!site || !p || site->pid != p->process->pid || site->def->role != NP_ROLE_GRAPH_CALL) {
        in->stats.unknown_source++;
        return;
    }
    in->stats.graph_events++;
    if (in->ops->graph)
        in->ops->graph(in, p, site, g);
}

static void handle_map(struct np_ingest *in, const struct np_map_event *m, size_t size) {
    if (size < sizeof(*m)) {
        in->stats.malformed++;
        return;
    }
    in->stats.map_events++;
    struct np_ingest_proc *p = in->ops->find(in, (pid_t)m->hdr.pid);
    if (p)
        in->ops->new_mapping(in, p, m->hdr.ts_ns);
}

/* Whether a record's header holds together: our version, a size within
 * what was read. */
static bool header_ok(const void *data, size_t size) {
    const struct np_event_header *h = data;
    return size >= sizeof(*h) && h->version == NP_EVENT_VERSION && h->size <= size;
}

static void dispatch(struct np_ingest *in, void *data, size_t size) {
    const struct np_event_header *h = data;

    if (!header_ok(data, size)) {
        in->stats.malformed++;
        return;
    }
    switch (h->type) {
    case NP_EV_LAUNCH:
        handle_launch(in, data, h->size);
        break;
    case NP_EV_HANDLE:
        handle_handle(in, data, h->size);
        break;
    case NP_EV_MAP:
        handle_map(in, data, h->size);
        break;
    case NP_EV_MARKER:
        handle_marker(in, data, h->size);
        break;
    case NP_EV_NCCL_PLAN:
        handle_nccl_plan(in, data, h->size);
        break;
    case NP_EV_GRAPH:
        handle_graph(in, data, h->size);
        break;
    default:
        in->stats.malformed++;
        break;
    }
}

/* A record that did not fit in the backlog (the drain thread). It was not
 * validated: a probe id past any probe's is counted under none (0), not
 * grown a per-probe array for. */
static void backlog_drop(struct np_ingest *in, const void *data, size_t size) {
    const struct np_event_header *h = data;
    bool launch = size >= NP_LAUNCH_FIXED_SIZE && h->type == NP_EV_LAUNCH;
    uint32_t id = launch ? ((const struct np_launch_event *)data)->called_as : 0;
    np_backlog_count_drop(&in->backlog, launch, id < NP_MAX_PROBES ? id : 0);
}

static void raw_dump(struct np_ingest *in, const void *data, size_t size) {
    uint32_t n = (uint32_t)size;
    if (fwrite(&n, sizeof(n), 1, in->raw_dump) != 1 ||
        fwrite(data, 1, size, in->raw_dump) != size) {
        np_warn("--raw-dump: write failed, no more records dumped: %s", strerror(errno));
        fclose(in->raw_dump);
        in->raw_dump = NULL;
    }
}

/* A code object of a launch stack was freed: the next stack that names its
 * address reads what is there then (pycode.h). In arrival order, before
 * the launch records that follow it. */
static void handle_py_code(struct np_ingest *in, const struct np_py_code_event *ev, size_t size) {
    if (size < sizeof(*ev)) {
        in->stats.malformed++;
        return;
    }
    in->stats.py_code_events++;
    struct np_ingest_proc *p = in->ops->find(in, (pid_t)ev->hdr.pid);
    if (p && p->pycode)
        np_pycode_freed(p->pycode, ev->code);
}

/* Done as soon as a record is read; false: it is handled, nothing waits. */
static bool arrived(struct np_ingest *in, void *data, size_t size) {
    const struct np_event_header *h = data;
    if (!header_ok(data, size))
        return true;            /* counted as malformed when handled */
    if (h->type == NP_EV_MAP) { /* new code: probed at once */
        handle_map(in, data, h->size);
        return false;
    }
    if (h->type == NP_EV_PY_CODE) {
        handle_py_code(in, data, h->size);
        return false;
    }
    if (h->type == NP_EV_LAUNCH)
        launch_arrived(in, data, h->size);
    return true;
}

/* Records that change what later ones mean (kernel names, graph captures)
 * are small and rare: they wait even when the backlog is full. */
static bool must_keep(const void *data, size_t size) {
    const struct np_event_header *h = data;
    return size >= sizeof(*h) && (h->type == NP_EV_HANDLE || h->type == NP_EV_GRAPH);
}

/* A record read from the ring: handled now (no backlog), or copied into
 * the backlog (on the drain thread: nothing else is touched). */
static void take(struct np_ingest *in, void *data, size_t size) {
    if (!in->queue) {
        if (in->raw_dump)
            raw_dump(in, data, size);
        if (arrived(in, data, size))
            dispatch(in, data, size);
        return;
    }
    bool keep = must_keep(data, size);
    int err = np_backlog_push(&in->backlog, data, size, keep);
    if (err && !keep)
        backlog_drop(in, data, size);
    else if (err) /* no memory for a record that changes later ones */
        np_warn("a kernel-handle or graph record was lost: %s", strerror(-err));
}

void np_ingest_set_backlog(struct np_ingest *in, uint64_t budget_bytes) {
    np_backlog_init(&in->backlog, budget_bytes);
    in->queue = budget_bytes > 0;
}

/* A freed code object: the records before it must be handled first, under
 * the names of what was freed (it changes what later ones mean). */
static bool is_barrier(const void *rec, size_t size) {
    const struct np_event_header *h = rec;
    return size >= sizeof(*h) && h->type == NP_EV_PY_CODE;
}

/* What cannot wait, for every record queued since the last time - up to a
 * barrier with records before it still to handle: it is scanned (and what
 * follows it) once they are, and nothing after it is handled before. */
static void scan_arrivals(struct np_ingest *in) {
    size_t size;
    uint32_t *flags;
    void *rec;
    in->scan_held = false;
    while ((rec = np_backlog_scan(&in->backlog, &size, &flags))) {
        if (is_barrier(rec, size) && np_backlog_scanned_waiting(&in->backlog) > 1) {
            np_backlog_unscan(&in->backlog, size);
            in->scan_held = true;
            return;
        }
        if (in->raw_dump)
            raw_dump(in, rec, size);
        if (!arrived(in, rec, size))
            *flags |= NP_BACKLOG_DONE;
    }
}

/* ---- Worker threads -------------------------------------------------------
 *
 * With workers (np_ingest_set_workers), the stacks of queued launches are
 * built ahead of their turn, once this thread alone falls behind.
 * np_ingest_work looks a batch of records ahead in the backlog and gives
 * each launch that will want a stack to the worker of its process: all of
 * a process's launches go to one worker, in order, since its unwinder,
 * stack-text cache and code objects are used by one thread at a time;
 * processes are given workers in turn, as their first launches come. Then
 * it handles the batch's records in order on this thread, as without
 * workers, each launch taking its stack from its job. While a batch runs:
 * - a worker touches only its job's process (the unwinder, the stack-text
 *   cache, pinned after the process's first job of the batch so that texts
 *   handed out stay valid, the code objects), the ingest-wide unwind
 *   statistics and stack hints under learn_lock, and symbolizers through
 *   their own lock;
 * - this thread touches a process only through its symbolizer (its lock):
 *   what changes a process (a library load, code objects read, its stack
 *   cache forgotten) happens between batches, in scan_arrivals, or once
 *   np_ingest_work has returned, when no job is out;
 * - a record is popped only once its job has run.
 * A launch that wants a stack but got no job (its recording state changed
 * since the look ahead) waits for every job out and builds it here. */

static void run_stack_job(struct np_job *job) {
    struct stack_job *j = np_container_of(job, struct stack_job, job);
    if (j->e->flags & NP_LF_AT_MARKER)
        j->ret_addr = np_ingest_unwind_at_marker(j->in, j->p, j->e, j->entry_pc, j->launch_lib);
    np_ingest_build_stack(j->in, j->p, j->e, j->entry_name, j->pinned, &j->texts);
}

static void free_jobs(struct np_ingest *in) {
    for (size_t i = 0; in->jobs && i < BATCH_RECORDS; i++) {
        np_str_free(&in->jobs[i].texts.folded);
        np_str_free(&in->jobs[i].texts.detailed);
        np_str_free(&in->jobs[i].texts.locations);
    }
    free(in->jobs);
    in->jobs = NULL;
    in->njobs = in->next_job = 0;
}

int np_ingest_set_workers(struct np_ingest *in, unsigned n) {
    if (n == 0 || !in->queue) /* without a backlog records are handled as read: none */
        return 0;
    in->jobs = calloc(BATCH_RECORDS, sizeof(*in->jobs));
    if (!in->jobs)
        return -ENOMEM;
    int err = np_workers_start(n, &in->workers);
    if (err)
        free_jobs(in);
    return err;
}

unsigned np_ingest_workers(const struct np_ingest *in) {
    return in->workers ? np_workers_count(in->workers) : 0;
}

uint64_t np_ingest_worker_jobs(struct np_ingest *in, unsigned i) {
    return i < np_ingest_workers(in) ? np_workers_jobs_run(in->workers, i) : 0;
}

/* Whether this queued record is a launch that will want its stack, as far
 * as can be told before its turn; fills in its job's inputs. */
static bool job_for(struct np_ingest *in, const void *rec, size_t size, struct stack_job *j) {
    const struct np_event_header *h = rec;
    if (!header_ok(rec, size) || h->type != NP_EV_LAUNCH || launch_malformed(rec, h->size))
        return false;
    const struct np_launch_event *e = rec;
    const struct np_probe_site *site, *called;
    struct np_ingest_proc *p = launch_source(in, e, &site, &called);
    struct np_launch_event args;
    if (!p || ((e->flags & NP_LF_AT_MARKER) && !at_marker_args(e, called, &args)))
        return false;
    struct np_launch l;
    np_launch_decode(e->flags & NP_LF_AT_MARKER ? &args : e, called->def, &l);
    if (!launch_wanted(in, p, &l))
        return false;
    j->job.run = run_stack_job;
    j->in = in;
    j->p = p;
    j->e = e;
    j->entry_name = entry_name_of(p, e, called);
    j->entry_pc = called->addr;
    j->launch_lib = site_library(p, site);
    j->pinned = p->batch == in->batch; /* an earlier job of this batch may hand out texts */
    p->batch = in->batch;
    if (!p->has_worker) { /* in turn: pids of processes started together share residues */
        p->worker = in->next_worker++ % np_workers_count(in->workers);
        p->has_worker = true;
    }
    return true;
}

/* Gives the next records' launches to the workers; returns how many
 * records the batch holds (0: none waits). */
static size_t start_batch(struct np_ingest *in) {
    struct np_backlog_cursor cur;
    size_t size, n = 0;
    uint32_t flags;
    const void *rec;
    in->njobs = in->next_job = 0;
    in->batch++;
    np_backlog_ahead_start(&in->backlog, &cur);
    while (n < BATCH_RECORDS && (rec = np_backlog_ahead(&in->backlog, &cur, &size, &flags))) {
        n++;
        struct stack_job *j = &in->jobs[in->njobs];
        if (!(flags & NP_BACKLOG_DONE) && job_for(in, rec, size, j)) {
            np_workers_submit(in->workers, j->p->worker, &j->job);
            in->njobs++;
        }
    }
    return n;
}

/* The job of the record whose turn it is, once it has run; NULL: none. */
static struct stack_job *job_of(struct np_ingest *in, const void *rec) {
    if (in->next_job >= in->njobs || in->jobs[in->next_job].e != rec)
        return NULL;
    struct stack_job *j = &in->jobs[in->next_job++];
    np_workers_wait(in->workers, j->p->worker, &j->job);
    return j;
}

/* np_ingest_work with workers, while a batch or more waits: batch after
 * batch. Returns false once the deadline passed. */
static bool work_in_batches(struct np_ingest *in, uint64_t deadline) {
    size_t n;
    while (np_backlog_waiting(&in->backlog) >= BATCH_RECORDS && (n = start_batch(in)) > 0) {
        size_t size;
        uint32_t flags;
        const void *rec = np_backlog_peek(&in->backlog, &size, &flags);
        for (size_t i = 0; i < n && rec; i++) {
            in->current_job = job_of(in, rec);
            if (!(flags & NP_BACKLOG_DONE))
                dispatch(in, (void *)rec, size);
            in->current_job = NULL;
            rec = i + 1 < n ? np_backlog_pop_peek(&in->backlog, &size, &flags)
                            : (np_backlog_pop(&in->backlog), NULL);
        }
        /* job_of waited for every job, unless the backlog ran out under the
         * batch: no slot is given again while its job may run */
        np_workers_wait_all(in->workers);
        in->njobs = in->next_job = 0;
        scan_arrivals(in);
        if (deadline && np_monotonic_ns() >= deadline)
            return false;
    }
    return true;
}

uint64_t np_ingest_work(struct np_ingest *in, uint64_t max_ns) {
    if (in->queue)
        np_backlog_trim(&in->backlog);
    scan_arrivals(in);
    uint64_t deadline = max_ns ? np_monotonic_ns() + max_ns : 0;
    /* Workers only while this thread alone falls behind (its last slice
     * ended with a batch still waiting), or for a last drain: a reader that
     * keeps up handles records here, since handing one to a worker costs
     * a wait and now and then a wake-up, more CPU than its stack. */
    if (in->workers && (in->behind || !max_ns) && !work_in_batches(in, deadline)) {
        in->behind = true;
        return np_backlog_waiting(&in->backlog);
    }
    size_t size;
    uint32_t flags;
    const void *rec;
    rec = np_backlog_peek(&in->backlog, &size, &flags);
    if (!rec && in->scan_held) { /* a barrier was all there was to scan */
        scan_arrivals(in);
        rec = np_backlog_peek(&in->backlog, &size, &flags);
    }
    for (unsigned n = 1; rec; n++) {
        if (!(flags & NP_BACKLOG_DONE))
            dispatch(in, (void *)rec, size);
        if (n % 32 == 0 && deadline && np_monotonic_ns() >= deadline) {
            np_backlog_pop(&in->backlog);
            break;
        }
        if (n % 256 == 0) /* a record the drain thread queued meanwhile may not wait */
            scan_arrivals(in);
        rec = np_backlog_pop_peek(&in->backlog, &size, &flags);
        if (!rec && in->scan_held) { /* what came before a barrier is handled: past it */
            scan_arrivals(in);
            rec = np_backlog_peek(&in->backlog, &size, &flags);
        }
    }
    uint64_t waiting = np_backlog_waiting(&in->backlog);
    in->behind = waiting >= BATCH_RECORDS;
    return waiting;
}

int np_ingest_record(void *ctx, void *data, size_t size) {
    struct np_ingest *in = ctx;
    take(in, data, size);
    if (!in->queue && in->budget > 0 && --in->budget == 0)
        return NP_INGEST_YIELD;
    return 0;
}
