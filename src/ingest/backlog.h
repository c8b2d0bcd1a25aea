/* backlog.h - the records read from the ring buffer and not yet handled.
 * Draining the ring (a copy per record) is cheap; unwinding and
 * symbolizing are not, and a first look at a library's debug info can take
 * tens of milliseconds. A thread of its own (drain.c) empties the BPF ring
 * into this backlog, so a burst, or a stall of the reader, waits here in
 * memory instead of overflowing the ring; the session's thread works it
 * off (ingest.c).
 *
 * A FIFO of records in chunks, bounded by a memory budget: a record that
 * does not fit is dropped and counted (never silently). One producer (the
 * drain thread), one consumer (the session's thread), one lock, never held
 * while a record is copied. The
 * consumer goes over each record twice: first as soon as it can (scan:
 * what cannot wait - new code to probe, Python code objects that may not
 * live long), then in turn (peek/pop: unwinding, symbolizing, writing).
 *
 * Chunks are never mapped or unmapped under the lock: a fresh chunk's pages
 * are zeroed by the kernel (milliseconds per chunk on a VM), and the drain
 * thread must not wait that long for a consumer holding the lock, nor the
 * other way round. Emptied chunks are kept for reuse up to the most that
 * were in use in the last few seconds, so a reader that falls behind again
 * and again reuses memory instead of faulting in fresh pages each time. */
#ifndef NP_INGEST_BACKLOG_H
#define NP_INGEST_BACKLOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct np_backlog_chunk;

/* A record's flags in the backlog. */
enum { NP_BACKLOG_DONE = 1 }; /* handled when scanned: pop it without handling it again */

struct np_backlog {
    pthread_mutex_t lock;
    struct np_backlog_chunk *head, *tail; /* read from head, appended at tail */
    struct np_backlog_chunk *scan;        /* the chunk of the next record to scan */
    size_t scan_off;
    struct np_backlog_chunk *spare; /* emptied chunks, kept for reuse */
    uint64_t nspare;
    uint64_t nchunks;                  /* chunks holding records now */
    uint64_t window_peak;              /* the most chunks held since window_ns */
    uint64_t window_ns;                /* when this window of np_backlog_trim began */
    uint64_t mapped, unmapped;         /* chunks ever mapped and unmapped */
    uint64_t budget;                   /* most bytes of chunks held; 0: no limit */
    size_t chunk_bytes;                /* a chunk's room for records (a bigger record: more) */
    uint64_t bytes;                    /* bytes of chunks held now (spare ones excluded) */
    uint64_t queued, scanned, popped;  /* records ever queued, scanned, popped */
    uint64_t peak_bytes, peak_records; /* the most ever held */
    /* records that did not fit: launch records (also per probe called) and others */
    uint64_t dropped_launches, dropped_other;
    uint64_t *dropped_by_probe;
    size_t dropped_by_probe_len;
};

void np_backlog_init(struct np_backlog *b, uint64_t budget_bytes);
void np_backlog_free(struct np_backlog *b);
/* Copies a record in (the producer); -ENOBUFS when it would take the
 * backlog over its budget (unless forced: over it), -ENOMEM without memory;
 * the record is not kept then. */
int np_backlog_push(struct np_backlog *b, const void *data, size_t size, bool force);
/* The next record not scanned yet, or NULL; *flags may be changed. */
void *np_backlog_scan(struct np_backlog *b, size_t *size, uint32_t **flags);
/* Takes the last np_backlog_scan back (size: what it said): that record is
 * scanned again next time, and nothing after it is handled before. */
void np_backlog_unscan(struct np_backlog *b, size_t size);
/* Records scanned and not popped yet. */
uint64_t np_backlog_scanned_waiting(struct np_backlog *b);
/* The oldest record scanned and not popped, or NULL; valid until popped. */
const void *np_backlog_peek(struct np_backlog *b, size_t *size, uint32_t *flags);
void np_backlog_pop(struct np_backlog *b);
/* np_backlog_pop, then np_backlog_peek, under one lock. */
const void *np_backlog_pop_peek(struct np_backlog *b, size_t *size, uint32_t *flags);
/* A place in the backlog, to look at the records after the head without
 * popping them (the consumer hands them to worker threads ahead of turn). */
struct np_backlog_cursor {
    struct np_backlog_chunk *chunk;
    size_t off;
    uint64_t n; /* records passed */
};
/* Puts *cur at the oldest record not popped. */
void np_backlog_ahead_start(struct np_backlog *b, struct np_backlog_cursor *cur);
/* The record at *cur, which then moves on; NULL past the last record
 * scanned. Valid until popped: nothing may be popped while *cur is used. */
const void *np_backlog_ahead(struct np_backlog *b, struct np_backlog_cursor *cur, size_t *size,
                             uint32_t *flags);
/* Gives back the spare chunks that the last few seconds did not need
 * (the consumer, now and then; not under the lock). */
void np_backlog_trim(struct np_backlog *b);
/* Records waiting now (queued, not popped). */
uint64_t np_backlog_waiting(struct np_backlog *b);
/* Launch records dropped so far (another thread may be dropping more). */
uint64_t np_backlog_dropped_launches(struct np_backlog *b);
/* A launch record (probe called: id) or another record was dropped. */
void np_backlog_count_drop(struct np_backlog *b, bool launch, uint32_t id);

#endif
