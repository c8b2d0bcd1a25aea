/* sets.c - the daemon's output sets (one per process and window or
 * aggregation period; the files themselves are outset.c's): opened when a
 * process's first record comes, chosen for each record as the session's
 * sink, closed when the window or period ends or the process exits,
 * written once the GPU records of their held launches are in, flushed for
 * `ctl snapshot`, and output_dir's retention. See internal.h. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "daemon/internal.h"
#include "session/target.h"
#include "writers/output.h"

#define SET_RETRY_NS 10000000000ull /* a set that could not be made is tried again then */

void sets_open(struct daemon *d, struct dproc *p) {
    bool window = d->window_open;
    struct np_outset *set = NULL;
    int err = np_outset_open(d->cfg.output_dir, d->host,
                             window ? NP_OUTSET_WINDOW : NP_OUTSET_AGGREGATE, &p->labels,
                             window ? d->window_id : 0, window ? d->window_reason : "aggregate",
                             window ? d->window_start_rt : d->period_start_rt, &set);
    if (err) { /* said once, tried again in 10 s (a full disk, no fds) */
        np_warn("pid %d (%s): cannot create its output set in %s: %s (its records are "
                "dropped for 10 s)",
                p->labels.pid, p->labels.comm, d->cfg.output_dir, strerror(-err));
        p->set_retry_ns = np_monotonic_ns() + SET_RETRY_NS;
        return;
    }
    budget_proc_counters(d, p->labels.pid, &set->drops_at_open, &set->limited_at_open);
    set->next = d->sets;
    d->sets = set;
    p->set = set;
    np_debug("pid %d (%s): output set %s", p->labels.pid, p->labels.comm, set->dir);
}

/* What the process's probes dropped and rate-limited since its set opened;
 * read before its probes are released (their counters go with them). */
void sets_count(struct daemon *d, struct dproc *p) {
    struct np_outset *set = p->set;
    uint64_t drops, limited;
    budget_proc_counters(d, p->labels.pid, &drops, &limited);
    set->drops = drops > set->drops_at_open ? drops - set->drops_at_open : 0;
    set->rate_limited = limited > set->limited_at_open ? limited - set->limited_at_open : 0;
}

void sets_close(struct daemon *d, struct dproc *p) {
    struct np_outset *set = p->set;
    if (!set)
        return;
    if (!p->exited) /* an exited process's counts were taken before its probes went */
        sets_count(d, p);
    p->set = NULL;
    set->closing = true;
    set->end_realtime_ns = np_realtime_ns();
}

static void each_proc(struct daemon *d, void (*fn)(struct daemon *, struct dproc *)) {
    for (size_t i = 0; i < d->procs.cap; i++)
        if (d->procs.slots[i].used)
            fn(d, d->procs.slots[i].value);
}

static void reopen(struct daemon *d, struct dproc *p) {
    sets_close(d, p);
    if (!p->exited && d->window_open)
        sets_open(d, p);
}

void sets_reopen_all(struct daemon *d) {
    each_proc(d, reopen);
}

void sets_close_all(struct daemon *d) {
    each_proc(d, sets_close);
}

static void finish_set(struct daemon *d, struct np_outset *set) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", set->dir);
    uint64_t launches = 0;
    int err = np_outset_finish(set, &launches);
    d->sets_written++;
    if (err) {
        np_warn("output set %s: %s", dir, strerror(-err));
        return;
    }
    np_info("wrote %s (%" PRIu64 " launches)", dir, launches);
    converters_add(d, dir);
}

void sets_finish_closing(struct daemon *d, bool all) {
    struct np_outset **link = &d->sets;
    bool wrote = false;
    while (*link) {
        struct np_outset *set = *link;
        if (!set->closing || (set->held && !all)) {
            link = &set->next;
            continue;
        }
        *link = set->next;
        finish_set(d, set);
        wrote = true;
    }
    if (wrote)
        d->last_retain_ns = 0; /* retention runs on the next tick */
}

/* "sets": the directories of the sets that are (closing) or are not. */
static void dirs_json(const struct daemon *d, cJSON *reply, bool closing) {
    cJSON *sets = cJSON_AddArrayToObject(reply, "sets");
    for (struct np_outset *s = d->sets; s; s = s->next)
        if (s->closing == closing)
            cJSON_AddItemToArray(sets, cJSON_CreateString(s->dir));
}

void sets_flush(struct daemon *d, cJSON *reply) {
    for (struct np_outset *s = d->sets; s; s = s->next)
        if (!s->closing)
            np_output_flush(s->out);
    if (reply)
        dirs_json(d, reply, false);
}

void sets_closing_json(const struct daemon *d, cJSON *reply) {
    dirs_json(d, reply, true);
}

void sets_retain(struct daemon *d) {
    struct np_retention r;
    int err = np_outset_retain(d->cfg.output_dir, d->cfg.max_output_bytes,
                               ms_to_ns(d->cfg.max_output_age_ms), d->sets, &r);
    if (err) {
        np_warn("retention of %s: %s", d->cfg.output_dir, strerror(-err));
        return;
    }
    d->retention = r;
    d->deleted_sets += r.deleted_sets;
    if (r.deleted_sets)
        np_info("retention: deleted the %" PRIu64 " oldest output sets (%" PRIu64 " MiB kept)",
                r.deleted_sets, r.bytes >> 20);
}

/* ---- the session's sink --------------------------------------------------- */

static struct daemon *daemon_of(struct np_session *s) {
    return np_container_of(s, struct daemon, s);
}

/* The set writing to out (open or closing). */
static struct np_outset *set_of_output(struct daemon *d, const struct np_output *out) {
    for (struct np_outset *s = d->sets; s; s = s->next)
        if (s->out == out)
            return s;
    return NULL;
}

/* A launch of out waits for its GPU records. */
static void on_held(struct np_session *s, struct np_output *out) {
    struct np_outset *set = set_of_output(daemon_of(s), out);
    if (set)
        set->held++;
}

/* A held launch was written (its GPU records came, or not). */
static void on_retired(struct np_session *s, struct np_output *out) {
    struct np_outset *set = set_of_output(daemon_of(s), out);
    if (set && set->held)
        set->held--;
}

/* Where a process's records go now. */
static struct np_output *output_for(struct np_session *s, struct np_target *t) {
    struct daemon *d = daemon_of(s);
    struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)t->proc.pid);
    if (!p)
        return NULL;
    if (!p->set && (d->window_open || d->cfg.aggregate) && !p->exited &&
        np_monotonic_ns() >= p->set_retry_ns)
        sets_open(d, p);
    return p->set ? p->set->out : NULL;
}

/* nccl_flows: a process's flow records go to its capture window's set
 * (aggregate sets hold no per-event data), opened at the first one with the
 * topologies of its communicators so far. */
static struct np_flows_out *flows_for(struct np_session *s, uint32_t pid) {
    struct daemon *d = daemon_of(s);
    struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)pid);
    struct np_outset *set = p ? p->set : NULL;
    if (!set || set->kind != NP_OUTSET_WINDOW)
        return NULL;
    if (!set->flows) {
        int err = np_flows_out_open(set->dir, &set->flows);
        if (err) {
            np_warn("output set %s: cannot write its NCCL flows: %s", set->dir, strerror(-err));
            return NULL;
        }
        np_session_flows_topologies(s, pid, set->flows);
    }
    return set->flows;
}

const struct np_sink_ops sets_sink_ops = {
    .output_for = output_for,
    .held = on_held,
    .retired = on_retired,
    .launched = metrics_launched,
    .gpu_retired = metrics_gpu_retired,
    .flows_for = flows_for,
};
