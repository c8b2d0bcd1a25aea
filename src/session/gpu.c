/* gpu.c - the GPU side of a session (see session.h): the socket the CUPTI
 * library sends its records to (ingest/gpu_socket.c), the join that hands
 * each launch its GPU records by correlation id (correlate/gpu.c), and
 * their results to the writers; libraries that said they stay out, closed
 * or never connected; the last records at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "correlate/gpu.h"
#include "correlate/graphs.h"
#include "correlate/kernels.h"
#include "ingest/gpu_socket.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"
#include "session/session.h"
#include "session/target.h"
#include "writers/output.h"

#define GPU_LINGER_NS 300000000ull /* a launch's records stop coming: it retires */
#define GPU_MAX_WAITING 200000     /* launches waiting for GPU records, at most */
#define GPU_FINAL_WAIT_MS                                                                          \
    2000 /* at the end, at most: the last flush of live targets (every                             \
          * 100 ms; a loaded host under ASan missed 500 ms) */

/* The name a held launch is written under: the CPU side's, unless that was
 * a handle made before we attached ("<unnamed 0x...>"): then what the CUPTI
 * library said of the handle (a NAMES frame, sent before the launch's
 * records), else the name on its first kernel record. */
static const char *retire_name(struct np_session *s, const struct np_gpu_launch *l, char *buf,
                               size_t size) {
    if (strncmp(l->cpu_kernel, NP_KERNEL_UNNAMED_PREFIX, strlen(NP_KERNEL_UNNAMED_PREFIX)) != 0)
        return l->cpu_kernel;
    struct np_target *t = np_session_find_target(s, (pid_t)l->pid);
    const char *named = t && t->kernels ? np_kernel_names_lookup(t->kernels, l->handle) : NULL;
    if (named)
        return named;
    for (uint32_t i = 0; i < l->nrecords; i++) {
        const struct np_gpu_record *r = l->records[i];
        if (r->kind == NP_GPU_KERNEL && r->name_len) {
            snprintf(buf, size, "%.*s", (int)r->name_len, r->name);
            return buf;
        }
    }
    return l->cpu_kernel;
}

/* A graph launch's records, each under the line that captured its node
 * (correlate/graphs.c ties them): into out, or `replay` is left empty. */
static void tie_replay(struct np_session *s, const struct np_gpu_launch *l,
                       struct np_output_replay *replay) {
    const struct np_graph_replay *r = l->extra;
    if (l->free_extra != np_graph_replay_free || !r || !l->nrecords)
        return;
    replay->node = calloc(l->nrecords, sizeof(*replay->node));
    replay->by = calloc(l->nrecords, sizeof(*replay->by));
    if (!replay->node || !replay->by) {
        free(replay->node), free(replay->by);
        replay->node = NULL, replay->by = NULL;
        return;
    }
    struct np_target *t = np_session_find_target(s, (pid_t)l->pid);
    np_graphs_attribute(t ? &t->graphs : NULL, r, l->records, l->nrecords, replay->node,
                        replay->by);
    replay->stack = r->stack;
}

/* The GPU time of a launch's records. */
static uint64_t launch_gpu_ns(const struct np_gpu_launch *l) {
    uint64_t ns = 0;
    for (uint32_t i = 0; i < l->nrecords; i++)
        if (l->records[i]->end_ns > l->records[i]->start_ns)
            ns += l->records[i]->end_ns - l->records[i]->start_ns;
    return ns;
}

static void gpu_retire(void *ctx, const struct np_gpu_launch *l, enum np_gpu_status status) {
    struct np_session *s = ctx;
    struct np_output *out = l->owner ? l->owner : s->out;
    char buf[NP_WIRE_MAX_NAME + 1];
    struct np_output_replay replay = {0};
    tie_replay(s, l, &replay);
    if (out)
        np_output_gpu_launch(out, l, status, retire_name(s, l, buf, sizeof(buf)),
                             replay.stack ? &replay : NULL);
    free(replay.node);
    free(replay.by);
    if (s->sink && s->sink->retired)
        s->sink->retired(s, l->owner);
    if (s->sink && s->sink->gpu_retired && l->cookie)
        s->sink->gpu_retired(s, l->pid, l->cookie, retire_name(s, l, buf, sizeof(buf)),
                             launch_gpu_ns(l));
    if (!l->tag || !l->nrecords)
        return;
    struct np_nccl_comm_stats *c = np_nccl_comms_get(&s->nccl_comms, l->pid, l->tag, NULL);
    for (uint32_t i = 0; c && i < l->nrecords; i++) {
        const struct np_gpu_record *r = l->records[i];
        if (r->end_ns > r->start_ns)
            c->gpu_ns += r->end_ns - r->start_ns;
        c->gpu_records++;
    }
}

static void gpu_unmatched(void *ctx, uint32_t pid, const struct np_gpu_record *r) {
    struct np_session *s = ctx;
    struct np_target *t = np_session_find_target(s, (pid_t)pid);
    struct np_output *out = t ? np_session_output_for(s, t) : s->out;
    if (out)
        np_output_gpu_unmatched(out, r);
}

static bool gpu_is_traced(void *ctx, pid_t pid) {
    struct np_target *t = np_session_find_target(ctx, pid);
    return t && !t->exited;
}

/* The agent's fast path (events.h): while the library serves a process
 * with CUPTI on, its marker takes the launches, and the int3 uprobes of
 * those launch functions are removed; when it goes (or stays out), they
 * come back first. */
static void fast_path_on(struct np_session *s, struct np_target *t) {
    if (!s->attacher.fast_path || t->exited || t->gpu_off || !t->gpu_hello ||
        t->gpu_status != NP_HELLO_ACTIVE || !t->gpu_cupti_known)
        return;
    bool cupti13 = t->gpu_cupti.api_version >= 130000;
    int n = np_attacher_fast_on(&s->attacher, &t->proc, cupti13);
    if (n > 0)
        np_info("pid %d (%s): launches taken at libncclprobe_cupti.so's marker (%d int3 uprobes "
                "removed)",
                t->proc.pid, t->comm, n);
}

static void fast_path_off(struct np_session *s, pid_t pid) {
    if (!s->attacher.fast_path || !np_attacher_fast_is_on(&s->attacher, pid))
        return;
    int n = np_attacher_fast_off(&s->attacher, pid);
    np_info("pid %d: launches taken at their int3 uprobes again (%d attached)", (int)pid, n);
}

static void gpu_on_hello(void *ctx, pid_t pid, const struct np_wire_hello *h) {
    struct np_session *s = ctx;
    struct np_target *t = np_session_find_target(s, pid);
    if (!t)
        return;
    /* a reconnect that says what the last HELLO said is not said again */
    bool again =
        t->gpu_hello && t->gpu_status == h->status && strcmp(t->gpu_message, h->message) == 0;
    t->gpu_hello = true;
    t->gpu_status = h->status;
    if (h->origin == NP_ORIGIN_START && t->agent.origin == NP_AGENT_NONE)
        t->agent.origin = NP_AGENT_AT_START;
    /* A time namespace shifts the target's CLOCK_MONOTONIC: its GPU times
     * are then not on the clock of its launches. Said, not corrected. */
    int64_t offset = (int64_t)(h->clock_mono_ns - np_monotonic_ns());
    if (offset > 1000000000ll || offset < -1000000000ll) {
        t->gpu_clock_offset_ns = offset;
        np_warn("pid %d (%s): its CLOCK_MONOTONIC is %.3f s off ours (a time namespace?): its "
                "GPU start/end times are shifted by that much",
                t->proc.pid, t->comm, (double)offset / 1e9);
    }
    snprintf(t->gpu_message, sizeof(t->gpu_message), "%s", h->message);
    if (h->status == NP_HELLO_ACTIVE) {
        t->gpu_off = false;
        /* A library brought in live said hello: CUPTI is on. What was held
         * before ran while it was off (or had no one to send to). */
        if (t->agent.origin == NP_AGENT_INJECTED || t->agent.origin == NP_AGENT_WOKEN) {
            /* CUPTI was on when the HELLO was sent: on our clock, unless a
             * time namespace shifts the target's (then when it came) */
            uint64_t now = np_monotonic_ns();
            t->gpu_started_ns =
                t->gpu_clock_offset_ns || h->clock_mono_ns > now ? now : h->clock_mono_ns;
            np_gpu_join_library_started(s->gpu_join, (uint32_t)pid, t->gpu_started_ns);
        }
        np_info("pid %d (%s): GPU records from %s", t->proc.pid, t->comm, h->message);
        return;
    }
    fast_path_off(s, pid);
    if (again)
        np_debug("pid %d (%s): no GPU records: %s", t->proc.pid, t->comm, h->message);
    else
        np_warn("pid %d (%s): no GPU records: %s", t->proc.pid, t->comm, h->message);
    t->gpu_off = true;
    np_gpu_join_finish_pid(s->gpu_join, (uint32_t)pid, NP_GPU_NONE);
}

/* The library named a launch handle (one made before we attached): later
 * launches are named at once, held ones when they retire. */
static void gpu_on_names(void *ctx, pid_t pid, uint64_t handle, const char *name, size_t len) {
    struct np_target *t = np_session_find_target(ctx, pid);
    if (!t || !t->kernels)
        return;
    char text[NP_WIRE_MAX_NAME + 1];
    snprintf(text, sizeof(text), "%.*s", (int)len, name);
    int err = np_kernel_names_add(t->kernels, handle, text);
    if (err)
        np_debug("pid %d: kernel name: %s", (int)pid, strerror(-err));
}

static void gpu_on_record(void *ctx, pid_t pid, const struct np_gpu_record *r) {
    struct np_session *s = ctx;
    np_gpu_join_record(s->gpu_join, (uint32_t)pid, r, np_monotonic_ns());
}

/* The CUPTI the library uses: kept for summary.json; layouts it could only
 * assume are warned about (once per process), what it cannot do said. */
static void gpu_on_cupti(void *ctx, pid_t pid, const struct np_wire_cupti *c) {
    struct np_target *t = np_session_find_target(ctx, pid);
    if (!t)
        return;
    bool again = t->gpu_cupti_known && memcmp(&t->gpu_cupti, c, sizeof(*c)) == 0;
    t->gpu_cupti = *c;
    t->gpu_cupti_known = true;
    fast_path_on(ctx, t); /* it follows the HELLO: which CUPTI is known now */
    char lines[sizeof(c->degraded)];
    snprintf(lines, sizeof(lines), "%s", c->degraded);
    bool first = true;
    for (char *save = NULL, *line = strtok_r(lines, "\n", &save); line && !again;
         line = strtok_r(NULL, "\n", &save), first = false) {
        if (first && c->support == NP_CUPTI_ASSUMED) /* the assumption comes first */
            np_warn("pid %d (%s): %s", t->proc.pid, t->comm, line);
        else
            np_info("pid %d (%s): %s", t->proc.pid, t->comm, line);
    }
}

/* A graph node the library announced: replays of it are tied to their
 * capture by its id. */
static void gpu_on_graph_node(void *ctx, pid_t pid, const struct np_wire_graph_node *node) {
    struct np_target *t = np_session_find_target(ctx, pid);
    if (t)
        np_graphs_cupti_node(&t->graphs, node);
}

static void gpu_on_stats(void *ctx, pid_t pid, const struct np_wire_stats *st) {
    struct np_target *t = np_session_find_target(ctx, pid);
    if (t)
        t->gpu_stats = *st;
}

/* The library is gone, but launches it sent records for may still be in
 * the ring buffer: finished once that is read (finish_closed_gpu_clients). */
static void gpu_on_close(void *ctx, pid_t pid) {
    struct np_session *s = ctx;
    fast_path_off(s, pid);
    pid_t *p = realloc(s->gpu_closed, (s->ngpu_closed + 1) * sizeof(*p));
    if (!p) {
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)pid, NP_GPU_PENDING);
        return;
    }
    s->gpu_closed = p;
    s->gpu_closed[s->ngpu_closed++] = pid;
}

static void finish_closed_gpu_clients(struct np_session *s) {
    for (size_t i = 0; i < s->ngpu_closed; i++) {
        struct np_target *t = np_session_find_target(s, s->gpu_closed[i]);
        if (t)
            t->gpu_off = true;
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)s->gpu_closed[i], NP_GPU_PENDING);
    }
    s->ngpu_closed = 0;
}

/* A process maps our library but it never said hello (it sends to another
 * socket, or cannot connect): its launches stop waiting for GPU records. */
#define GPU_HELLO_WAIT_NS 3000000000ull

static void give_up_silent_gpu_clients(struct np_session *s, uint64_t now, bool at_end) {
    for (size_t i = 0; i < s->ntargets; i++) {
        struct np_target *t = s->targets[i];
        if (!t->proc.gpu_marker || t->gpu_hello || t->gpu_off || !t->gpu_first_held_ns ||
            (!at_end && now - t->gpu_first_held_ns < GPU_HELLO_WAIT_NS))
            continue;
        np_warn("pid %d (%s) maps libncclprobe_cupti.so, but it did not connect to %s (is its "
                "NCCLPROBE_CUPTI_SOCKET the same?): launches are written without GPU records",
                t->proc.pid, t->comm, s->opt.cupti_socket);
        t->gpu_off = true;
        snprintf(t->gpu_message, sizeof(t->gpu_message), "did not connect to %s",
                 s->opt.cupti_socket);
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)t->proc.pid, NP_GPU_NONE);
    }
}

int np_session_setup_gpu(struct np_session *s) {
    if (s->opt.no_gpu)
        return 0;
    struct np_gpu_ops jops = {.ctx = s, .retire = gpu_retire, .unmatched = gpu_unmatched};
    s->gpu_join = np_gpu_join_new(&jops, GPU_LINGER_NS,
                                  (uint64_t)s->opt.gpu_timeout_ms * 1000000ull, GPU_MAX_WAITING);
    if (!s->gpu_join)
        return -ENOMEM;
    struct np_gpu_server_ops sops = {.ctx = s,
                                     .is_traced = gpu_is_traced,
                                     .on_hello = gpu_on_hello,
                                     .on_record = gpu_on_record,
                                     .on_names = gpu_on_names,
                                     .on_stats = gpu_on_stats,
                                     .on_cupti = gpu_on_cupti,
                                     .on_graph_node = gpu_on_graph_node,
                                     .on_close = gpu_on_close};
    int err = np_gpu_server_open(s->opt.cupti_socket, &sops, &s->gpu_server);
    if (err == -EEXIST) /* something that is not a socket is there: said, and left alone */
        return err;
    if (err) {
        np_warn("cannot listen for GPU records on %s: %s%s", s->opt.cupti_socket, strerror(-err),
                err == -EADDRINUSE ? " (another ncclprobe listens there; use --cupti-socket)" : "");
        s->gpu_server = NULL;
        return 0; /* stacks are still recorded */
    }
    return np_session_watch(s->epfd, np_gpu_server_fd(s->gpu_server), NP_TAG_GPU);
}

/* The last GPU records of targets still running (their libraries flush
 * every 100 ms), then every launch still waiting is written. */
void np_session_finish_gpu(struct np_session *s) {
    if (!s->gpu_join)
        return;
    uint64_t until = np_monotonic_ns() + GPU_FINAL_WAIT_MS * 1000000ull;
    while (s->gpu_server && np_gpu_join_waiting(s->gpu_join) > 0 && np_monotonic_ns() < until &&
           !np_session_all_targets_gone(s)) {
        usleep(20000);
        np_gpu_server_poll(s->gpu_server);
        finish_closed_gpu_clients(s);
        np_gpu_join_tick(s->gpu_join, np_monotonic_ns());
    }
    if (s->gpu_server)
        np_gpu_server_poll(s->gpu_server);
    finish_closed_gpu_clients(s);
    give_up_silent_gpu_clients(s, np_monotonic_ns(), true);
    np_gpu_join_finish_all(s->gpu_join);
}

void np_session_gpu_tick(struct np_session *s, bool ring_read) {
    if (!s->gpu_join)
        return;
    if (ring_read) /* the ring is read: a closed library's launches are all in */
        finish_closed_gpu_clients(s);
    np_gpu_join_tick(s->gpu_join, np_monotonic_ns());
    give_up_silent_gpu_clients(s, np_monotonic_ns(), false);
    if (s->gpu_server)
        np_gpu_server_tick(s->gpu_server, np_monotonic_ns());
}
