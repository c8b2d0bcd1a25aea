/* flows.c - writes the --nccl-flows files (see flows.h): one set of files
 * per (process, communicator, rank), opened at its first record. Steps are
 * expanded here: a SaveProxy record (one direction and peer of one op) is
 * nsteps lines of flow_steps, as the NCCL patch wrote them. */
#define _GNU_SOURCE
#include "writers/flows.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/json.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"

#define MAX_SETS 256

struct flow_set {
    uint32_t pid;
    uint64_t comm; /* address: two communicators may share a hash only across processes */
    uint64_t hash;
    int rank;
    bool topology_done;
    char dir[4096];
    FILE *ops, *steps;
    char *meta; /* the first proxy_flow line */
};

struct np_flows_out {
    char root[4096]; /* <recording>/flows */
    bool root_made;
    struct flow_set sets[MAX_SETS];
    size_t nsets;
    struct np_flows_totals totals;
    struct np_str line;
};

int np_flows_out_open(const char *dir, struct np_flows_out **out) {
    struct np_flows_out *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    snprintf(o->root, sizeof(o->root), "%s/flows", dir);
    np_str_init(&o->line);
    *out = o;
    return 0;
}

static int make_dir(const char *path) {
    return mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static FILE *open_in(const char *dir, const char *prefix, int rank, const char *ext) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s%d%s", dir, prefix, rank, ext);
    return fopen(path, "we");
}

static struct flow_set *set_of(struct np_flows_out *o, const struct np_flow_rec *r) {
    for (size_t i = 0; i < o->nsets; i++) {
        struct flow_set *s = &o->sets[i];
        if (s->pid == r->pid && s->comm == r->comm)
            return s;
    }
    if (o->nsets == MAX_SETS || (!o->root_made && make_dir(o->root) < 0))
        return NULL;
    o->root_made = true;
    struct flow_set *s = &o->sets[o->nsets];
    memset(s, 0, sizeof(*s));
    s->pid = r->pid;
    s->comm = r->comm;
    s->hash = r->comm_hash;
    s->rank = r->rank;
    char dir[sizeof(s->dir)];
    snprintf(dir, sizeof(dir), "%.3000s/comm_%016" PRIx64, o->root, r->comm_hash);
    memcpy(s->dir, dir, sizeof(dir));
    if (make_dir(s->dir) < 0)
        return NULL;
    s->ops = open_in(s->dir, "proxy_flow_rank", r->rank, ".jsonl");
    s->steps = open_in(s->dir, "flow_steps_rank", r->rank, ".jsonl");
    if (!s->ops || !s->steps) {
        if (s->ops)
            fclose(s->ops);
        if (s->steps)
            fclose(s->steps);
        return NULL;
    }
    o->nsets++;
    o->totals.sets++;
    return s;
}

/* The keys every line shares: who (comm, rank, nranks, pid), which op, and
 * the launch it went out with (launches.jsonl's launch_id; null: unknown). */
static void common_keys(struct np_str *l, const struct np_flow_rec *r) {
    np_str_appendf(l,
                   "\"opCount\":%" PRIu64 ",\"rank\":%d,\"channel\":%d,\"comm\":\"0x%016" PRIx64
                   "\",\"nranks\":%d,\"pid\":%u,\"" NP_KEY_LAUNCH_ID "\":",
                   r->op_count, r->rank, r->channel, r->comm_hash, r->nranks, r->pid);
    if (r->launch_id)
        np_str_append_u64(l, r->launch_id);
    else
        np_str_append(l, "null");
    np_str_append(l, ",");
}

static void pattern_keys(struct np_str *l, const struct np_flow_rec *r) {
    np_str_appendf(l, "\"pattern\":\"%s\",\"protocol\":\"%s\",\"coll\":", r->pattern, r->protocol);
    if (r->coll)
        np_str_appendf(l, "\"%s\"", r->coll);
    else
        np_str_append(l, "null");
}

static void write_line(struct np_flows_out *o, FILE *f, const struct np_str *l) {
    if (l->failed || fwrite(l->buf, 1, l->len, f) != l->len || fputc('\n', f) == EOF)
        o->totals.write_errors++;
}

static void write_op(struct np_flows_out *o, struct flow_set *s, const struct np_flow_rec *r) {
    struct np_str *l = &o->line;
    np_str_reset(l);
    np_str_append(l, "{");
    common_keys(l, r);
    np_str_appendf(l,
                   "\"nsteps\":%" PRId64 ",\"nbytes\":%" PRId64 ",\"chunkSize\":%" PRId64
                   ",\"sliceSteps\":%" PRId64 ",\"chunkSteps\":%" PRId64 ",\"root\":%" PRId64
                   ",\"nchannels\":%" PRId64 ",",
                   r->nsteps, r->nbytes, r->chunk_size, r->slice_steps, r->chunk_steps, r->root,
                   r->nchannels);
    pattern_keys(l, r);
    np_str_append(l, ",\"algorithm\":");
    if (r->algorithm)
        np_str_appendf(l, "\"%s\"", r->algorithm);
    else
        np_str_append(l, "null");
    np_str_appendf(l, ",\"tid\":%u,\"ts_ns\":%" PRIu64 "}", r->tid, r->ts_ns);
    write_line(o, s->ops, l);
    if (!s->meta && !l->failed)
        s->meta = strdup(l->buf);
    o->totals.ops++;
}

static void write_steps(struct np_flows_out *o, struct flow_set *s, const struct np_flow_rec *r) {
    struct np_str *l = &o->line;
    for (int64_t step = 0; step < r->nsteps; step++) {
        const char *stage = np_flow_stage(r, step);
        np_str_reset(l);
        np_str_append(l, "{");
        common_keys(l, r);
        np_str_appendf(l, "\"step\":%" PRId64 ",\"op\":\"%s\",\"peer\":%d,\"bytes\":%" PRId64 ",",
                       step, r->send ? "SEND" : "RECV", r->peer, r->nbytes);
        pattern_keys(l, r);
        np_str_appendf(l, ",\"conn_index\":%d,\"stage\":", r->conn_index);
        if (stage)
            np_str_appendf(l, "\"%s\"}", stage);
        else
            np_str_append(l, "null}");
        write_line(o, s->steps, l);
        o->totals.steps++;
    }
    o->totals.peers++;
}

void np_flows_out_write(struct np_flows_out *o, const struct np_flow_rec *r) {
    struct flow_set *s = r->comm_known ? set_of(o, r) : NULL;
    if (!s) {
        o->totals.malformed++;
        return;
    }
    if (r->kind == NP_FLOW_EV_OP)
        write_op(o, s, r);
    else
        write_steps(o, s, r);
}

void np_flows_out_malformed(struct np_flows_out *o) {
    o->totals.malformed++;
}

static void append_ints(struct np_str *l, const int *v, int n) {
    np_str_append(l, "[");
    for (int i = 0; i < n; i++)
        np_str_appendf(l, "%s%d", i ? "," : "", v[i]);
    np_str_append(l, "]");
}

void np_flows_out_topology(struct np_flows_out *o, const struct np_flow_rec *r,
                           const struct np_flow_topology *t) {
    struct flow_set *s = r->comm_known ? set_of(o, r) : NULL;
    if (!s || s->topology_done)
        return;
    s->topology_done = true;
    struct np_str *l = &o->line;
    np_str_reset(l);
    np_str_appendf(l,
                   "{\"comm\":\"0x%016" PRIx64 "\",\"rank\":%d,\"nranks\":%d,\"pid\":%u,"
                   "\"nchannels\":%d,\"channels\":[",
                   r->comm_hash, r->rank, r->nranks, r->pid, t->nchannels);
    for (int c = 0; c < t->nchannels; c++) {
        const struct np_flow_channel_topo *ch = &t->ch[c];
        np_str_appendf(l, "%s{\"channel\":%d,\"ring\":{\"prev\":%d,\"next\":%d,\"userRanks\":",
                       c ? "," : "", ch->id, ch->ring_prev, ch->ring_next);
        append_ints(l, ch->user_ranks, ch->nuser);
        np_str_appendf(l, "},\"tree\":{\"up\":%d,\"down\":", ch->tree_up);
        append_ints(l, ch->tree_down, 3);
        np_str_append(l, "}");
        if (ch->has_nvls)
            np_str_appendf(l, ",\"nvls\":{\"out\":%d}", ch->nvls_out);
        if (ch->has_collnet)
            np_str_appendf(l, ",\"collnet\":{\"chainUp\":%d,\"directOut\":%d}",
                           ch->collnet_chain_up, ch->collnet_direct_out);
        np_str_append(l, "}");
    }
    np_str_append(l, "]}");
    char path[4200];
    snprintf(path, sizeof(path), "%s/topology_%016" PRIx64 "_rank%d.json", o->root, r->comm_hash,
             r->rank);
    FILE *f = fopen(path, "we");
    if (!f) {
        o->totals.write_errors++;
        return;
    }
    write_line(o, f, l);
    if (fclose(f) != 0)
        o->totals.write_errors++;
}

/* flow_rank<R>.json: the meta line and every step line, read back from the steps file. */
static int write_rank_json(struct flow_set *s) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/flow_steps_rank%d.jsonl", s->dir, s->rank);
    FILE *in = fopen(path, "re");
    FILE *out = open_in(s->dir, "flow_rank", s->rank, ".json");
    int err = in && out ? 0 : -errno;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool first = true;
    if (!err) {
        fprintf(out, "{\"rank\":%d,\"comm\":\"0x%016" PRIx64 "\",\"meta\":%s,\"steps\":[", s->rank,
                s->hash, s->meta ? s->meta : "null");
        while ((n = getline(&line, &cap, in)) > 0) {
            if (line[n - 1] == '\n')
                line[--n] = '\0';
            fprintf(out, "%s\n%s", first ? "" : ",", line);
            first = false;
        }
        fputs("]}\n", out);
    }
    free(line);
    if (in)
        fclose(in);
    if (out && fclose(out) != 0 && !err)
        err = -EIO;
    return err;
}

void np_flows_out_close(struct np_flows_out *o, struct np_flows_totals *totals) {
    if (!o)
        return;
    for (size_t i = 0; i < o->nsets; i++) {
        struct flow_set *s = &o->sets[i];
        int bad = fclose(s->ops) != 0;
        bad |= fclose(s->steps) != 0;
        if (bad || write_rank_json(s) < 0)
            o->totals.write_errors++;
        free(s->meta);
    }
    if (totals)
        *totals = o->totals;
    np_str_free(&o->line);
    free(o);
}

void np_flows_totals_json(cJSON *o, const struct np_flows_totals *t) {
    np_json_add_u64(o, "ops", t->ops);
    np_json_add_u64(o, "peers", t->peers);
    np_json_add_u64(o, "steps", t->steps);
    np_json_add_u64(o, "file_sets", t->sets);
    np_json_add_u64(o, "malformed", t->malformed);
    np_json_add_u64(o, "write_errors", t->write_errors);
}
