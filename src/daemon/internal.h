/* internal.h - the daemon's state (struct daemon, struct dproc) and what each
 * of its files offers the others. The files, each calling only the ones
 * listed after it:
 *
 *   daemon.c      set-up, the main loop, SIGHUP reload, shutting down
 *   processes.c   discovery -> trace / untrace, exits, the discovery delays
 *   status.c      `ctl status`'s reply (fields: status_schema.h), the rates
 *   windows.c     capture windows, aggregation periods, the flag file,
 *                 `ctl start|stop|snapshot`
 *   sets.c        output sets: opened, routed to (the session's sink),
 *                 closed, written, flushed, retention of output_dir
 *   converters.c  derived outputs of written sets, by `ncclprobe convert`
 *   budget.c      the CPU budget (BPF's rate limit), the probes' drop
 *                 counters, the cache cap
 *   metrics.c     what the HTTP endpoints serve (http/): per-process
 *                 counters, the live profile's buckets, /metrics
 *
 * plus, below them all: config.c (the file), ctl.c (the control socket),
 * discover.c (BPF process discovery), outset.c (one set on disk), proc.c
 * (/proc labels) and status_schema.c (the status fields). */
#ifndef NP_DAEMON_INTERNAL_H
#define NP_DAEMON_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/config.h"
#include "daemon/ctl.h"
#include "daemon/discover.h"
#include "daemon/outset.h"
#include "daemon/proc.h"
#include "lib/util.h"
#include "session/session.h"

#define NDELAYS 256      /* discovery delays kept for the median */
#define MAX_CONVERTERS 2 /* `ncclprobe convert` children at once */

/* A traced process, as the daemon sees it. */
struct dproc {
    struct np_proc_labels labels;
    struct np_outset *set; /* where its records go now; NULL: opened on the next record */
    bool exited;
    bool reconsider; /* exec'd (or its pid was reused): looked at again once reaped */
    uint64_t exited_ns;
    uint64_t set_retry_ns;  /* its output set could not be made: not before then */
    uint64_t launches_prev; /* for its launch rate */
    double launches_per_s;
};

struct daemon {
    struct np_session s; /* its sink's callbacks get &d->s (sets.c: daemon_of) */
    struct np_daemon_config cfg;
    const char *config_path;
    bool config_given;           /* --config: a missing file is an error */
    const char *output_dir_arg;  /* --output-dir overrides the configuration */
    const char *http_listen_arg; /* --http-listen overrides the configuration */
    bool verbose;                /* -v: debug messages whatever log_level says */
    char host[256];
    struct np_discover *disc;
    struct np_ctl_server *ctl;
    bool reload, stop;
    uint64_t start_mono, last_retain_ns, last_second_ns;

    /* processes.c */
    struct np_map procs;       /* pid -> struct dproc * */
    struct np_map exe_checked; /* executable identity -> 1 has launch probes, 2 has none */
    struct np_map rejected;    /* pid -> 1: not selected by the filters (until it execs) */
    uint64_t lost_seen;        /* discovery notifications lost, as last handled */
    uint64_t attached, detached, skipped_by_filter;
    uint64_t skipped_ptraced; /* under a debugger when found (left to it) */
    uint64_t missed;          /* processes gone before they could be attached */
    double delays_ms[NDELAYS];
    size_t ndelays;
    double delay_max_ms;

    /* sets.c */
    struct np_outset *sets; /* open and closing, newest first */
    uint64_t sets_written, deleted_sets;
    struct np_retention retention;

    /* windows.c: the capture window, the always-on aggregation's period */
    bool window_open;
    bool window_cupti;  /* the open window brings the CUPTI library into its processes */
    uint64_t window_id; /* the open (or last) window's: 1, 2, ... */
    char window_reason[32];
    uint64_t window_start_rt, window_start_mono, window_end_mono; /* end: duration or max_window */
    bool flag_present;
    uint64_t period_start_rt, period_start_mono;

    /* converters.c */
    pid_t converters[MAX_CONVERTERS]; /* children making sets' derived outputs */
    unsigned nconverters;
    char **to_convert; /* written sets waiting for a converter */
    size_t nto_convert;

    /* budget.c */
    uint64_t cpu_prev_ns, wall_prev_ns, limited_prev, received_prev;
    double cpu_percent;
    bool limit_active;
    uint64_t limit_activations;
    int over_seconds; /* seconds in a row over the budget */
    int calm_seconds; /* seconds the unlimited load would have fit the budget */
    uint64_t cache_resets;

    /* metrics.c: NULL when http_listen is empty */
    struct daemon_metrics *metrics;

    /* status.c */
    uint64_t launches_prev_total, records_prev_total;
    double launches_per_s, records_per_s;
};

static inline uint64_t ms_to_ns(uint64_t ms) {
    return ms * 1000000ull;
}

/* ---- processes.c ---- */
/* np_proc_each's callback: pid looked at as found by a /proc walk. */
int procs_consider_existing(void *ctx, pid_t pid);
/* np_discover's callback: an exec or a library load. */
void procs_on_discovery(void *ctx, const struct np_disc_event *ev);
/* pid's pidfd said it exited. */
void procs_on_exit(struct daemon *d, pid_t pid);
/* Exited processes whose records have all been read (ring_read): gone. */
void procs_reap_exited(struct daemon *d, bool ring_read);
/* Notifications lost to a full discovery ring: /proc walked instead. */
void procs_rescan_after_losses(struct daemon *d);
/* The filters changed: processes no longer selected go, new ones come. */
void procs_refilter(struct daemon *d);
void procs_free(struct daemon *d);

/* ---- status.c ---- */
void status_json(struct daemon *d, cJSON *reply);
/* Once a second: the launch and record rates. */
void status_update_rates(struct daemon *d);

/* ---- windows.c ---- */
void windows_start(struct daemon *d);
/* The flag file, the window's end, the aggregation period's rotation. */
void windows_tick(struct daemon *d, uint64_t now);
/* The configuration was reloaded (max_window, aggregate, flag_file). */
void windows_reload(struct daemon *d, bool aggregate_was, bool flag_moved);
/* `ctl start|stop|snapshot`; 0 or -errno after np_ctl_reply_error. */
int windows_ctl(struct daemon *d, const struct np_ctl_request *req, cJSON *reply);
/* The reply's "window" object. */
void windows_json(const struct daemon *d, cJSON *reply);

/* ---- sets.c ---- */
extern const struct np_sink_ops sets_sink_ops;
/* The process's set, opened now (a window's exists from the moment it is traced). */
void sets_open(struct daemon *d, struct dproc *p);
/* Its drops and rate-limited launches counted, before its probes go. */
void sets_count(struct daemon *d, struct dproc *p);
/* No more records go to its set; written once its held launches are in. */
void sets_close(struct daemon *d, struct dproc *p);
/* Every process's set closed, and opened again when a window is open. */
void sets_reopen_all(struct daemon *d);
void sets_close_all(struct daemon *d);
/* Closing sets whose launches no longer wait for GPU records are written;
 * all of them when `all`. */
void sets_finish_closing(struct daemon *d, bool all);
/* The open sets' files, readable now; "sets": their directories. */
void sets_flush(struct daemon *d, cJSON *reply);
/* "sets": the directories of the sets now closing (what stop/snapshot made). */
void sets_closing_json(const struct daemon *d, cJSON *reply);
void sets_retain(struct daemon *d);

/* ---- converters.c ---- */
/* Makes the derived outputs of the set written to dir (cfg.formats). */
void converters_add(struct daemon *d, const char *dir);
/* Converters that finished, and queued sets started in their place. */
void converters_reap(struct daemon *d);
/* At exit: every queued set gets its converter, and they get 20 s. */
void converters_finish(struct daemon *d);

/* ---- budget.c ---- */
void budget_start(struct daemon *d);
/* reader_threads = auto: one reader thread per whole core of cpu_budget
 * above the first (the session's own thread spends that one), at most 8
 * and fewer than the CPUs online. */
unsigned budget_reader_threads(double cpu_budget_percent);
/* Once a second: CPU use against cpu_budget; the rate limit on or off. */
void budget_check(struct daemon *d, uint64_t now);
/* A reloaded rate_limit applies at once while limiting. */
void budget_reload(struct daemon *d);
/* The process's drops and rate-limited launches so far (its probes' counters). */
void budget_proc_counters(const struct daemon *d, pid_t pid, uint64_t *drops, uint64_t *limited);
/* Bytes of the caches that grow with distinct stacks; over cache_size: cleared. */
uint64_t budget_cache_bytes(const struct daemon *d);
void budget_check_caches(struct daemon *d);

/* ---- metrics.c ---- */
/* http_listen's address and token file, checked before anything is loaded:
 * 0 or -errno (said). */
int metrics_check(struct daemon *d);
/* With http_listen: the feed and the HTTP server; 0 or -errno (said). */
int metrics_start(struct daemon *d);
/* The session's sink hooks: a launch (returns a cookie when it is held), a held one
 * written with its GPU time. */
uint64_t metrics_launched(struct np_session *s, struct np_target *t, const struct np_launch *l,
                          const struct np_stack_texts *stack, const char *kernel, bool held);
void metrics_gpu_retired(struct np_session *s, uint32_t pid, uint64_t cookie, const char *kernel,
                         uint64_t gpu_ns);
/* Every loop: seconds whose launches are all read go to the HTTP side. */
void metrics_tick(struct daemon *d, uint64_t now);
/* Once a second: /metrics rendered. */
void metrics_every_second(struct daemon *d);
/* The process was reaped: its series go. */
void metrics_forget(struct daemon *d, pid_t pid);
/* Stops the HTTP server (its threads) and frees everything. */
void metrics_free(struct daemon *d);

#endif
