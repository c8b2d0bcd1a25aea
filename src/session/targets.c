/* targets.c - the processes a session traces: adding one (identity,
 * pidfd, kernel-name table), its symbolizer and unwinder, handing a CPython
 * process's layout to the BPF frame walker, probing what it maps later, its
 * exit (see session.h), and its entry in summary.json (target.h). */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "correlate/kernels.h"
#include "lib/json.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"
#include "session/session.h"
#include "session/target.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"

struct np_target *np_session_find_target(struct np_session *s, pid_t pid) {
    for (size_t i = 0; i < s->ntargets; i++)
        if (s->targets[i]->proc.pid == pid)
            return s->targets[i];
    return NULL;
}

int np_session_add_target(struct np_session *s, pid_t pid, struct np_target **out) {
    struct np_target *t = NULL;
    int err = np_target_new(pid, &t);
    if (err)
        return err;
    struct np_target **targets = realloc(s->targets, (s->ntargets + 1) * sizeof(*targets));
    if (!targets) {
        np_target_free(t);
        return -ENOMEM;
    }
    s->targets = targets;
    t->kernels = np_kernel_names_new();
    err = t->kernels ? 0 : -ENOMEM;
    if (!err && t->pidfd >= 0)
        err = np_session_watch(s->epfd, t->pidfd, NP_TAG_TARGET + (uint64_t)pid);
    if (err) {
        np_target_free(t);
        return err;
    }
    s->targets[s->ntargets++] = t;
    *out = t;
    return 0;
}

/* The symbolizer (and the unwinder that uses its modules) of a target,
 * refreshed now - while the process surely lives - when it exists. */
int np_session_ensure_symbolizer(struct np_target *t) {
    if (t->in.sym)
        return np_symbolizer_refresh(t->in.sym);
    int err = np_symbolizer_new(t->proc.pid, &t->in.sym);
    if (!err && !(t->in.unwinder = np_unwinder_new(t->in.sym)))
        err = -ENOMEM;
    return err;
}

/* Hands a Python target's layout to the BPF frame walker and creates the
 * reader of its code objects; once per process, after the runtime is found. */
static void enable_python(struct np_session *s, struct np_target *t) {
    if (!t->proc.python.found || t->python_walked || s->opt.python == NP_PYTHON_OFF)
        return;
    const struct np_python_layout *l = &t->proc.python.layout;
    if (!l->walkable) {
        if (!t->python_refused)
            np_warn("pid %d (%s): %s", t->proc.pid, t->comm, l->why_not);
        t->python_refused = true;
        return;
    }
    struct np_py_cfg cfg = l->bpf;
    cfg.max_frames = (__u32)s->opt.python_depth;
    cfg.hold = t->proc.hold_loads;
    __u32 key = (__u32)t->proc.pid;
    int err =
        bpf_map__update_elem(s->skel->maps.py_procs, &key, sizeof(key), &cfg, sizeof(cfg), BPF_ANY);
    /* BPF threads that found no entry look again */
    __atomic_fetch_add(&s->skel->bss->py_gen, 1, __ATOMIC_RELEASE);
    if (!err && !(t->in.pycode = np_pycode_new(t->proc.pid, l)))
        err = -ENOMEM;
    if (err) {
        np_warn("pid %d (%s): no Python frames: %s", t->proc.pid, t->comm, strerror(-err));
        return;
    }
    t->python_walked = true;
    np_info("pid %d (%s): Python %u.%u frames (offsets from %s)", t->proc.pid, t->comm,
            t->proc.python.major, t->proc.python.minor,
            l->from_debug_offsets ? "its _Py_DebugOffsets" : "the built-in table");
}

/* Without it, a code object freed and another made at its address, in the
 * same stack shape, would go on being named by the first (docs/design.md). */
static void probe_python_code_frees(struct np_session *s, struct np_target *t) {
    if (!t->python_walked)
        return;
    int err = np_attach_python_code_free(&s->attacher, &t->proc);
    if (err < 0 && err != -ESRCH)
        np_warn("pid %d (%s): CPython's code-object deallocator not probed (%s): code made and "
                "freed at run time (exec, eval) may be named by an earlier one at its address",
                t->proc.pid, t->comm, strerror(-err));
}

/* A libcudart of a major the probes were not checked against: the probes
 * attach by name and the launch arguments are read as CUDA 13's, which may
 * be wrong - said once per session and major, and in summary.json. */
static void say_untested_runtimes(struct np_session *s, const struct np_target *t) {
    for (size_t i = 0; i < t->proc.nlibs; i++) {
        int major = t->proc.libs[i].cudart_major;
        if (!major || (major >= NP_CUDART_TESTED_MIN && major <= NP_CUDART_TESTED_MAX))
            continue;
        uint64_t bit = 1ull << (major & 63);
        if (s->cudart_majors_said & bit)
            continue;
        s->cudart_majors_said |= bit;
        np_warn("pid %d (%s): %s is CUDA %d's runtime; ncclprobe was tested with CUDA %d-%d "
                "(docs/compatibility.md): its launches are probed by name and their arguments "
                "read as CUDA %d's",
                t->proc.pid, t->comm, t->proc.libs[i].path, major, NP_CUDART_TESTED_MIN,
                NP_CUDART_TESTED_MAX, NP_CUDART_TESTED_MAX);
    }
}

void np_session_find_python(struct np_session *s, struct np_target *t) {
    np_process_detect_python(&t->proc);
    enable_python(s, t);
}

void np_session_probes_placed(struct np_session *s, struct np_target *t) {
    say_untested_runtimes(s, t);
    probe_python_code_frees(s, t);
}

/* A target mapped new code: refresh its symbols and probe what is new. */
void np_session_on_new_mapping(struct np_session *s, struct np_target *t, uint64_t ts_ns) {
    if (t->exited)
        return;
    /* Probes first: the program runs on while we work, and its first
     * launch may come within milliseconds of the dlopen (the CUPTI library
     * the daemon injects: its marker's). The Python runtime of a process
     * found running was looked for before its first probes; here it is
     * looked for once more (a no-op once found), for a runtime that comes
     * with this library. Symbols after: records are read in order, so the
     * refresh still comes before the records that need it. */
    int n = np_attach_from_maps(&s->attacher, &t->proc, ts_ns);
    if (!t->in.sym) /* the first load of a -- CMD child: it has exec'd since we forked it */
        np_target_refresh_identity(t);
    np_session_find_python(s, t);
    np_session_probes_placed(s, t);
    np_session_ensure_symbolizer(t);
    np_ingest_proc_forget_stacks(&t->in); /* addresses may name other functions now */
    if (t->proc.hold_loads)
        np_continue_stopped(t->proc.pid, 20); /* held at the load by BPF: probes are in place */
    if (n > 0)
        np_info("pid %d (%s): %d more probes attached after a library was loaded", t->proc.pid,
                t->comm, n);
    else if (n < 0 && n != -ESRCH)
        np_warn("pid %d: cannot attach to new libraries: %s", t->proc.pid, strerror(-n));
}

bool np_session_all_targets_gone(const struct np_session *s) {
    for (size_t i = 0; i < s->ntargets; i++)
        if (!s->targets[i]->exited)
            return false;
    return s->ntargets > 0;
}

void np_session_target_exited(struct np_session *s, struct np_target *t) {
    if (t->exited)
        return;
    t->exited = true;
    if (t->pidfd >= 0)
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, t->pidfd, NULL);
    if (t->python_walked) { /* the pid may be reused by a process that is not this one */
        __u32 key = (__u32)t->proc.pid;
        bpf_map__delete_elem(s->skel->maps.py_procs, &key, sizeof(key), 0);
        __atomic_fetch_add(&s->skel->bss->py_gen, 1, __ATOMIC_RELEASE);
    }
    if (t->graphs.stats.captures) { /* a capture it left open must not outlive it */
        __u32 key = (__u32)t->proc.pid;
        bpf_map__delete_elem(s->skel->maps.active_captures, &key, sizeof(key), 0);
    }
    np_debug("process %d (%s) exited", t->proc.pid, t->comm);
}

void np_session_remove_target(struct np_session *s, struct np_target *t) {
    for (size_t i = 0; i < s->ntargets; i++) {
        if (s->targets[i] != t)
            continue;
        np_session_target_exited(s, t);
        np_session_flows_forget(s, (uint32_t)t->proc.pid);
        np_target_free(t);
        s->targets[i] = s->targets[--s->ntargets];
        return;
    }
}

/* summary.json's targets[].cupti.library: the libcupti the process's CUPTI
 * library loaded (and why that one), its version, whose record layouts it
 * reads ("known": that version's, "assumed": an older one's, "unsupported",
 * "not_asked": no CUDA driver, so CUPTI was not called, "not_loaded") and
 * what it cannot do with it. */
static void cupti_library_json(const struct np_target *t, cJSON *g) {
    static const char *const support[] = {"known", "assumed", "unsupported", "not_asked",
                                          "not_loaded"};
    static const char *const records[NP_CUPTI_RECORDS] = {"kernel", "memcpy", "memset", "api"};
    const struct np_wire_cupti *c = &t->gpu_cupti;
    if (!t->gpu_cupti_known)
        return;
    cJSON *o = cJSON_AddObjectToObject(g, "library");
    np_json_add_text(o, "path", c->path);
    np_json_add_text(o, "chosen_by", c->chosen_by);
    np_json_add_u64(o, "api_version", c->api_version);
    np_json_add_u64(o, "driver_version", (uint64_t)(c->driver_version > 0 ? c->driver_version : 0));
    np_json_add_text(o, "layouts", c->support < 5 ? support[c->support] : "unknown");
    np_json_add_text(o, "layouts_from", c->cuda);
    cJSON *recs = cJSON_AddObjectToObject(o, "records");
    for (int r = 0; c->layouts_version && r < NP_CUPTI_RECORDS; r++) {
        cJSON *rj = cJSON_AddObjectToObject(recs, records[r]);
        np_json_add_text(rj, "type", c->record_type[r]);
        np_json_add_u64(rj, "bytes", c->record_size[r]);
        cJSON_AddBoolToObject(rj, "size_from_cupti", (c->size_confirmed >> r) & 1);
    }
    cJSON *lost = cJSON_AddArrayToObject(o, "degraded");
    char lines[sizeof(c->degraded)];
    snprintf(lines, sizeof(lines), "%s", c->degraded);
    for (char *save = NULL, *line = strtok_r(lines, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save))
        cJSON_AddItemToArray(lost, cJSON_CreateString(line));
}

/* summary.json's targets[].cupti: the process's CUPTI library - how it came
 * (start, injected, woken), what it said, and what it counted. */
static void cupti_json(const struct np_target *t, cJSON *g) {
    static const char *const states[] = {"active", "cupti_busy", "cupti_failed", "no_cuda_driver",
                                         "cupti_unsupported"};
    const struct np_agent_state *a = &t->agent;
    const char *status = t->gpu_hello             ? states[t->gpu_status < 5 ? t->gpu_status : 2]
                         : t->proc.gpu_marker     ? "no_connection"
                         : a->requested && a->err ? "not_loaded"
                                                  : "loading";
    np_json_add_text(g, "status", status);
    np_json_add_text(g, "message", t->gpu_message[0] ? t->gpu_message : a->why);
    np_json_add_text(g, "origin", np_agent_origin_name(a->origin));
    if (a->origin == NP_AGENT_INJECTED || a->origin == NP_AGENT_WOKEN) {
        np_json_add_u64(g, "injected_at_unix_ns", a->at_realtime_ns);
        cJSON_AddNumberToObject(g, "pause_ms", (double)a->pause_ns / 1e6);
        cJSON_AddNumberToObject(g, "injection_ms", (double)a->took_ns / 1e6);
    }
    cJSON_AddNumberToObject(g, "clock_offset_ns", (double)t->gpu_clock_offset_ns);
    const struct np_wire_stats *st = &t->gpu_stats;
    np_json_add_u64(g, "records_sent", st->records_sent);
    np_json_add_u64(g, "dropped_by_cupti", st->dropped_by_cupti);
    np_json_add_u64(g, "dropped_queue_full", st->dropped_queue_full);
    np_json_add_u64(g, "dropped_no_daemon", st->dropped_no_daemon);
    np_json_add_u64(g, "dropped_no_buffer", st->dropped_no_buffer);
    np_json_add_u64(g, "records_unknown", st->records_unknown);
    cupti_library_json(t, g);
}

/* What stream capture made in the process, and what its replays counted. */
static void graphs_json(const struct np_target *t, cJSON *g) {
    const struct np_graph_stats *st = &t->graphs.stats;
    np_json_add_u64(g, "captures", st->captures);
    np_json_add_u64(g, "captures_failed", st->captures_failed);
    np_json_add_u64(g, "captures_not_kept", st->captures_dropped);
    np_json_add_u64(g, "captured_launches", st->captured_launches);
    np_json_add_u64(g, "instantiations", st->instantiations);
    np_json_add_u64(g, "exec_updates", st->updates);
    np_json_add_u64(g, "graphs_destroyed", st->graphs_destroyed);
    np_json_add_u64(g, "execs_destroyed", st->execs_destroyed);
    np_json_add_u64(g, "graph_launches", st->replays);
    np_json_add_u64(g, "graph_launches_attributed", st->replays_expanded);
    np_json_add_u64(g, "graph_launches_capture_unseen", st->replays_unknown);
    np_json_add_u64(g, "replayed_kernels", st->replayed_kernels);
    /* with the CUPTI library: replays' GPU records and how each was tied */
    np_json_add_u64(g, "cupti_nodes", st->cupti_nodes);
    np_json_add_u64(g, "cupti_nodes_not_kept", st->cupti_nodes_dropped);
    np_json_add_u64(g, "replay_records_by_node", st->records_by_node);
    np_json_add_u64(g, "replay_records_by_kernel_order", st->records_by_order);
    np_json_add_u64(g, "replay_records_not_tied", st->records_unattributed);
    np_json_add_u64(g, "graphs_live", t->graphs.graphs.count);
    np_json_add_u64(g, "execs_live", t->graphs.execs.count + t->graphs.unseen_execs.count);
    np_json_add_u64(g, "nodes_live", t->graphs.nodes_live);
    np_json_add_u64(g, "node_bytes", t->graphs.node_bytes);
    np_json_add_u64(g, "capture_stack_bytes", t->graphs.stack_bytes);
}

/* summary.json's targets[] entry of a process: identity, counts, its
 * CPython runtime, its CUPTI library's state and its probed libraries. */
cJSON *np_target_json(const struct np_target *t) {
    cJSON *o = cJSON_CreateObject();
    np_json_add_u64(o, "pid", (uint64_t)t->proc.pid);
    np_json_add_text(o, "comm", t->comm);
    np_json_add_text(o, "exe", t->exe);
    cJSON_AddBoolToObject(o, "exited", t->exited);
    np_json_add_u64(o, "launches", t->launches);
    np_json_add_u64(o, "nested_launches", t->nested);
    np_json_add_u64(o, "nccl_ops", t->nccl_ops);
    if (t->proc.python.found) {
        cJSON *py = cJSON_AddObjectToObject(o, "python");
        char text[64];
        snprintf(text, sizeof(text), "%u.%u.%u", t->proc.python.major, t->proc.python.minor,
                 t->proc.python.micro);
        np_json_add_text(py, "version", t->proc.python.version_hex ? text : "");
        snprintf(text, sizeof(text), "%u.%u", t->proc.python.major, t->proc.python.minor);
        np_json_add_text(py, "minor_version", text);
        np_json_add_text(py, "runtime_file", t->proc.python.path);
        cJSON_AddBoolToObject(py, "shared", t->proc.python.shared);
        cJSON_AddBoolToObject(py, "free_threaded", t->proc.python.free_threaded);
        snprintf(text, sizeof(text), "0x%" PRIx64, t->proc.python.runtime_addr);
        np_json_add_text(py, "runtime_address", text);
        /* "walked", "off" (--python off) or why they cannot be */
        np_json_add_text(py, "frames",
                         t->python_walked                   ? "walked"
                         : t->proc.python.layout.why_not[0] ? t->proc.python.layout.why_not
                                                            : "off");
        np_json_add_text(py, "offsets_from",
                         t->proc.python.layout.from_debug_offsets ? "_Py_DebugOffsets" : "table");
    }
    if (t->proc.gpu_marker || t->agent.requested)
        cupti_json(t, cJSON_AddObjectToObject(o, "cupti"));
    if (t->graphs.stats.captures || t->graphs.stats.replays)
        graphs_json(t, cJSON_AddObjectToObject(o, "graphs"));
    cJSON *libs = cJSON_AddArrayToObject(o, "libraries");
    for (size_t i = 0; i < t->proc.nlibs; i++) {
        const struct np_library *l = &t->proc.libs[i];
        cJSON *lj = cJSON_CreateObject();
        np_json_add_text(lj, "path", l->path);
        np_json_add_text(lj, "build_id", l->build_id);
        np_json_add_u64(lj, "probes_attached", (uint64_t)l->probes_ok);
        np_json_add_u64(lj, "probes_failed", (uint64_t)l->probes_failed);
        if (l->first_error)
            np_json_add_text(lj, "error", strerror(-l->first_error));
        cJSON_AddBoolToObject(lj, "loaded_after_attach", l->late);
        cJSON_AddBoolToObject(lj, "cuda", l->cuda);
        if (l->cudart_major) {
            cJSON *rt = cJSON_AddObjectToObject(lj, "cuda_runtime");
            np_json_add_u64(rt, "major", (uint64_t)l->cudart_major);
            cJSON_AddBoolToObject(rt, "tested",
                                  l->cudart_major >= NP_CUDART_TESTED_MIN &&
                                      l->cudart_major <= NP_CUDART_TESTED_MAX);
        }
        if (l->late && l->attached_ns >= l->seen_ns)
            cJSON_AddNumberToObject(lj, "attach_latency_ms",
                                    (double)(l->attached_ns - l->seen_ns) / 1e6);
        cJSON_AddItemToArray(libs, lj);
    }
    return o;
}
