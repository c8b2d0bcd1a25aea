/* ingest.c - record validation and routing (see ingest.h). */
#define _GNU_SOURCE
#include "ingest/ingest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "attach/target.h"
#include "correlate/gpu.h"
#include "correlate/kernels.h"
#include "ingest/launch.h"
#include "lib/hashmap.h"
#include "lib/util.h"
#include "ncclprobe/events.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "writers/output.h"

void np_ingest_settle(struct np_ingest *in) {
    in->stats.nccl_plans_unclaimed += in->nccl_pending.count;
    np_map_free(&in->nccl_pending, free);
    np_map_init(&in->nccl_pending);
}

void np_ingest_free(struct np_ingest *in) {
    np_ingest_settle(in);
    np_nccl_comms_free(&in->nccl_comms);
    np_str_free(&in->held_json);
    np_str_free(&in->stack.folded);
    np_str_free(&in->stack.detailed);
    np_str_free(&in->stack.locations);
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

/* The name of the kernel a launch runs, or a bracketed placeholder. */
static const char *kernel_name(struct np_target *t, const struct np_launch *l, char *buf,
                               size_t size) {
    const char *name = NULL;

    switch (l->def->layout) {
    case NP_LAYOUT_RT_LAUNCH:
    case NP_LAYOUT_RT_LAUNCH_EXC:
        /* cudaLaunchKernel also accepts a cudaKernel_t since CUDA 12 */
        name = np_kernel_names_lookup(t->kernels, l->func);
        if (!name)
            name = np_kernel_name_from_stub(t->sym, l->func);
        break;
    case NP_LAYOUT_RT_LAUNCH_HANDLE:
    case NP_LAYOUT_DRV_LAUNCH:
    case NP_LAYOUT_DRV_LAUNCH_EX:
        name = np_kernel_names_lookup(t->kernels, l->func);
        break;
    case NP_LAYOUT_GRAPH:
        snprintf(buf, size, "<graph %s>", l->def->api);
        return buf;
    case NP_LAYOUT_NCCL_LAUNCH:
        if (strcmp(l->def->api, "ncclLaunchCeColl") == 0 ||
            (l->nccl_plan && l->nccl_plan->copy_engine))
            return "<nccl copy engine>";
        if (l->nccl_plan && l->nccl_plan->has_kernel_fn)
            name = np_kernel_name_from_stub(t->sym, l->nccl_plan->kernel_fn);
        if (!name)
            return "<nccl kernel>";
        break;
    default:
        break;
    }
    if (name)
        return name;
    snprintf(buf, size, "<unnamed 0x%" PRIx64 ">", l->func);
    return buf;
}

/* nvcc's launch stub is named __device_stub__<mangled kernel>: when the
 * handle's origin was not seen, the stack still names the kernel. */
static const char *kernel_from_stub_frame(const char *stack, char *buf, size_t size) {
    static const char marker[] = "__device_stub__";
    const char *p = strstr(stack, marker);
    if (!p)
        return NULL;
    p += sizeof(marker) - 1;
    size_t n = strcspn(p, ";");
    char mangled[512];
    if (n + 2 >= sizeof(mangled))
        return NULL;
    /* "__device_stub__Z6kernelPf" carries the mangled name minus its '_' */
    snprintf(mangled, sizeof(mangled), "%s%.*s", p[0] == 'Z' ? "_" : "", (int)n, p);
    char *demangled = np_demangle_short(mangled);
    if (!demangled)
        return NULL;
    snprintf(buf, size, "%s", demangled);
    free(demangled);
    return buf;
}

/* The record's caller (its return address) is code of the target's library
 * lib_index. */
static bool called_from_library(struct np_target *t, const struct np_launch_event *e,
                                size_t lib_index) {
    if (!t->sym || !e->ret_addr || lib_index >= t->nlibs)
        return false;
    const struct np_frame *caller = np_symbolize(t->sym, e->ret_addr, true);
    return strcmp(caller->module_path, t->libs[lib_index].path) == 0;
}

/* BPF flags a launch as nested when an earlier launch's activation still
 * looks live on the stack; that is necessary, not sufficient (a caller's
 * stack slots can outlive a call). It really is nested when it was called
 * from inside the outer probe's library: libcudart or libnccl calling the
 * driver on the user's behalf. */
static bool really_nested(struct np_ingest *in, struct np_target *t,
                          const struct np_launch_event *e) {
    const struct np_probe_site *outer = np_attacher_site(in->attacher, e->outer_probe);
    if (!(e->flags & NP_LF_NESTED) || !outer || outer->pid != t->pid)
        return false;
    return called_from_library(t, e, outer->lib_index);
}

/* Reads the code objects of a Python stack not seen before, while they
 * still exist: a script's module code lives until the script ends. */
static void load_python_code(struct np_target *t, const struct np_launch_event *e) {
    const struct np_py_frame *py = np_launch_py(e);
    for (uint32_t i = 0; i < e->n_py; i++)
        np_pycode_load(t->pycode, py[i].code);
}

/* A launch of a process whose CUPTI library sends GPU records waits in the
 * join for them; any other is written now. */
static void write_launch(struct np_ingest *in, struct np_target *t, struct np_output *out,
                         const struct np_launch *l, const char *kernel) {
    const struct np_stack_texts *stack = &in->stack;
    bool hold = in->gpu && t->gpu_marker && !t->gpu_off && !l->nested;
    uint64_t sid = np_output_launch(out, l, stack, kernel, hold ? &in->held_json : NULL);
    if (!hold)
        return;
    /* The join's clock is CLOCK_MONOTONIC, the clock of the event's own time. */
    const struct np_launch_event *e = l->ev;
    if (!t->gpu_first_held_ns)
        t->gpu_first_held_ns = e->hdr.ts_ns;
    bool runtime_api = l->def->family == NP_FAMILY_RUNTIME || l->def->family == NP_FAMILY_NCCL;
    /* an NCCL launch's GPU time goes to its communicator's totals */
    uint64_t tag = l->nccl_plan ? l->nccl_plan->comm : 0;
    int err = np_gpu_join_launch(in->gpu, e->hdr.pid, e->hdr.tid, sid, np_str_cstr(&in->held_json),
                                 kernel, runtime_api, tag, out, e->hdr.ts_ns);
    if (!err && in->on_held)
        in->on_held(in->ctx, out);
    if (err) { /* cannot wait: written now, as never matched */
        struct np_gpu_launch now = {.stack_id = sid,
                                    .json = (char *)np_str_cstr(&in->held_json),
                                    .cpu_kernel = (char *)kernel};
        np_output_gpu_launch(out, &now, NP_GPU_PENDING);
    }
}

static void handle_marker(struct np_ingest *in, const struct np_marker_event *m, size_t size) {
    if (size < sizeof(*m)) {
        in->stats.malformed++;
        return;
    }
    in->stats.marker_events++;
    if (in->gpu)
        np_gpu_join_marker(in->gpu, m->hdr.pid, m->hdr.tid, m->correlation_id, m->domain,
                           m->hdr.ts_ns);
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

static void append_frame(struct np_str *s, const char *frame) {
    np_str_append(s, s->len ? ";" : "");
    np_str_append(s, frame);
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
    if (layout->missing[0])
        return layout->missing;
    if (plan->symmetric && plan->nops == 0)
        return "symmetric kernel: NCCL frees its tasks before the launch; the operations are "
               "in nccl.jsonl (API calls)";
    return NULL;
}

/* Completes an NCCL kernel launch from its plan: dimensions, stream, the
 * [NCCL]Op frame above the kernel, per-communicator totals. */
static void add_nccl_launch(struct np_ingest *in, const struct np_probe_site *site,
                            struct np_launch *l, const struct np_nccl_plan *plan,
                            const char *kernel) {
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

    char types[256], frame[300];
    np_nccl_plan_op_types(plan, kernel, types, sizeof(types));
    if (types[0]) {
        snprintf(frame, sizeof(frame), "[NCCL]%s", types);
        append_frame(&in->stack.folded, frame);
        append_frame(&in->stack.detailed, frame);
        np_ingest_append_location(&in->stack.locations);
    }
    struct np_nccl_comm_stats *c =
        np_nccl_comms_get(&in->nccl_comms, l->ev->hdr.pid, plan->comm, &plan->id);
    if (c) {
        c->launches++;
        c->planned_ops += plan->nops;
    }
}

/* An NCCL API call: its communicator's identity (BPF copied it into
 * deref) and the communicator's totals. */
static void add_nccl_op(struct np_ingest *in, const struct np_probe_site *site,
                        struct np_launch *l) {
    const struct np_nccl_layout *layout = site->nccl;
    if (layout && layout->comm_ok && l->comm && !(l->ev->flags & NP_LF_DEREF_ERR))
        np_nccl_comm_id_decode(layout, l->ev->deref, layout->cfg.comm_len, &l->comm_id);
    int func = np_nccl_func_of_api(l->def->api);
    if (func < 0 || !l->comm)
        return;
    struct np_nccl_comm_stats *c =
        np_nccl_comms_get(&in->nccl_comms, l->ev->hdr.pid, l->comm, &l->comm_id);
    if (c) {
        c->api[func].calls++;
        c->api[func].bytes += l->count * (uint64_t)np_nccl_datatype_size(l->datatype);
    }
}

static void handle_launch(struct np_ingest *in, const struct np_launch_event *e, size_t size) {
    if (size < NP_LAUNCH_FIXED_SIZE || e->n_ips > NP_MAX_STACK ||
        e->stack_len > NP_MAX_STACK_BYTES || ((e->flags & NP_LF_STACK_COPY) && e->n_ips < 1) ||
        size < NP_LAUNCH_FIXED_SIZE + (size_t)e->n_ips * 8 + e->stack_len ||
        e->n_py > NP_PY_MAX_FRAMES ||
        size < NP_LAUNCH_FIXED_SIZE + (size_t)np_launch_py_index(e->n_ips, e->stack_len) * 8 +
                   (size_t)e->n_py * sizeof(struct np_py_frame)) {
        in->stats.malformed++;
        return;
    }
    struct np_target *t = in->find_target(in->ctx, (pid_t)e->hdr.pid);
    if (t && t->pycode && (e->flags & NP_LF_PY_NEW)) {
        load_python_code(t, e); /* first: the code objects may not live long */
        if (t->hold_loads)      /* BPF stopped a process we started until they were read */
            np_continue_stopped(t->pid, 20);
    }
    if (t && !t->sym && in->on_new_mapping) /* first record of a process we started */
        in->on_new_mapping(in->ctx, t, e->hdr.ts_ns);
    /* Looked up only now: attaching (above) can grow the site array. */
    const struct np_probe_site *site = np_attacher_site(in->attacher, e->probe_id);
    const struct np_probe_site *called = np_attacher_site(in->attacher, e->called_as);
    if (!site || !called || !t || site->pid != t->pid || called->pid != t->pid) {
        in->stats.unknown_source++; /* also: a probe id reused since the record was sent */
        return;
    }
    struct np_output *out = in->output_for ? in->output_for(in->ctx, t) : in->out;
    if (!out) {
        in->stats.not_recorded++;
        if (called->def->layout == NP_LAYOUT_NCCL_LAUNCH)
            free(take_nccl_plan(in, e));
        return;
    }
    /* Without a symbolizer (the process exited before we could read its
     * mappings) the launch is still written, with raw addresses. */
    if (!t->sym)
        in->stats.unsymbolized++;
    in->stats.launch_events++;
    count_probe(in, e->called_as);

    struct np_launch l;
    np_launch_decode(e, called->def, &l);
    l.nested = really_nested(in, t, e);
    struct np_nccl_plan *plan =
        called->def->layout == NP_LAYOUT_NCCL_LAUNCH ? take_nccl_plan(in, e) : NULL;
    l.nccl_plan = plan;

    struct np_stack_texts *stack = &in->stack;
    /* Via a thunk, ips[0] is the thunk's target: name the function called
     * (also what names the entry when there is no symbolizer). */
    bool name_entry = (e->flags & NP_LF_VIA_THUNK) || !t->sym;
    np_ingest_build_stack(in, t, e, name_entry ? called->def->symbol : NULL, stack);

    /* an API function libnccl calls itself (2.28's ncclBcast calls
     * ncclBroadcast) is part of the outer call, not an operation of its own */
    if (l.is_nccl_op && called_from_library(t, e, called->lib_index)) {
        in->stats.nccl_internal_calls++;
    } else if (l.is_nccl_op) {
        t->nccl_ops++;
        add_nccl_op(in, called, &l);
        np_output_nccl_op(out, &l, stack);
    } else {
        char buf[600], stub_buf[600];
        const char *kernel = kernel_name(t, &l, buf, sizeof(buf));
        if (l.def->layout == NP_LAYOUT_NCCL_LAUNCH)
            add_nccl_launch(in, called, &l, plan, kernel);
        if (kernel == buf && l.def->layout == NP_LAYOUT_RT_LAUNCH_HANDLE) {
            const char *from_stack =
                kernel_from_stub_frame(np_str_cstr(&stack->folded), stub_buf, sizeof(stub_buf));
            if (from_stack)
                kernel = from_stack;
        }
        if (l.nested)
            t->nested++;
        else
            t->launches++;
        write_launch(in, t, out, &l, kernel);
    }
    free(plan);
}

static void handle_handle(struct np_ingest *in, const struct np_handle_event *h, size_t size) {
    if (size < sizeof(*h)) {
        in->stats.malformed++;
        return;
    }
    const struct np_probe_site *site = np_attacher_site(in->attacher, h->probe_id);
    struct np_target *t = in->find_target(in->ctx, (pid_t)h->hdr.pid);
    if (!site || !t || !t->kernels || site->pid != t->pid) {
        in->stats.unknown_source++;
        return;
    }
    in->stats.handle_events++;
    int err = np_kernel_names_on_handle(t->kernels, t->sym, site->def, h);
    if (err)
        np_warn("pid %d: cannot record kernel handle: %s", t->pid, strerror(-err));
}

static void handle_map(struct np_ingest *in, const struct np_map_event *m, size_t size) {
    if (size < sizeof(*m)) {
        in->stats.malformed++;
        return;
    }
    in->stats.map_events++;
    struct np_target *t = in->find_target(in->ctx, (pid_t)m->hdr.pid);
    if (t && in->on_new_mapping)
        in->on_new_mapping(in->ctx, t, m->hdr.ts_ns);
}

static void dispatch(struct np_ingest *in, void *data, size_t size) {
    const struct np_event_header *h = data;

    if (size < sizeof(*h) || h->version != NP_EVENT_VERSION || h->size > size) {
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
    default:
        in->stats.malformed++;
        break;
    }
}

int np_ingest_record(void *ctx, void *data, size_t size) {
    struct np_ingest *in = ctx;

    if (in->raw_dump) {
        uint32_t n = (uint32_t)size;
        if (fwrite(&n, sizeof(n), 1, in->raw_dump) != 1 ||
            fwrite(data, 1, size, in->raw_dump) != size) {
            np_warn("--raw-dump: write failed, no more records dumped: %s", strerror(errno));
            fclose(in->raw_dump);
            in->raw_dump = NULL;
        }
    }
    dispatch(in, data, size);
    if (in->budget > 0 && --in->budget == 0)
        return NP_INGEST_YIELD;
    return 0;
}
