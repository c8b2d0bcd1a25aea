/* windows.c - when the daemon records in full and when it aggregates: the
 * capture window (opened by `ctl start` or the flag file, closed by `ctl
 * stop`, its duration, max_window or the flag file's removal), the
 * always-on aggregation's periods (rotated every aggregate_interval), the
 * BPF switch that pauses the probes when neither is on, and `ctl
 * start|stop|snapshot`. Every window or period change reopens each
 * process's output set (sets.c). See internal.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/internal.h"
#include "daemon/status_schema.h"
#include "ncclprobe.skel.h"
#include "session/agent.h"

/* BPF drops every launch while there is nothing to record it into. */
static void set_bpf_switch(struct daemon *d) {
    d->s.skel->bss->paused = !(d->window_open || d->cfg.aggregate);
}

static void new_period(struct daemon *d) {
    d->period_start_rt = np_realtime_ns();
    d->period_start_mono = np_monotonic_ns();
}

void windows_start(struct daemon *d) {
    new_period(d);
    set_bpf_switch(d);
}

/* The CUPTI library in every traced process, for the window (agent.c). */
static void request_agents(struct daemon *d) {
    for (size_t i = 0; i < d->s.ntargets; i++)
        np_session_request_agent(&d->s, d->s.targets[i]);
}

static int open_window(struct daemon *d, const char *reason, double duration_s, bool cupti,
                       char *msg, size_t msg_size) {
    if (d->window_open) {
        snprintf(msg, msg_size, "window %" PRIu64 " is already open (%s)", d->window_id,
                 d->window_reason);
        return -EBUSY;
    }
    d->window_open = true;
    d->window_cupti = cupti || d->cfg.cupti_inject != NP_CUPTI_INJECT_NEVER;
    d->window_id++;
    snprintf(d->window_reason, sizeof(d->window_reason), "%s", reason);
    d->window_start_rt = np_realtime_ns();
    d->window_start_mono = np_monotonic_ns();
    uint64_t max_ns = ms_to_ns(d->cfg.max_window_ms);
    uint64_t want_ns = duration_s > 0 ? (uint64_t)(duration_s * 1e9) : max_ns;
    d->window_end_mono = d->window_start_mono + (want_ns < max_ns ? want_ns : max_ns);
    sets_reopen_all(d);
    set_bpf_switch(d);
    if (d->window_cupti)
        request_agents(d);
    snprintf(msg, msg_size, "window %" PRIu64 " opened (%s) for %.0f s at most%s", d->window_id,
             reason, (double)(d->window_end_mono - d->window_start_mono) / 1e9,
             d->window_cupti ? ", with the CUPTI library" : "");
    np_info("%s", msg);
    return 0;
}

static int close_window(struct daemon *d, const char *why, char *msg, size_t msg_size) {
    if (!d->window_open) {
        snprintf(msg, msg_size, "no window is open");
        return -ENOENT;
    }
    d->window_open = false;
    new_period(d);
    sets_reopen_all(d);
    set_bpf_switch(d);
    snprintf(msg, msg_size, "window %" PRIu64 " closed (%s)", d->window_id, why);
    np_info("%s", msg);
    return 0;
}

/* Closes the window the flag file opened. */
static void close_flag_window(struct daemon *d, const char *why) {
    char msg[256];
    if (d->window_open && strcmp(d->window_reason, "flag_file") == 0)
        close_window(d, why, msg, sizeof(msg));
}

/* The flag file: its appearance opens a window, its removal closes the
 * window it opened. Looked at every tick (a stat); edges only, so `ctl
 * stop` is not undone by a flag file still present. */
static void check_flag_file(struct daemon *d) {
    if (!d->cfg.flag_file)
        return;
    struct stat st;
    bool present = stat(d->cfg.flag_file, &st) == 0;
    if (present == d->flag_present)
        return;
    d->flag_present = present;
    char msg[256];
    if (present)
        open_window(d, "flag_file", 0, false, msg, sizeof(msg));
    else
        close_flag_window(d, "flag file removed");
}

void windows_tick(struct daemon *d, uint64_t now) {
    char msg[256];
    check_flag_file(d);
    if (d->window_open && now >= d->window_end_mono)
        close_window(d, "duration", msg, sizeof(msg));
    if (!d->window_open && d->cfg.aggregate &&
        now - d->period_start_mono >= ms_to_ns(d->cfg.aggregate_interval_ms)) {
        new_period(d);
        sets_reopen_all(d);
    }
}

void windows_reload(struct daemon *d, bool aggregate_was, bool flag_moved) {
    if (d->window_open) {
        uint64_t max_end = d->window_start_mono + ms_to_ns(d->cfg.max_window_ms);
        if (d->window_end_mono > max_end)
            d->window_end_mono = max_end;
    }
    set_bpf_switch(d);
    if (aggregate_was && !d->cfg.aggregate && !d->window_open)
        sets_reopen_all(d); /* the always-on sets end now */
    if (flag_moved) {       /* another flag file: its presence counts from now */
        close_flag_window(d, "flag file changed");
        d->flag_present = false;
    }
}

/* In a window: its files, readable now (it stays open). Otherwise: the
 * aggregation so far, written now. */
static void snapshot(struct daemon *d, cJSON *reply, char *msg, size_t msg_size) {
    if (d->window_open) {
        sets_flush(d, reply);
        snprintf(msg, msg_size, "window %" PRIu64 " flushed (it stays open)", d->window_id);
        return;
    }
    new_period(d);
    sets_reopen_all(d);
    snprintf(msg, msg_size, "aggregation written; a new period began");
    sets_closing_json(d, reply);
}

int windows_ctl(struct daemon *d, const struct np_ctl_request *req, cJSON *reply) {
    char msg[256];
    int err = 0;
    switch (req->cmd) {
    case NP_CTL_START:
        err = open_window(d, "ctl", req->duration_s, req->cupti, msg, sizeof(msg));
        break;
    case NP_CTL_STOP:
        if ((err = close_window(d, "ctl stop", msg, sizeof(msg))) == 0)
            sets_closing_json(d, reply);
        break;
    case NP_CTL_SNAPSHOT:
        snapshot(d, reply, msg, sizeof(msg));
        break;
    case NP_CTL_STATUS:
        return -EINVAL; /* status.c's */
    }
    if (err < 0) {
        np_ctl_reply_error(reply, "%s", msg);
        return err;
    }
    cJSON_AddStringToObject(reply, "message", msg);
    windows_json(d, reply);
    return 0;
}

void windows_json(const struct daemon *d, cJSON *reply) {
    cJSON *w = np_status_add_object(reply, NP_ST_WINDOW);
    np_status_add_bool(w, NP_ST_WINDOW_OPEN, d->window_open);
    if (!d->window_open)
        return;
    char when[32];
    uint64_t now = np_monotonic_ns();
    np_format_utc(when, sizeof(when), d->window_start_rt, false);
    np_status_add_number(w, NP_ST_WINDOW_ID, (double)d->window_id);
    np_status_add_string(w, NP_ST_WINDOW_REASON, d->window_reason);
    np_status_add_string(w, NP_ST_WINDOW_STARTED, when);
    np_status_add_number(w, NP_ST_WINDOW_ELAPSED_S, (double)(now - d->window_start_mono) / 1e9);
    np_status_add_number(w, NP_ST_WINDOW_ENDS_IN_S,
                         d->window_end_mono > now ? (double)(d->window_end_mono - now) / 1e9 : 0);
}
