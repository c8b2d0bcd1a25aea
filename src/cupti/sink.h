/* sink.h - where libncclprobe_cupti.so's GPU records go: a bounded queue of
 * wire frames (gpu_wire.h), drained by one background thread of ours that
 * sends them to ncclprobe's socket (record's or the daemon's; "the daemon"
 * below) or, in file mode (NCCLPROBE_CUPTI_OUTPUT), writes them as
 * Chrome-trace JSON. The thread also flushes CUPTI periodically. Nothing
 * here ever blocks an application thread: a full queue or an absent daemon
 * drops frames and counts them. */
#ifndef NP_CUPTI_SINK_H
#define NP_CUPTI_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct np_frame {
    struct np_frame *next;
    uint32_t len;   /* bytes used in data[] */
    uint32_t cap;   /* bytes allocated for data[] */
    uint32_t count; /* records in the frame */
    /* the records, 8-byte aligned */
    uint8_t data[] __attribute__((aligned(8)));
};

/* Counters the library reports (STATS frames, the trace's otherData). */
struct np_sink_counters {
    uint64_t records_sent;
    uint64_t dropped_by_cupti;
    uint64_t dropped_queue_full;
    uint64_t dropped_no_daemon;
    uint64_t dropped_no_buffer;
    uint64_t records_unknown;
};

struct np_sink_hooks {
    /* Called on the sink thread when a daemon is first reached (socket
     * mode): turns CUPTI on. Returns the hello status and fills message. */
    uint32_t (*activate)(char *message, size_t size);
    /* Called on the sink thread every flush period once active. */
    void (*flush)(void);
};

/* Starts the sink thread. file: NCCLPROBE_CUPTI_OUTPUT or NULL (socket mode,
 * socket_path). In socket mode the daemon is tried once right away, on the
 * caller's thread, so that with a daemon already listening CUPTI is turned
 * on (hooks->activate) before CUDA creates a context; later tries are the
 * thread's, once a second. Returns 0 or a negative errno. */
int np_sink_start(const char *file, const char *socket_path, const struct np_sink_hooks *hooks);
/* Marks CUPTI active (file mode: activation done by the caller). */
void np_sink_set_status(uint32_t status, const char *message);

/* CLOCK_MONOTONIC in ns: the clock of BPF's timestamps, which CUPTI's
 * records are put on too (inject.c registers it as CUPTI's clock). */
uint64_t np_clock_ns(void);

struct np_frame *np_frame_new(size_t cap);
/* Hands a finished ACTIVITY frame to the sink (ownership passes). */
void np_sink_submit(struct np_frame *f);
struct np_sink_counters *np_sink_counters(void);
void np_sink_count(uint64_t *counter, uint64_t n);

/* At exit: drain what is queued, within timeout_ms, then stop. */
void np_sink_stop(int timeout_ms);
/* In a forked child: forget the parent's thread and socket, send nothing. */
void np_sink_forget_after_fork(void);

#endif
