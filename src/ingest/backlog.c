/* backlog.c - the records waiting to be handled (see backlog.h): a FIFO of
 * chunks; a record is a u32 size, u32 flags, its bytes, padding to 8.
 * Chunks are mapped with their pages populated (one fault-free call, not a
 * page fault per record as the backlog grows), outside the lock, and
 * emptied ones are kept for reuse as long as recent use says they may be
 * needed again (np_backlog_trim). */
#include "ingest/backlog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lib/util.h"

/* A chunk holds many records (bigger for a bigger record): 4 MiB, or an
 * eighth of a smaller budget. */
#define CHUNK_BYTES (4u << 20)
#define MIN_CHUNK_BYTES (64u << 10)
/* Emptied chunks kept however quiet the reader: a burst's are kept by the
 * window below, so a quiet daemon holds 8 MiB, not the 32 MiB the fixed
 * 8 spares of before held forever after one burst. */
#define MIN_SPARE 2
/* Spare chunks beyond MIN_SPARE are kept while a window this long needed
 * them: what a burst mapped is given back 5-10 s after the last such burst. */
#define SPARE_WINDOW_NS 5000000000ull
#define ALIGN8(n) (((n) + 7) & ~(size_t)7)

struct rec_head {
    uint32_t size, flags;
};

struct np_backlog_chunk {
    struct np_backlog_chunk *next;
    size_t map_len;    /* the whole mapping, this header included */
    size_t cap;        /* bytes of data */
    size_t head, tail; /* read at head, written at tail */
    _Alignas(8) unsigned char data[];
};

void np_backlog_init(struct np_backlog *b, uint64_t budget_bytes) {
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->lock, NULL);
    b->budget = budget_bytes;
    b->window_ns = np_monotonic_ns();
    b->chunk_bytes = CHUNK_BYTES;
    if (budget_bytes && budget_bytes / 8 < CHUNK_BYTES)
        b->chunk_bytes = budget_bytes / 8 > MIN_CHUNK_BYTES ? budget_bytes / 8 : MIN_CHUNK_BYTES;
}

static void unmap_chunks(struct np_backlog_chunk *c) {
    while (c) {
        struct np_backlog_chunk *next = c->next;
        munmap(c, c->map_len);
        c = next;
    }
}

void np_backlog_free(struct np_backlog *b) {
    unmap_chunks(b->head);
    unmap_chunks(b->spare);
    free(b->dropped_by_probe);
    pthread_mutex_destroy(&b->lock);
    memset(b, 0, sizeof(*b));
}

/* A spare chunk with room for need bytes, or NULL; the lock is held. */
static struct np_backlog_chunk *take_spare(struct np_backlog *b, size_t need) {
    struct np_backlog_chunk *c = b->spare;
    if (!c || c->cap < need)
        return NULL;
    b->spare = c->next;
    b->nspare--;
    return c;
}

/* A new chunk; the lock is not held (populating it takes milliseconds). */
static struct np_backlog_chunk *map_chunk(size_t cap) {
    size_t len = sizeof(struct np_backlog_chunk) + cap;
    struct np_backlog_chunk *c =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (c == MAP_FAILED)
        return NULL;
    c->map_len = len;
    c->cap = cap;
    return c;
}

/* Appends c at the tail; the lock is held. */
static void append_chunk(struct np_backlog *b, struct np_backlog_chunk *c) {
    c->next = NULL;
    c->head = c->tail = 0;
    if (b->tail)
        b->tail->next = c;
    else
        b->head = c;
    if (!b->scan) /* everything before was scanned */
        b->scan = c, b->scan_off = 0;
    b->tail = c;
    b->bytes += c->map_len;
    if (b->bytes > b->peak_bytes)
        b->peak_bytes = b->bytes;
    if (++b->nchunks > b->window_peak)
        b->window_peak = b->nchunks;
}

/* A chunk with room for need bytes at the tail (a new one appended when the
 * tail chunk is full), or NULL: over the budget (-ENOBUFS; a forced record
 * may go over) or no memory (-ENOMEM). Taken with the lock held, which is
 * dropped while a chunk is mapped: only this thread appends or adds bytes,
 * so the budget still holds when it is taken again. */
static struct np_backlog_chunk *room(struct np_backlog *b, size_t need, bool force, int *err) {
    if (b->tail && b->tail->cap - b->tail->tail >= need)
        return b->tail;
    size_t cap = need > b->chunk_bytes ? need : b->chunk_bytes;
    if (b->budget && !force && b->bytes + sizeof(struct np_backlog_chunk) + cap > b->budget) {
        *err = -ENOBUFS;
        return NULL;
    }
    struct np_backlog_chunk *c = take_spare(b, need);
    if (!c) {
        pthread_mutex_unlock(&b->lock);
        c = map_chunk(cap);
        pthread_mutex_lock(&b->lock);
        if (!c) {
            *err = -ENOMEM;
            return NULL;
        }
        b->mapped++;
    }
    append_chunk(b, c);
    return c;
}

int np_backlog_push(struct np_backlog *b, const void *data, size_t size, bool force) {
    int err = 0;
    size_t need = sizeof(struct rec_head) + ALIGN8(size);
    pthread_mutex_lock(&b->lock);
    struct np_backlog_chunk *c = room(b, need, force, &err);
    size_t at = c ? c->tail : 0;
    pthread_mutex_unlock(&b->lock);
    if (!c)
        return err;
    /* Copied without the lock: c is the tail chunk, which the consumer
     * neither frees nor reads past its tail, and this is the only producer. */
    struct rec_head h = {.size = (uint32_t)size};
    memcpy(c->data + at, &h, sizeof(h));
    memcpy(c->data + at + sizeof(h), data, size);
    pthread_mutex_lock(&b->lock);
    c->tail = at + need;
    b->queued++;
    if (b->queued - b->popped > b->peak_records)
        b->peak_records = b->queued - b->popped;
    pthread_mutex_unlock(&b->lock);
    return 0;
}

void *np_backlog_scan(struct np_backlog *b, size_t *size, uint32_t **flags) {
    void *rec = NULL;
    pthread_mutex_lock(&b->lock);
    struct np_backlog_chunk *c = b->scan;
    if (c && b->scan_off == c->tail && c->next) /* this chunk is done: on to the next */
        c = b->scan = c->next, b->scan_off = 0;
    if (c && b->scan_off < c->tail) {
        struct rec_head *h = (struct rec_head *)(c->data + b->scan_off);
        *size = h->size;
        *flags = &h->flags;
        rec = h + 1;
        b->scan_off += sizeof(*h) + ALIGN8((size_t)h->size);
        b->scanned++;
    }
    pthread_mutex_unlock(&b->lock);
    return rec;
}

void np_backlog_unscan(struct np_backlog *b, size_t size) {
    pthread_mutex_lock(&b->lock);
    b->scan_off -= sizeof(struct rec_head) + ALIGN8(size);
    b->scanned--;
    pthread_mutex_unlock(&b->lock);
}

uint64_t np_backlog_scanned_waiting(struct np_backlog *b) {
    pthread_mutex_lock(&b->lock);
    uint64_t n = b->scanned - b->popped;
    pthread_mutex_unlock(&b->lock);
    return n;
}

/* Emptied chunks at the head go once the producer has moved on from them
 * (the scan moves on with them): kept as spares, or, one bigger than the
 * rest (a huge record's), put on *gone to be unmapped after the lock. */
static void release_head(struct np_backlog *b, struct np_backlog_chunk **gone) {
    struct np_backlog_chunk *c;
    while ((c = b->head) && c->head == c->tail && c->next) {
        if (c == b->scan) {
            if (b->scan_off < c->tail)
                return;
            b->scan = c->next, b->scan_off = 0;
        }
        b->head = c->next;
        b->bytes -= c->map_len;
        b->nchunks--;
        if (c->cap == b->chunk_bytes) {
            c->next = b->spare;
            b->spare = c;
            b->nspare++;
        } else {
            c->next = *gone;
            *gone = c;
            b->unmapped++;
        }
    }
}

void np_backlog_trim(struct np_backlog *b) {
    struct np_backlog_chunk *gone = NULL;
    uint64_t now = np_monotonic_ns();
    pthread_mutex_lock(&b->lock);
    if (now - b->window_ns >= SPARE_WINDOW_NS) {
        /* the window's peak, less what is in use, may be needed again */
        uint64_t keep = b->window_peak > b->nchunks ? b->window_peak - b->nchunks : 0;
        if (keep < MIN_SPARE)
            keep = MIN_SPARE;
        while (b->nspare > keep) {
            struct np_backlog_chunk *c = take_spare(b, 0);
            c->next = gone;
            gone = c;
            b->unmapped++;
        }
        b->window_ns = now;
        b->window_peak = b->nchunks;
    }
    pthread_mutex_unlock(&b->lock);
    unmap_chunks(gone);
}

/* The record at the head, if scanned; the lock is held. */
static const void *head_record(struct np_backlog *b, size_t *size, uint32_t *flags,
                               struct np_backlog_chunk **gone) {
    release_head(b, gone);
    struct np_backlog_chunk *c = b->head;
    if (!c || b->popped >= b->scanned || c->head >= c->tail)
        return NULL;
    const struct rec_head *h = (const struct rec_head *)(c->data + c->head);
    *size = h->size;
    *flags = h->flags;
    return h + 1;
}

static void pop_locked(struct np_backlog *b, struct np_backlog_chunk **gone) {
    size_t size;
    uint32_t flags;
    if (!head_record(b, &size, &flags, gone))
        return;
    b->head->head += sizeof(struct rec_head) + ALIGN8(size);
    b->popped++;
    release_head(b, gone);
}

const void *np_backlog_peek(struct np_backlog *b, size_t *size, uint32_t *flags) {
    struct np_backlog_chunk *gone = NULL;
    pthread_mutex_lock(&b->lock);
    const void *rec = head_record(b, size, flags, &gone);
    pthread_mutex_unlock(&b->lock);
    unmap_chunks(gone);
    return rec;
}

void np_backlog_pop(struct np_backlog *b) {
    struct np_backlog_chunk *gone = NULL;
    pthread_mutex_lock(&b->lock);
    pop_locked(b, &gone);
    pthread_mutex_unlock(&b->lock);
    unmap_chunks(gone);
}

const void *np_backlog_pop_peek(struct np_backlog *b, size_t *size, uint32_t *flags) {
    struct np_backlog_chunk *gone = NULL;
    pthread_mutex_lock(&b->lock);
    pop_locked(b, &gone);
    const void *rec = head_record(b, size, flags, &gone);
    pthread_mutex_unlock(&b->lock);
    unmap_chunks(gone);
    return rec;
}

void np_backlog_ahead_start(struct np_backlog *b, struct np_backlog_cursor *cur) {
    pthread_mutex_lock(&b->lock);
    cur->chunk = b->head;
    cur->off = b->head ? b->head->head : 0;
    cur->n = 0;
    pthread_mutex_unlock(&b->lock);
}

const void *np_backlog_ahead(struct np_backlog *b, struct np_backlog_cursor *cur, size_t *size,
                             uint32_t *flags) {
    const struct rec_head *h = NULL;
    pthread_mutex_lock(&b->lock);
    if (b->popped + cur->n < b->scanned) {   /* so the record is there, below the scan */
        while (cur->off >= cur->chunk->tail) /* a chunk's records start at 0 past the head's */
            cur->chunk = cur->chunk->next, cur->off = 0;
        h = (const struct rec_head *)(cur->chunk->data + cur->off);
        cur->off += sizeof(*h) + ALIGN8((size_t)h->size);
        cur->n++;
        *size = h->size;
        *flags = h->flags;
    }
    pthread_mutex_unlock(&b->lock);
    return h ? h + 1 : NULL;
}

uint64_t np_backlog_waiting(struct np_backlog *b) {
    pthread_mutex_lock(&b->lock);
    uint64_t n = b->queued - b->popped;
    pthread_mutex_unlock(&b->lock);
    return n;
}

uint64_t np_backlog_dropped_launches(struct np_backlog *b) {
    pthread_mutex_lock(&b->lock);
    uint64_t n = b->dropped_launches;
    pthread_mutex_unlock(&b->lock);
    return n;
}

void np_backlog_count_drop(struct np_backlog *b, bool launch, uint32_t id) {
    pthread_mutex_lock(&b->lock);
    if (!launch) {
        b->dropped_other++;
    } else {
        b->dropped_launches++;
        if (id >= b->dropped_by_probe_len) {
            size_t n = b->dropped_by_probe_len ? b->dropped_by_probe_len : 64;
            while (n <= id)
                n *= 2;
            uint64_t *p = realloc(b->dropped_by_probe, n * sizeof(*p));
            if (p) {
                memset(p + b->dropped_by_probe_len, 0, (n - b->dropped_by_probe_len) * sizeof(*p));
                b->dropped_by_probe = p;
                b->dropped_by_probe_len = n;
            }
        }
        if (id < b->dropped_by_probe_len)
            b->dropped_by_probe[id]++;
    }
    pthread_mutex_unlock(&b->lock);
}
