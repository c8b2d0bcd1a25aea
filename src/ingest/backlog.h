/* backlog.h - the records read from the ring buffer and not yet handled.
 * Draining the ring (a copy per record) is cheap; unwinding and
 * symbolizing are not. When the reader falls behind a burst, the records
 * wait here, in memory, instead of in the BPF ring, which would overflow
 * and lose them: the ring is emptied at every turn of the loop, and the
 * backlog is worked off in bounded slices between turns (ingest.c).
 *
 * A FIFO of records in chunks, bounded by a memory budget: a record that
 * does not fit is dropped and counted (never silently). Records are copied
 * whole, header first, 8-byte aligned. One thread: the session's. */
#ifndef NP_INGEST_BACKLOG_H
#define NP_INGEST_BACKLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct np_backlog_chunk;

struct np_backlog {
    struct np_backlog_chunk *head, *tail; /* read from head, appended at tail */
    struct np_backlog_chunk *spare;       /* one emptied chunk, kept for reuse */
    uint64_t budget;                      /* most bytes of chunks held; 0: no limit */
    uint64_t bytes;                       /* bytes of chunks held now (spare excluded) */
    uint64_t records;                     /* records waiting now */
    uint64_t peak_bytes, peak_records;    /* the most ever held */
    uint64_t queued;                      /* records ever queued */
};

void np_backlog_init(struct np_backlog *b, uint64_t budget_bytes);
void np_backlog_free(struct np_backlog *b);
/* Copies a record in; -ENOBUFS when it would take the backlog over its
 * budget (unless forced: over it), -ENOMEM without memory (the record is
 * not kept either way). */
int np_backlog_push(struct np_backlog *b, const void *data, size_t size, bool force);
/* The oldest record and its size, or NULL when none; it stays valid until
 * np_backlog_pop. */
const void *np_backlog_peek(const struct np_backlog *b, size_t *size);
void np_backlog_pop(struct np_backlog *b);

#endif
