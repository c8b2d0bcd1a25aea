/* sink.h - where libncclprobe_cupti.so's frames go: a bounded queue of
 * wire frames (gpu_wire.h: ACTIVITY and NAMES), drained by one background
 * thread of ours that sends them to ncclprobe (record's or the daemon's
 * socket, "the daemon" below, or a connected descriptor ncclprobe handed
 * over) or, in file mode (NCCLPROBE_CUPTI_OUTPUT), writes them as
 * Chrome-trace JSON. The thread also flushes CUPTI periodically. Nothing
 * here ever blocks an application thread: a full queue or an absent daemon
 * drops frames and counts them.
 *
 * Connections. With a socket path the library connects at start and then
 * once a second while it has none. A descriptor handed over (np_sink_adopt:
 * an attach from ncclprobe) replaces the connection at once, and becomes the
 * connection when ncclprobe sends NP_WIRE_START on it (gpu_wire.h): CUPTI
 * goes on (the first time) and the HELLO goes out only then. While there is
 * no connection the library is quiet: it sends nothing, and records CUPTI
 * completes are counted as dropped_no_daemon without being converted. Each
 * connection has a number (1, 2, ...) so that what is sent once per
 * connection (a launch handle's name) is sent again to the next one. */
#ifndef NP_CUPTI_SINK_H
#define NP_CUPTI_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ncclprobe/gpu_wire.h"

struct np_frame {
    struct np_frame *next;
    uint32_t len;   /* bytes used in data[] (the frame's header included) */
    uint32_t cap;   /* bytes allocated for data[] */
    uint32_t count; /* records (ACTIVITY) or entries (NAMES) in the frame */
    uint16_t type;  /* NP_WIRE_ACTIVITY or NP_WIRE_NAMES */
    /* the frame: header, count, then the records or entries, 8-byte aligned */
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
    /* Called when a connection is made while CUPTI is not on (the first
     * one, or while another profiler held CUPTI): turns CUPTI on. Returns
     * the hello status and fills message. */
    uint32_t (*activate)(char *message, size_t size);
    /* Called on the sink thread every flush period once active. */
    void (*flush)(void);
    /* Called first on the sink thread, once (may be NULL). */
    void (*started)(void);
};

struct np_sink_config {
    const char *file;        /* file mode: the trace to write (NULL: socket mode) */
    const char *socket_path; /* connect here now and once a second while unconnected (NULL:
                              * only descriptors handed over) */
    int fd;                  /* a connected AF_UNIX stream socket handed over (-1: none),
                              * used once NP_WIRE_START comes on it; the sink owns it
                              * once np_sink_start succeeded */
    uint32_t origin;         /* enum np_hello_origin, said in every HELLO */
};

/* Starts the sink thread. With a socket path the daemon is tried once right
 * away, on the caller's thread, so that with a daemon already listening
 * CUPTI is turned on (hooks->activate) before CUDA creates a context. A
 * descriptor given in cfg->fd is taken up by the thread as np_sink_adopt
 * does (the caller does not wait for CUPTI). Returns 0 or a negative errno (-ESHUTDOWN once
 * stopped: a sink starts once). */
int np_sink_start(const struct np_sink_config *cfg, const struct np_sink_hooks *hooks);
/* Whether the thread runs and is not stopping. */
bool np_sink_running(void);
/* Hands over a connected AF_UNIX stream socket: the thread closes the
 * current connection, and continues on fd once NP_WIRE_START comes on it
 * (HELLO first). Does not wait.
 * 0 (fd is the sink's), or -ESHUTDOWN (not running, or stopping), -EEXIST
 * (file mode): fd is left to the caller. */
int np_sink_adopt(int fd);
/* Marks CUPTI active (file mode: activation done by the caller). */
void np_sink_set_status(uint32_t status, const char *message);
/* The CUPTI in use (all of it but the header), said after every HELLO from
 * now on (NP_WIRE_CUPTI), and in the trace file's otherData. From the
 * activate hook, or before anything is sent. */
void np_sink_set_cupti(const struct np_wire_cupti *info);

/* The current connection's number while a daemon listens; 0 while none
 * does, and always in file mode. Any thread. */
uint32_t np_sink_connection(void);
/* Whether completed records are wanted: a daemon listens, or file mode. */
bool np_sink_wants_records(void);

/* CLOCK_MONOTONIC in ns: the clock of BPF's timestamps, which CUPTI's
 * records are put on too (inject.c registers it as CUPTI's clock). */
uint64_t np_clock_ns(void);

/* A frame of type (NP_WIRE_ACTIVITY, NP_WIRE_NAMES) with room for cap
 * bytes, its header included; NULL when out of memory. */
struct np_frame *np_frame_new(uint16_t type, size_t cap);
/* Hands a finished frame to the sink (ownership passes). False when it was
 * dropped (queue full, sink not running); an ACTIVITY frame's records are
 * then counted as dropped_queue_full. */
bool np_sink_submit(struct np_frame *f);
struct np_sink_counters *np_sink_counters(void);
void np_sink_count(uint64_t *counter, uint64_t n);

/* At exit: drain what is queued, within timeout_ms, then stop. */
void np_sink_stop(int timeout_ms);
/* In a forked child: forget the parent's thread and sockets, send nothing. */
void np_sink_forget_after_fork(void);

#endif
