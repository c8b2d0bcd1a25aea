/* flows.c - the session's --nccl-flows part: the flow probes' own BPF
 * object (bpf/nccl_flows.bpf.c), its own ring read on the session's thread
 * (not by the drain thread); each record decoded (ingest/nccl_flows.c) and written
 * (writers/flows.c), a communicator's topology at its first op (kept while
 * its process is traced, for the file sets opened later: the daemon's
 * windows). Nothing of it is loaded without the flag. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attach/nccl_flows_attach.h"
#include "attach/uprobe_multi.h"
#include "ingest/nccl_flows.h"
#include "lib/json.h"
#include "lib/util.h"
#include "nccl_flows.skel.h"
#include "ncclprobe.skel.h"
#include "session/session.h"

/* What the session keeps of a communicator's topology record. */
struct np_flow_topo_kept {
    struct np_flow_rec rec;
    struct np_flow_topology topo;
};

#define MAX_KEPT_TOPOLOGIES 4096 /* as many as BPF sends (its topo_sent map) */

/* Where pid's flow records go now: the sink's choice (the daemon's window
 * sets), or the one recording's. */
static struct np_flows_out *flows_out_for(struct np_session *s, uint32_t pid) {
    if (s->sink && s->sink->flows_for)
        return s->sink->flows_for(s, pid);
    return s->flows_out;
}

static void keep_topology(struct np_session *s, const struct np_flow_rec *r,
                          const struct np_flow_topology *t) {
    struct np_flow_topo_kept *k = NULL;
    for (size_t i = 0; i < s->nflow_topos && !k; i++)
        if (s->flow_topos[i].rec.pid == r->pid && s->flow_topos[i].rec.comm == r->comm)
            k = &s->flow_topos[i]; /* a communicator at a reused address: the new one */
    if (!k && s->nflow_topos < MAX_KEPT_TOPOLOGIES) {
        struct np_flow_topo_kept *grown =
            realloc(s->flow_topos, (s->nflow_topos + 1) * sizeof(*grown));
        if (!grown)
            return;
        s->flow_topos = grown;
        k = &s->flow_topos[s->nflow_topos++];
    }
    if (k) {
        k->rec = *r;
        k->topo = *t;
    }
}

static void on_topology(struct np_session *s, void *data, size_t size) {
    struct np_flow_topology *t = malloc(sizeof(*t));
    struct np_flow_rec r;
    if (!t || np_flow_decode_topology(s->flow_attacher, data, size, &r, t) < 0) {
        if (s->flows_out)
            np_flows_out_malformed(s->flows_out);
        free(t);
        return;
    }
    keep_topology(s, &r, t);
    struct np_flows_out *out = flows_out_for(s, r.pid);
    if (out)
        np_flows_out_topology(out, &r, t);
    free(t);
}

static int on_flow_record(void *ctx, void *data, size_t size) {
    struct np_session *s = ctx;
    struct np_flow_rec r;
    if (size >= sizeof(__u32) && *(const __u32 *)data == NP_FLOW_EV_TOPO) {
        on_topology(s, data, size);
        return 0;
    }
    if (np_flow_decode(s->flow_attacher, data, size, &r) < 0) {
        if (s->flows_out)
            np_flows_out_malformed(s->flows_out);
        return 0;
    }
    struct np_flows_out *out = flows_out_for(s, r.pid);
    if (out) /* else not recorded now (the daemon between windows) */
        np_flows_out_write(out, &r);
    return 0;
}

void np_session_flows_topologies(struct np_session *s, uint32_t pid, struct np_flows_out *out) {
    for (size_t i = 0; i < s->nflow_topos; i++)
        if (s->flow_topos[i].rec.pid == pid)
            np_flows_out_topology(out, &s->flow_topos[i].rec, &s->flow_topos[i].topo);
}

void np_session_flows_forget(struct np_session *s, uint32_t pid) {
    for (size_t i = 0; i < s->nflow_topos;)
        if (s->flow_topos[i].rec.pid == pid)
            s->flow_topos[i] = s->flow_topos[--s->nflow_topos];
        else
            i++;
}

int np_session_setup_flows(struct np_session *s) {
    s->flows_skel = nccl_flows_bpf__open();
    int err = s->flows_skel ? 0 : -errno;
    if (!err && s->attacher.use_multi) { /* the launch probes' kind of link */
        bpf_program__set_expected_attach_type(s->flows_skel->progs.np_flow_save_op,
                                              NP_BPF_TRACE_UPROBE_MULTI);
        bpf_program__set_expected_attach_type(s->flows_skel->progs.np_flow_save_proxy,
                                              NP_BPF_TRACE_UPROBE_MULTI);
        bpf_program__set_expected_attach_type(s->flows_skel->progs.np_flow_upload,
                                              NP_BPF_TRACE_UPROBE_MULTI);
        bpf_program__set_expected_attach_type(s->flows_skel->progs.np_flow_launch,
                                              NP_BPF_TRACE_UPROBE_MULTI);
    }
    /* the launch probes fill plan_launches, the upload probe reads it */
    if (!err)
        err = bpf_map__reuse_fd(s->flows_skel->maps.plan_launches,
                                bpf_map__fd(s->skel->maps.plan_launches));
    if (!err)
        err = nccl_flows_bpf__load(s->flows_skel);
    if (err) {
        np_err("cannot load the NCCL flow probes: %s", strerror(-err));
        return err;
    }
    s->skel->bss->plan_launch_ids = 1;
    s->flow_attacher = malloc(sizeof(*s->flow_attacher));
    if (!s->flow_attacher)
        return -ENOMEM;
    np_flow_attacher_init(s->flow_attacher, s->flows_skel, s->attacher.use_multi);
    s->attacher.flows = s->flow_attacher;
    s->flows_rb =
        ring_buffer__new(bpf_map__fd(s->flows_skel->maps.flow_events), on_flow_record, s, NULL);
    return s->flows_rb ? 0 : -errno;
}

void np_session_read_flows(struct np_session *s) {
    if (!s->flows_rb)
        return;
    int err = ring_buffer__consume(s->flows_rb);
    if (err < 0 && err != -EINTR)
        np_warn("reading the NCCL flow ring buffer: %s", strerror(-err));
}

int np_session_flows_open(struct np_session *s, const char *dir) {
    return np_flows_out_open(dir, &s->flows_out);
}

void np_session_flows_close(struct np_session *s) {
    if (!s->flows_out)
        return;
    np_flows_out_close(s->flows_out, &s->flows_totals);
    s->flows_out = NULL;
}

/* flow_counts[which], summed over CPUs. */
static uint64_t flow_count(struct np_session *s, uint32_t which) {
    int ncpus = libbpf_num_possible_cpus();
    if (!s->flows_skel || ncpus <= 0)
        return 0;
    uint64_t *vals = calloc((size_t)ncpus, sizeof(*vals)), sum = 0;
    if (vals &&
        bpf_map_lookup_elem(bpf_map__fd(s->flows_skel->maps.flow_counts), &which, vals) == 0)
        for (int i = 0; i < ncpus; i++)
            sum += vals[i];
    free(vals);
    return sum;
}

static cJSON *library_json(const struct np_flow_lib *lib) {
    cJSON *o = cJSON_CreateObject();
    np_json_add_u64(o, "pid", (uint64_t)lib->pid);
    np_json_add_text(o, "path", lib->path);
    cJSON_AddBoolToObject(o, "probed", lib->err == 0);
    cJSON_AddBoolToObject(o, "save_proxy_clone", lib->flow->save_proxy_clone);
    cJSON_AddBoolToObject(o, "patterns_from_dwarf", lib->flow->patterns_from_dwarf);
    cJSON_AddBoolToObject(o, "topology_at_first_kernel", lib->err == 0 && lib->launch_err == 0);
    cJSON_AddBoolToObject(o, "launch_ids", lib->err == 0 && lib->upload_err == 0);
    if (lib->err == 0 && lib->upload_err)
        np_json_add_text(o, "launch_ids_missing",
                         lib->upload_err == -ENOENT
                             ? "no uploadProxyOps symbol (inlined in this build): flows carry "
                               "no launch_id"
                             : strerror(-lib->upload_err));
    if (lib->err)
        np_json_add_text(o, "missing",
                         lib->flow->missing[0] ? lib->flow->missing : strerror(-lib->err));
    return o;
}

cJSON *np_session_flows_json(struct np_session *s) {
    if (!s->opt.nccl_flows)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON *libs = cJSON_AddArrayToObject(o, "libraries");
    for (uint32_t i = 1; s->flow_attacher && i < s->flow_attacher->nlibs; i++)
        cJSON_AddItemToArray(libs, library_json(&s->flow_attacher->libs[i]));
    const struct np_flows_totals *t = &s->flows_totals;
    np_json_add_u64(o, "records_sent", flow_count(s, 0));
    np_json_add_u64(o, "records_dropped", flow_count(s, 1));
    np_flows_totals_json(o, t);
    return o;
}

void np_session_flows_free(struct np_session *s) {
    np_session_flows_close(s);
    free(s->flow_topos);
    s->flow_topos = NULL;
    s->nflow_topos = 0;
    if (s->flow_attacher)
        np_flow_attacher_destroy(s->flow_attacher);
    free(s->flow_attacher);
    s->flow_attacher = NULL;
    s->attacher.flows = NULL;
    ring_buffer__free(s->flows_rb);
    s->flows_rb = NULL;
    nccl_flows_bpf__destroy(s->flows_skel);
    s->flows_skel = NULL;
}
