/* status.c - the daemon's answer to `ctl status`: every field of
 * status_schema.h filled from the daemon's state, and the launch and
 * record rates it reports (measured once a second). See internal.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/internal.h"
#include "daemon/status_schema.h"
#include "session/target.h"

void status_update_rates(struct daemon *d) {
    uint64_t launches = 0;
    for (size_t i = 0; i < d->s.ntargets; i++) {
        struct np_target *t = d->s.targets[i];
        struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)t->proc.pid);
        launches += t->launches;
        if (p) {
            p->launches_per_s = (double)(t->launches - p->launches_prev);
            p->launches_prev = t->launches;
        }
    }
    uint64_t records = np_session_records_received(&d->s);
    d->launches_per_s =
        launches >= d->launches_prev_total ? (double)(launches - d->launches_prev_total) : 0;
    d->records_per_s = (double)(records - d->records_prev_total);
    d->launches_prev_total = launches;
    d->records_prev_total = records;
}

static const char *gpu_state(const struct np_target *t) {
    if (t->gpu_hello)
        return t->gpu_off ? "off" : "active";
    if (t->agent.requested && !t->agent.done)
        return "injecting";
    return t->proc.gpu_marker ? "waiting for hello" : "no CUPTI library";
}

/* "13.2 (API 130202) /path/libcupti.so.13": the CUPTI its library uses. */
static void cupti_library(const struct np_target *t, char *out, size_t size) {
    const struct np_wire_cupti *c = &t->gpu_cupti;
    out[0] = '\0';
    if (t->gpu_cupti_known)
        snprintf(out, size, "%s%s (API %u) %s", c->cuda[0] ? c->cuda : "?",
                 c->support == NP_CUPTI_ASSUMED ? " assumed" : "", c->api_version, c->path);
}

static void target_json(const struct daemon *d, const struct np_target *t, const struct dproc *p,
                        cJSON *o) {
    uint64_t drops, limited;
    budget_proc_counters(d, t->proc.pid, &drops, &limited);
    np_status_add_number(o, NP_ST_TARGET_PID, t->proc.pid);
    np_status_add_number(o, NP_ST_TARGET_NS_PID, p->labels.ns_pid);
    np_status_add_string(o, NP_ST_TARGET_COMM, p->labels.comm);
    np_status_add_string(o, NP_ST_TARGET_EXE, p->labels.exe);
    np_status_add_string(o, NP_ST_TARGET_CONTAINER, p->labels.container);
    np_status_add_string(o, NP_ST_TARGET_CGROUP, p->labels.cgroup);
    np_status_add_number(o, NP_ST_TARGET_PROBES, np_process_probe_count(&t->proc));
    np_status_add_number(o, NP_ST_TARGET_LIBRARIES, np_process_cuda_library_count(&t->proc));
    np_status_add_number(o, NP_ST_TARGET_LAUNCHES, (double)t->launches);
    np_status_add_number(o, NP_ST_TARGET_LAUNCHES_PER_S, p->launches_per_s);
    np_status_add_number(o, NP_ST_TARGET_DROPS, (double)drops);
    np_status_add_number(o, NP_ST_TARGET_RATE_LIMITED, (double)limited);
    np_status_add_string(o, NP_ST_TARGET_GPU, gpu_state(t));
    np_status_add_string(o, NP_ST_TARGET_CUPTI_ORIGIN, np_agent_origin_name(t->agent.origin));
    np_status_add_string(o, NP_ST_TARGET_CUPTI_WHY, t->agent.err ? t->agent.why : "");
    char library[400];
    cupti_library(t, library, sizeof(library));
    np_status_add_string(o, NP_ST_TARGET_CUPTI_LIBRARY, library);
    np_status_add_string(o, NP_ST_TARGET_OUTPUT, p->set ? p->set->dir : NULL);
    np_status_add_bool(o, NP_ST_TARGET_EXITED, p->exited);
}

/* targets[], and every target's probes counted in "probes". */
static void targets_json(const struct daemon *d, cJSON *r) {
    cJSON *targets = np_status_add_object(r, NP_ST_TARGETS);
    uint64_t attached = 0, failed = 0;
    for (size_t i = 0; i < d->s.ntargets; i++) {
        const struct np_target *t = d->s.targets[i];
        const struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)t->proc.pid);
        cJSON *o = p ? cJSON_CreateObject() : NULL;
        if (!o || !cJSON_AddItemToArray(targets, o)) {
            cJSON_Delete(o);
            continue;
        }
        target_json(d, t, p, o);
        for (size_t j = 0; j < t->proc.nlibs; j++) {
            attached += (uint64_t)t->proc.libs[j].probes_ok;
            failed += (uint64_t)t->proc.libs[j].probes_failed;
        }
    }
    cJSON *probes = np_status_add_object(r, NP_ST_PROBES);
    np_status_add_number(probes, NP_ST_PROBES_ATTACHED, (double)attached);
    np_status_add_number(probes, NP_ST_PROBES_FAILED, (double)failed);
}

static void daemon_json(const struct daemon *d, cJSON *r) {
    char when[32];
    np_status_add_string(r, NP_ST_VERSION, NCCLPROBE_VERSION);
    np_status_add_number(r, NP_ST_PID, getpid());
    np_status_add_number(r, NP_ST_UPTIME_S, (double)(np_monotonic_ns() - d->start_mono) / 1e9);
    np_status_add_string(r, NP_ST_CONFIG, d->config_path);
    np_status_add_string(r, NP_ST_OUTPUT_DIR, d->cfg.output_dir);
    windows_json(d, r);
    cJSON *agg = np_status_add_object(r, NP_ST_AGGREGATE);
    np_status_add_bool(agg, NP_ST_AGGREGATE_ON, d->cfg.aggregate);
    np_status_add_number(agg, NP_ST_AGGREGATE_INTERVAL_S,
                         (double)d->cfg.aggregate_interval_ms / 1e3);
    np_format_utc(when, sizeof(when), d->period_start_rt, false);
    np_status_add_string(agg, NP_ST_AGGREGATE_PERIOD_STARTED, when);
}

static void load_json(struct daemon *d, cJSON *r) {
    cJSON *rates = np_status_add_object(r, NP_ST_RATES);
    np_status_add_number(rates, NP_ST_RATES_LAUNCHES_PER_S, d->launches_per_s);
    np_status_add_number(rates, NP_ST_RATES_RECORDS_PER_S, d->records_per_s);
    struct np_backlog *b = &d->s.ingest.backlog;
    np_status_add_number(rates, NP_ST_RATES_BACKLOG,
                         d->s.ingest.queue ? (double)np_backlog_waiting(b) : 0);
    cJSON *drops = np_status_add_object(r, NP_ST_DROPS);
    np_status_add_number(drops, NP_ST_DROPS_RING_BUFFER,
                         (double)np_session_counter(&d->s, NP_CNT_LAUNCH_DROPPED));
    np_status_add_number(drops, NP_ST_DROPS_BACKLOG,
                         d->s.ingest.queue ? (double)np_backlog_dropped_launches(b) : 0);
    np_status_add_number(drops, NP_ST_DROPS_RATE_LIMITED,
                         (double)np_session_counter(&d->s, NP_CNT_RATE_LIMITED));
    cJSON *rl = np_status_add_object(r, NP_ST_RATE_LIMIT);
    np_status_add_bool(rl, NP_ST_RATE_LIMIT_ACTIVE, d->limit_active);
    np_status_add_number(rl, NP_ST_RATE_LIMIT_PER_PROBE_PER_S, (double)d->cfg.rate_limit);
    np_status_add_number(rl, NP_ST_RATE_LIMIT_CPU_PERCENT, d->cpu_percent);
    np_status_add_number(rl, NP_ST_RATE_LIMIT_BUDGET_PERCENT, d->cfg.cpu_budget_percent);
    np_status_add_number(rl, NP_ST_RATE_LIMIT_ACTIVATIONS, (double)d->limit_activations);
    np_status_add_number(rl, NP_ST_RATE_LIMIT_READER_THREADS,
                         (double)np_ingest_workers(&d->s.ingest));
}

static void cupti_json(const struct daemon *d, cJSON *r) {
    size_t peers = 0;
    for (size_t i = 0; i < d->s.ntargets; i++)
        peers += d->s.targets[i]->gpu_hello && !d->s.targets[i]->gpu_off;
    cJSON *cupti = np_status_add_object(r, NP_ST_CUPTI);
    np_status_add_string(cupti, NP_ST_CUPTI_SOCKET, d->s.gpu_server ? d->cfg.cupti_socket : NULL);
    np_status_add_number(cupti, NP_ST_CUPTI_PEERS, (double)peers);
}

static void resources_json(const struct daemon *d, cJSON *r) {
    cJSON *disk = np_status_add_object(r, NP_ST_DISK);
    np_status_add_number(disk, NP_ST_DISK_BYTES, (double)d->retention.bytes);
    np_status_add_number(disk, NP_ST_DISK_SETS, (double)d->retention.sets);
    np_status_add_number(disk, NP_ST_DISK_MAX_BYTES, (double)d->cfg.max_output_bytes);
    np_status_add_number(disk, NP_ST_DISK_DELETED_SETS, (double)d->deleted_sets);
    np_status_add_number(disk, NP_ST_DISK_SETS_WRITTEN, (double)d->sets_written);
    cJSON *mem = np_status_add_object(r, NP_ST_MEMORY);
    np_status_add_number(mem, NP_ST_MEMORY_RSS_BYTES, (double)np_self_rss_bytes());
    np_status_add_number(mem, NP_ST_MEMORY_CACHE_BYTES, (double)budget_cache_bytes(d));
    np_status_add_number(mem, NP_ST_MEMORY_CACHE_MAX_BYTES, (double)d->cfg.cache_bytes);
    np_status_add_number(mem, NP_ST_MEMORY_CACHE_RESETS, (double)d->cache_resets);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_delay(const struct daemon *d) {
    size_t n = d->ndelays < NDELAYS ? d->ndelays : NDELAYS;
    double sorted[NDELAYS];
    memcpy(sorted, d->delays_ms, n * sizeof(double));
    qsort(sorted, n, sizeof(double), cmp_double);
    return n ? sorted[n / 2] : 0;
}

static void discovery_json(const struct daemon *d, cJSON *r) {
    cJSON *disc = np_status_add_object(r, NP_ST_DISCOVERY);
    np_status_add_number(disc, NP_ST_DISCOVERY_DELAY_MS_P50, median_delay(d));
    np_status_add_number(disc, NP_ST_DISCOVERY_DELAY_MS_MAX, d->delay_max_ms);
    np_status_add_number(disc, NP_ST_DISCOVERY_DELAYS_MEASURED, (double)d->ndelays);
    np_status_add_number(disc, NP_ST_DISCOVERY_ATTACHED, (double)d->attached);
    np_status_add_number(disc, NP_ST_DISCOVERY_DETACHED, (double)d->detached);
    np_status_add_number(disc, NP_ST_DISCOVERY_SKIPPED_BY_FILTER, (double)d->skipped_by_filter);
    np_status_add_number(disc, NP_ST_DISCOVERY_SKIPPED_PTRACED, (double)d->skipped_ptraced);
    np_status_add_number(disc, NP_ST_DISCOVERY_MISSED_EXITED, (double)d->missed);
    np_status_add_number(disc, NP_ST_DISCOVERY_LOST_NOTIFICATIONS,
                         (double)np_discover_lost(d->disc));
    np_status_add_string(disc, NP_ST_DISCOVERY_MODE, np_discover_mode(d->disc));
}

void status_json(struct daemon *d, cJSON *reply) {
    daemon_json(d, reply);
    targets_json(d, reply);
    load_json(d, reply);
    cupti_json(d, reply);
    resources_json(d, reply);
    discovery_json(d, reply);
}
