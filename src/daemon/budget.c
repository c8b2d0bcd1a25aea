/* budget.c - what the daemon may spend: its CPU time against cpu_budget
 * (over it, BPF keeps at most rate_limit launches per probe per second; the
 * cores it gives beyond one, reader threads),
 * what each process's probes dropped and rate-limited, and the cap on the
 * stack caches (cache_size). See internal.h. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <time.h>
#include <unistd.h>

#include "daemon/internal.h"
#include "ncclprobe.skel.h"
#include "session/target.h"

static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

unsigned budget_reader_threads(double cpu_budget_percent) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long n = (long)(cpu_budget_percent / 100.0) - 1;
    if (n > cpus - 1)
        n = cpus - 1;
    if (n > 8)
        n = 8;
    return n > 0 ? (unsigned)n : 0;
}

void budget_start(struct daemon *d) {
    d->cpu_prev_ns = cpu_ns(); /* the budget counts from here, not the set-up */
    d->wall_prev_ns = np_monotonic_ns();
}

static void limit_on(struct daemon *d) {
    d->limit_active = true;
    d->limit_activations++;
    d->calm_seconds = 0;
    d->s.skel->bss->rate_limit = (__u32)d->cfg.rate_limit;
    np_warn("CPU budget exceeded (%.1f%% of a core > %.0f%%): keeping at most %" PRIu64
            " launches per second per probe until the load drops",
            d->cpu_percent, d->cfg.cpu_budget_percent, d->cfg.rate_limit);
}

static void limit_off(struct daemon *d, uint64_t limited) {
    d->limit_active = false;
    d->s.skel->bss->rate_limit = 0;
    np_info("CPU budget met again: rate limit lifted (%" PRIu64
            " launches not recorded since the daemon started)",
            limited);
}

/* Once a second: our CPU use against the budget. Over it for 3 s in a row
 * (a new process's first symbol loads are a burst, not a load), BPF keeps
 * at most rate_limit launches per probe per second; the limit is lifted
 * when the load it holds back would fit the budget again (5 s in a row). */
void budget_check(struct daemon *d, uint64_t now) {
    uint64_t cpu = cpu_ns();
    if (d->wall_prev_ns && now > d->wall_prev_ns)
        d->cpu_percent = 100.0 * (double)(cpu - d->cpu_prev_ns) / (double)(now - d->wall_prev_ns);
    d->cpu_prev_ns = cpu;
    d->wall_prev_ns = now;
    uint64_t limited = np_session_counter(&d->s, NP_CNT_RATE_LIMITED);
    uint64_t received = d->s.ingest.stats.launch_events;
    double kept = (double)(received - d->received_prev);
    double held = (double)(limited - d->limited_prev);
    d->limited_prev = limited;
    d->received_prev = received;
    double budget = d->cfg.cpu_budget_percent;
    if (!d->limit_active) {
        d->over_seconds = d->cpu_percent > budget ? d->over_seconds + 1 : 0;
        if (d->over_seconds >= 3)
            limit_on(d);
        return;
    }
    double demand = kept > 0 ? d->cpu_percent * (kept + held) / kept : (held > 0 ? 1e9 : 0);
    d->calm_seconds = demand < 0.8 * budget ? d->calm_seconds + 1 : 0;
    if (d->calm_seconds >= 5)
        limit_off(d, limited);
}

void budget_reload(struct daemon *d) {
    if (d->limit_active)
        d->s.skel->bss->rate_limit = (__u32)d->cfg.rate_limit;
}

void budget_proc_counters(const struct daemon *d, pid_t pid, uint64_t *drops, uint64_t *limited) {
    *drops = *limited = 0;
    const struct np_attacher *a = &d->s.attacher;
    for (size_t i = 0; i < a->nsites; i++) {
        const struct np_probe_site *site = &a->sites[i];
        if (site->pid != pid || site->released)
            continue;
        *drops += np_session_probe_counter(d->s.skel->maps.probe_drops, site->id);
        *limited += np_session_probe_counter(d->s.skel->maps.probe_limited, site->id);
    }
}

/* An estimate of the caches that grow with distinct stacks: each target's
 * stack and Python frame texts (the symbolizers' own caches follow the
 * libraries mapped). */
uint64_t budget_cache_bytes(const struct daemon *d) {
    uint64_t n = 0;
    for (size_t i = 0; i < d->s.ntargets; i++)
        n += d->s.targets[i]->in.stack_text_bytes + d->s.targets[i]->in.py_frame_text_bytes;
    return n;
}

/* Over the cache cap: every stack text cache starts again (they refill
 * from the symbolizers at the cost of some CPU). */
void budget_check_caches(struct daemon *d) {
    if (budget_cache_bytes(d) <= d->cfg.cache_bytes)
        return;
    for (size_t i = 0; i < d->s.ntargets; i++)
        np_ingest_proc_forget_stacks(&d->s.targets[i]->in);
    d->cache_resets++;
    np_debug("stack caches over %" PRIu64 " bytes: cleared", d->cfg.cache_bytes);
}
