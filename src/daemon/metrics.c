/* metrics.c - what the daemon's HTTP endpoints serve (docs/daemon.md,
 * "HTTP"), kept by the tracing loop and handed to the HTTP threads through
 * http/feed.h, never waiting on them:
 *   - per traced process: launches by API, launches and GPU time by kernel
 *     (its first NP_METRICS_KERNELS kernels get a series each, later ones
 *     count under kernel="other", so a series never moves and a counter
 *     never goes back while the process lives), NCCL operations and bytes;
 *     forgotten when the process is reaped, so its series go;
 *   - the live profile: launches (and GPU time) by process, stack and
 *     kernel, one bucket per second of launch time (at most
 *     NP_METRICS_BUCKET_SAMPLES distinct ones a second; more are counted as
 *     dropped samples), published once its second is over and read;
 *   - /metrics, rendered once a second, with the daemon's health.
 * Nothing is kept when http_listen is empty (d->metrics NULL). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "attach/probes.h"
#include "daemon/internal.h"
#include "http/expo.h"
#include "http/server.h"
#include "ingest/backlog.h"
#include "ncclprobe/recording.h"
#include "session/target.h"

#define NP_METRICS_KERNELS 50           /* kernel series per process, then "other" */
#define NP_METRICS_STACKS 1024          /* stacks per process remembered for GPU time */
#define NP_METRICS_BUCKET_SAMPLES 20000 /* distinct samples in one second's bucket */
#define COMPLETE_MARGIN_NS 50000000ull  /* a launch is in the ring this soon after its time */

struct kseries {
    char *kernel;
    uint64_t launches, gpu_ns;
};

/* One traced process's counters. */
struct pmetrics {
    pid_t pid;
    char pid_text[16];
    char comm[17], container[65];
    uint64_t *api;         /* launches by probe definition (np_probe_defs' index) */
    struct np_map kernels; /* name -> 1-based index into ks */
    struct kseries ks[NP_METRICS_KERNELS];
    size_t nks;
    struct kseries other;
    bool gpu_known;
    struct np_map stacks; /* cookie -> its folded stack and leaf (char *), for GPU time */
};

struct daemon_metrics {
    struct np_http_feed *feed;
    struct np_http_server *server;
    const struct np_probe_def *defs;
    size_t ndefs;
    struct np_map procs;        /* pid -> struct pmetrics * */
    struct np_http_bucket *cur; /* the second being filled; NULL: none yet */
    struct np_map cur_index;    /* cookie -> 1-based index into cur->v */
    uint64_t samples_dropped;
    struct np_str text, scratch;
};

static struct daemon *daemon_of(struct np_session *s) {
    return np_container_of(s, struct daemon, s);
}

static void pm_free(void *value) {
    struct pmetrics *pm = value;
    if (!pm)
        return;
    for (size_t i = 0; i < pm->nks; i++)
        free(pm->ks[i].kernel);
    np_map_free(&pm->kernels, NULL);
    np_map_free(&pm->stacks, free);
    free(pm->api);
    free(pm);
}

static struct pmetrics *pm_get(struct daemon *d, pid_t pid) {
    struct daemon_metrics *m = d->metrics;
    struct pmetrics *pm = np_map_get_u64(&m->procs, (uint64_t)pid);
    if (pm)
        return pm;
    const struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)pid);
    pm = calloc(1, sizeof(*pm));
    if (!pm || !(pm->api = calloc(m->ndefs ? m->ndefs : 1, sizeof(*pm->api))) ||
        np_map_put_u64(&m->procs, (uint64_t)pid, pm)) {
        pm_free(pm);
        return NULL;
    }
    pm->pid = pid;
    snprintf(pm->pid_text, sizeof(pm->pid_text), "%d", (int)pid);
    snprintf(pm->comm, sizeof(pm->comm), "%s", p ? p->labels.comm : "");
    snprintf(pm->container, sizeof(pm->container), "%s", p ? p->labels.container : "");
    np_map_init(&pm->kernels);
    np_map_init(&pm->stacks);
    pm->other.kernel = "other";
    return pm;
}

static struct kseries *kernel_series(struct pmetrics *pm, const char *kernel) {
    uintptr_t i = (uintptr_t)np_map_get_str(&pm->kernels, kernel);
    if (i)
        return &pm->ks[i - 1];
    if (pm->nks == NP_METRICS_KERNELS)
        return &pm->other;
    struct kseries *k = &pm->ks[pm->nks];
    if (!(k->kernel = strdup(kernel)))
        return &pm->other;
    if (np_map_put_str(&pm->kernels, kernel, (void *)(uintptr_t)(pm->nks + 1))) {
        free(k->kernel);
        k->kernel = NULL;
        return &pm->other;
    }
    pm->nks++;
    return k;
}

/* ---- the live profile's buckets --------------------------------------------------- */

static void publish(struct daemon_metrics *m) {
    if (!m->cur)
        return;
    np_http_feed_add_bucket(m->feed, m->cur);
    m->cur = NULL;
    np_map_free(&m->cur_index, NULL);
    np_map_init(&m->cur_index);
}

/* The bucket for a launch of second `second`: a later second publishes the
 * one being filled; an earlier one (a late record) counts in it. */
static struct np_http_bucket *bucket_for(struct daemon_metrics *m, uint64_t second) {
    if (m->cur && second > m->cur->second)
        publish(m);
    if (!m->cur && (m->cur = calloc(1, sizeof(*m->cur))))
        m->cur->second = second;
    return m->cur;
}

static struct np_http_sample *bucket_sample(struct daemon_metrics *m, struct pmetrics *pm,
                                            uint64_t second, uint64_t cookie, const char *stack) {
    struct np_http_bucket *b = bucket_for(m, second);
    if (!b)
        return NULL;
    uintptr_t i = (uintptr_t)np_map_get_u64(&m->cur_index, cookie);
    if (i)
        return &b->v[i - 1];
    if (!stack || b->n >= NP_METRICS_BUCKET_SAMPLES) {
        m->samples_dropped += stack != NULL;
        return NULL;
    }
    struct np_http_sample *v = np_grow_array(b->v, &b->cap, b->n + 1, sizeof(*v));
    if (!v)
        return NULL;
    b->v = v;
    struct np_http_sample *x = &v[b->n];
    *x = (struct np_http_sample){.pid = pm->pid};
    memcpy(x->comm, pm->comm, sizeof(x->comm));
    memcpy(x->container, pm->container, sizeof(x->container));
    if (!(x->stack = strdup(stack)) || np_map_put_u64(&m->cur_index, cookie, (void *)(b->n + 1))) {
        free(x->stack);
        return NULL;
    }
    return &v[b->n++];
}

/* frames;[GPU_Kernel]kernel, as merged.folded writes a launch (frames: "" or NULL for none). */
static const char *folded_text(struct daemon_metrics *m, const char *frames, size_t len,
                               const char *kernel) {
    np_str_reset(&m->scratch);
    if (frames && len) {
        np_str_append_n(&m->scratch, frames, len);
        np_str_append(&m->scratch, ";");
    }
    np_str_append(&m->scratch, NP_LEAF_KERNEL);
    np_str_append(&m->scratch, kernel);
    return np_str_cstr(&m->scratch);
}

/* One launch (and its GPU time) in the bucket of `second`, under key (its process, stack
 * and kernel); the folded text is made once per key a second, not once per launch. */
static void profile_add(struct daemon_metrics *m, struct pmetrics *pm, uint64_t second,
                        uint64_t key, const char *frames, size_t len, const char *kernel,
                        uint64_t gpu_ns) {
    struct np_http_sample *x = bucket_sample(m, pm, second, key, NULL);
    if (!x && m->cur && m->cur->second >= second)
        x = bucket_sample(m, pm, second, key, folded_text(m, frames, len, kernel));
    if (x) {
        x->count++;
        x->gpu_ns += gpu_ns;
    }
}

static uint64_t key_of(uint64_t a, uint64_t b, const char *kernel) {
    uint64_t h[3] = {a, b, kernel ? np_hash_str(kernel) : 0};
    return np_hash_bytes(h, sizeof(h)) | 1;
}

/* A held launch's stack, kept until it is retired (at most NP_METRICS_STACKS a process). */
static void remember_stack(struct pmetrics *pm, uint64_t cookie,
                           const struct np_stack_texts *stack) {
    if (pm->stacks.count >= NP_METRICS_STACKS || np_map_get_u64(&pm->stacks, cookie))
        return;
    char *copy = strndup(stack ? stack->folded.buf ? stack->folded.buf : "" : "",
                         stack ? stack->folded.len : 0);
    if (copy && np_map_put_u64(&pm->stacks, cookie, copy))
        free(copy);
}

uint64_t metrics_launched(struct np_session *s, struct np_target *t, const struct np_launch *l,
                          const struct np_stack_texts *stack, const char *kernel, bool held) {
    struct daemon *d = daemon_of(s);
    struct daemon_metrics *m = d->metrics;
    struct pmetrics *pm = m ? pm_get(d, t->proc.pid) : NULL;
    if (!pm)
        return 0;
    size_t api = (size_t)(l->def - m->defs);
    if (l->def >= m->defs && api < m->ndefs)
        pm->api[api]++;
    uint64_t stack_hash = stack ? np_stack_texts_hash(stack) : 0;
    if (held) { /* counted once its GPU records name its kernel (metrics_gpu_retired) */
        uint64_t cookie = key_of((uint64_t)t->proc.pid, stack_hash, NULL);
        remember_stack(pm, cookie, stack);
        return cookie;
    }
    kernel_series(pm, kernel)->launches++;
    profile_add(m, pm, l->ev->hdr.ts_ns / 1000000000ull,
                key_of((uint64_t)t->proc.pid, stack_hash, kernel), stack ? stack->folded.buf : NULL,
                stack ? stack->folded.len : 0, kernel, 0);
    return 0;
}

void metrics_gpu_retired(struct np_session *s, uint32_t pid, uint64_t cookie, const char *kernel,
                         uint64_t gpu_ns) {
    struct daemon *d = daemon_of(s);
    struct daemon_metrics *m = d->metrics;
    struct pmetrics *pm = m ? np_map_get_u64(&m->procs, pid) : NULL;
    if (!pm)
        return;
    struct kseries *k = kernel_series(pm, kernel);
    k->launches++;
    k->gpu_ns += gpu_ns;
    pm->gpu_known |= gpu_ns != 0;
    const char *frames = np_map_get_u64(&pm->stacks, cookie);
    if (!frames) { /* over the cap of stacks kept: counted, but not in the profile */
        m->samples_dropped++;
        return;
    }
    /* a retired launch goes in the second being filled: its records came after it */
    uint64_t second = m->cur ? m->cur->second : np_monotonic_ns() / 1000000000ull;
    profile_add(m, pm, second, key_of(cookie, 0, kernel), frames, strlen(frames), kernel, gpu_ns);
}

/* ---- /metrics ------------------------------------------------------------------ */

#define PROC_LABELS(pm) "pid", (pm)->pid_text, "comm", (pm)->comm, "container", (pm)->container

static void each_pm(struct daemon_metrics *m, struct np_str *o,
                    void (*fn)(struct daemon *, struct pmetrics *, struct np_str *),
                    struct daemon *d) {
    for (size_t i = 0; i < m->procs.cap; i++)
        if (m->procs.slots[i].used)
            fn(d, m->procs.slots[i].value, o);
}

/* Every traced process, launches or not. */
static void render_info(struct daemon *d, struct np_str *o) {
    np_expo_family(o, "ncclprobe_target_info", "gauge", "a traced process's labels (always 1)");
    for (size_t i = 0; i < d->procs.cap; i++) {
        const struct dproc *p = d->procs.slots[i].used ? d->procs.slots[i].value : NULL;
        if (!p || p->exited)
            continue;
        char pid[16], ns_pid[16];
        snprintf(pid, sizeof(pid), "%d", (int)p->labels.pid);
        snprintf(ns_pid, sizeof(ns_pid), "%d", (int)p->labels.ns_pid);
        const char *l[] = {
            "pid",    pid,    "comm", p->labels.comm, "container", p->labels.container,
            "ns_pid", ns_pid, "exe",  p->labels.exe,  "cgroup",    p->labels.cgroup};
        np_expo_sample(o, "ncclprobe_target_info", l, 6, 1);
    }
}

static void render_api(struct daemon *d, struct pmetrics *pm, struct np_str *o) {
    struct daemon_metrics *m = d->metrics;
    for (size_t i = 0; i < m->ndefs; i++) {
        if (!pm->api[i])
            continue;
        /* several probes (symbols) may share an API name: one series each is summed */
        bool first = true;
        uint64_t sum = 0;
        for (size_t j = 0; j < m->ndefs && first; j++) {
            if (strcmp(m->defs[j].api, m->defs[i].api))
                continue;
            first = j == i;
        }
        if (!first)
            continue;
        for (size_t j = i; j < m->ndefs; j++)
            if (!strcmp(m->defs[j].api, m->defs[i].api))
                sum += pm->api[j];
        const char *l[] = {PROC_LABELS(pm), "api", m->defs[i].api};
        np_expo_sample(o, "ncclprobe_launches_total", l, 4, sum);
    }
}

static void render_kernels(struct daemon *d, struct pmetrics *pm, struct np_str *o) {
    (void)d;
    for (size_t i = 0; i <= pm->nks; i++) {
        const struct kseries *k = i < pm->nks ? &pm->ks[i] : &pm->other;
        if (i == pm->nks && pm->nks < NP_METRICS_KERNELS)
            break;
        const char *l[] = {PROC_LABELS(pm), "kernel", k->kernel};
        np_expo_sample(o, "ncclprobe_kernel_launches_total", l, 4, k->launches);
    }
}

static void render_gpu(struct daemon *d, struct pmetrics *pm, struct np_str *o) {
    (void)d;
    for (size_t i = 0; pm->gpu_known && i <= pm->nks; i++) {
        const struct kseries *k = i < pm->nks ? &pm->ks[i] : &pm->other;
        if (i == pm->nks && pm->nks < NP_METRICS_KERNELS)
            break;
        const char *l[] = {PROC_LABELS(pm), "kernel", k->kernel};
        np_expo_sample_double(o, "ncclprobe_gpu_seconds_total", l, 4, (double)k->gpu_ns / 1e9);
    }
}

static void render_drops(struct daemon *d, struct pmetrics *pm, struct np_str *o) {
    uint64_t drops = 0, limited = 0;
    budget_proc_counters(d, pm->pid, &drops, &limited);
    const char *l[] = {PROC_LABELS(pm), "reason", "ring_buffer"};
    np_expo_sample(o, "ncclprobe_target_dropped_total", l, 4, drops);
    l[7] = "rate_limited";
    np_expo_sample(o, "ncclprobe_target_dropped_total", l, 4, limited);
}

/* NCCL API calls and bytes by (process, communicator hash, operation). */
static void render_nccl(struct daemon *d, struct np_str *o, bool bytes) {
    const struct np_nccl_comms *c = &d->s.nccl_comms;
    for (size_t i = 0; i < c->count; i++) {
        const struct np_nccl_comm_stats *st = &c->items[i];
        struct pmetrics *pm = np_map_get_u64(&d->metrics->procs, st->pid);
        if (!pm)
            continue;
        char hash[24];
        snprintf(hash, sizeof(hash), st->id.known ? "%016" PRIx64 : "unknown", st->id.hash);
        for (int slot = 0; slot < NP_NCCL_API_SLOTS; slot++) {
            const char *op = np_nccl_api_slot_name(slot);
            if (!op || !st->api[slot].calls)
                continue;
            const char *l[] = {PROC_LABELS(pm), "comm_hash", hash, "op", op};
            np_expo_sample(o, bytes ? "ncclprobe_nccl_bytes_total" : "ncclprobe_nccl_ops_total", l,
                           5, bytes ? st->api[slot].bytes : st->api[slot].calls);
        }
    }
}

static void render_family(struct daemon *d, struct np_str *o, const char *name, const char *type,
                          const char *help,
                          void (*fn)(struct daemon *, struct pmetrics *, struct np_str *)) {
    np_expo_family(o, name, type, help);
    each_pm(d->metrics, o, fn, d);
}

/* Where records wait between BPF and the unwinder: the ring buffer (bytes
 * BPF wrote that the drain thread has not taken yet) and the reader's
 * backlog (records taken, not yet unwound). */
static void render_reader_fill(struct np_session *s, struct np_str *o) {
    uint64_t used, size;
    if (np_session_ring_fill(s, &used, &size) == 0) {
        np_expo_family(o, "ncclprobe_ring_buffer_used_bytes", "gauge",
                       "bytes of the BPF ring buffer holding records not read yet");
        np_expo_sample(o, "ncclprobe_ring_buffer_used_bytes", NULL, 0, used);
        np_expo_family(o, "ncclprobe_ring_buffer_size_bytes", "gauge",
                       "the BPF ring buffer's size");
        np_expo_sample(o, "ncclprobe_ring_buffer_size_bytes", NULL, 0, size);
    }
    np_expo_family(o, "ncclprobe_reader_backlog_records", "gauge",
                   "records read from the ring buffer, waiting to be unwound");
    np_expo_sample(o, "ncclprobe_reader_backlog_records", NULL, 0,
                   s->ingest.queue ? np_backlog_waiting(&s->ingest.backlog) : 0);
}

static void render_health(struct daemon *d, struct np_str *o) {
    struct np_session *s = &d->s;
    np_expo_family(o, "ncclprobe_probe_hits_total", "counter", "launch and NCCL probe hits");
    np_expo_sample(o, "ncclprobe_probe_hits_total", NULL, 0,
                   np_session_counter(s, NP_CNT_LAUNCH_HITS));
    np_expo_family(o, "ncclprobe_events_captured_total", "counter",
                   "launch and NCCL events BPF wrote to the ring buffer");
    np_expo_sample(o, "ncclprobe_events_captured_total", NULL, 0,
                   np_session_counter(s, NP_CNT_LAUNCH_SENT));
    np_expo_family(o, "ncclprobe_events_dropped_total", "counter",
                   "launch and NCCL events lost: ring buffer full, reader backlog full, or "
                   "rate limited");
    const char *l[] = {"reason", "ring_buffer"};
    np_expo_sample(o, "ncclprobe_events_dropped_total", l, 1,
                   np_session_counter(s, NP_CNT_LAUNCH_DROPPED));
    l[1] = "rate_limited";
    np_expo_sample(o, "ncclprobe_events_dropped_total", l, 1,
                   np_session_counter(s, NP_CNT_RATE_LIMITED));
    l[1] = "backlog";
    np_expo_sample(o, "ncclprobe_events_dropped_total", l, 1,
                   s->ingest.queue ? np_backlog_dropped_launches(&s->ingest.backlog) : 0);
    render_reader_fill(s, o);
    size_t targets = 0, injected = 0;
    for (size_t i = 0; i < s->ntargets; i++) {
        targets += !s->targets[i]->exited;
        injected += s->targets[i]->agent.origin == NP_AGENT_INJECTED;
    }
    np_expo_family(o, "ncclprobe_targets", "gauge", "processes traced now");
    np_expo_sample(o, "ncclprobe_targets", NULL, 0, targets);
    np_expo_family(o, "ncclprobe_injected_agents", "gauge",
                   "traced processes the CUPTI library was loaded into live");
    np_expo_sample(o, "ncclprobe_injected_agents", NULL, 0, injected);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    np_expo_family(o, "ncclprobe_daemon_cpu_seconds_total", "counter", "the daemon's CPU time");
    np_expo_sample_double(o, "ncclprobe_daemon_cpu_seconds_total", NULL, 0, cpu);
    np_expo_family(o, "ncclprobe_daemon_resident_memory_bytes", "gauge", "the daemon's RSS");
    np_expo_sample(o, "ncclprobe_daemon_resident_memory_bytes", NULL, 0, np_self_rss_bytes());
    np_expo_family(o, "ncclprobe_profile_samples_dropped_total", "counter",
                   "distinct (process, stack, kernel) samples over the live profile's cap of a "
                   "second");
    np_expo_sample(o, "ncclprobe_profile_samples_dropped_total", NULL, 0,
                   d->metrics->samples_dropped);
}

static void render(struct daemon *d, struct np_str *o) {
    render_info(d, o);
    render_family(d, o, "ncclprobe_launches_total", "counter",
                  "outermost launches of a traced process, by launch API", render_api);
    render_family(d, o, "ncclprobe_kernel_launches_total", "counter",
                  "launches by kernel: a process's first 50 kernels, then kernel=\"other\"",
                  render_kernels);
    render_family(d, o, "ncclprobe_gpu_seconds_total", "counter",
                  "GPU time of the launches' kernels (processes with the CUPTI library)",
                  render_gpu);
    render_family(d, o, "ncclprobe_target_dropped_total", "counter",
                  "a traced process's launches lost (ring buffer full) or rate limited",
                  render_drops);
    np_expo_family(o, "ncclprobe_nccl_ops_total", "counter",
                   "NCCL API calls by communicator and operation");
    render_nccl(d, o, false);
    np_expo_family(o, "ncclprobe_nccl_bytes_total", "counter", "bytes of those NCCL calls");
    render_nccl(d, o, true);
    render_health(d, o);
}

/* ---- the loop's calls ------------------------------------------------------------ */

static struct np_http_options http_options(const struct daemon *d) {
    return (struct np_http_options){.listen = d->cfg.http_listen,
                                    .allow_remote = d->cfg.http_allow_remote,
                                    .token_file = d->cfg.http_token_file};
}

int metrics_check(struct daemon *d) {
    char msg[512];
    struct np_http_options o = http_options(d);
    int err = o.listen && *o.listen ? np_http_check(&o, msg, sizeof(msg)) : 0;
    if (err)
        np_err("%s", msg);
    return err;
}

int metrics_start(struct daemon *d) {
    if (!d->cfg.http_listen || !*d->cfg.http_listen)
        return 0;
    struct daemon_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    d->metrics = m;
    m->defs = np_probe_defs(&m->ndefs);
    np_map_init(&m->procs);
    np_map_init(&m->cur_index);
    np_str_init(&m->text);
    np_str_init(&m->scratch);
    int err = np_http_feed_new(&m->feed);
    if (err)
        return err;
    char msg[512];
    struct np_http_options o = http_options(d);
    err = np_http_start(&o, m->feed, &m->server, msg, sizeof(msg));
    if (err) {
        np_err("%s", msg);
        return err;
    }
    np_info("HTTP endpoints on %s%s", d->cfg.http_listen,
            o.token_file && *o.token_file ? " (bearer token required)" : "");
    return 0;
}

void metrics_tick(struct daemon *d, uint64_t now) {
    struct daemon_metrics *m = d->metrics;
    if (!m || d->s.backlog || now < COMPLETE_MARGIN_NS + 1000000000ull)
        return;
    uint64_t complete = (now - COMPLETE_MARGIN_NS) / 1000000000ull - 1;
    if (m->cur && m->cur->second <= complete)
        publish(m);
    np_http_feed_complete(m->feed, complete);
}

void metrics_every_second(struct daemon *d) {
    struct daemon_metrics *m = d->metrics;
    if (!m)
        return;
    np_str_reset(&m->text);
    render(d, &m->text);
    char *copy = malloc(m->text.len + 1);
    if (!copy)
        return;
    memcpy(copy, np_str_cstr(&m->text), m->text.len + 1);
    np_http_feed_set_metrics(m->feed, copy, m->text.len);
}

void metrics_forget(struct daemon *d, pid_t pid) {
    if (d->metrics)
        pm_free(np_map_del_u64(&d->metrics->procs, (uint64_t)pid));
}

void metrics_free(struct daemon *d) {
    struct daemon_metrics *m = d->metrics;
    if (!m)
        return;
    np_http_stop(m->server); /* every HTTP thread is gone after it */
    np_http_feed_free(m->feed);
    np_http_bucket_free(m->cur);
    np_map_free(&m->cur_index, NULL);
    np_map_free(&m->procs, pm_free);
    np_str_free(&m->text);
    np_str_free(&m->scratch);
    free(m);
    d->metrics = NULL;
}
