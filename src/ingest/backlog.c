/* backlog.c - the records waiting to be handled (see backlog.h): a FIFO of
 * chunks; a record is a u64 size, its bytes, then padding to 8. */
#include "ingest/backlog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (1u << 20) /* a chunk holds many records; bigger for a bigger record */
#define ALIGN8(n) (((n) + 7) & ~(size_t)7)

struct np_backlog_chunk {
    struct np_backlog_chunk *next;
    size_t cap;        /* bytes of data */
    size_t head, tail; /* read at head, written at tail */
    _Alignas(8) unsigned char data[];
};

void np_backlog_init(struct np_backlog *b, uint64_t budget_bytes) {
    memset(b, 0, sizeof(*b));
    b->budget = budget_bytes;
}

static void free_chunks(struct np_backlog_chunk *c) {
    while (c) {
        struct np_backlog_chunk *next = c->next;
        free(c);
        c = next;
    }
}

void np_backlog_free(struct np_backlog *b) {
    free_chunks(b->head);
    free(b->spare);
    b->head = b->tail = b->spare = NULL;
    b->bytes = 0;
    b->records = 0;
}

/* A chunk with room for need bytes at the tail (a new one appended when the
 * tail chunk is full), or NULL: over the budget (-ENOBUFS; a forced one
 * may go over) or no memory. */
static struct np_backlog_chunk *room(struct np_backlog *b, size_t need, bool force, int *err) {
    if (b->tail && b->tail->cap - b->tail->tail >= need)
        return b->tail;
    size_t cap = need > CHUNK_BYTES ? need : CHUNK_BYTES;
    if (b->budget && !force && b->bytes + sizeof(struct np_backlog_chunk) + cap > b->budget) {
        *err = -ENOBUFS;
        return NULL;
    }
    struct np_backlog_chunk *c = NULL;
    if (b->spare && b->spare->cap >= need) {
        c = b->spare;
        b->spare = NULL;
    } else if (!(c = malloc(sizeof(*c) + cap))) {
        *err = -ENOMEM;
        return NULL;
    } else {
        c->cap = cap;
    }
    c->next = NULL;
    c->head = c->tail = 0;
    if (b->tail)
        b->tail->next = c;
    else
        b->head = c;
    b->tail = c;
    b->bytes += sizeof(*c) + c->cap;
    if (b->bytes > b->peak_bytes)
        b->peak_bytes = b->bytes;
    return c;
}

int np_backlog_push(struct np_backlog *b, const void *data, size_t size, bool force) {
    int err = 0;
    size_t need = sizeof(uint64_t) + ALIGN8(size);
    struct np_backlog_chunk *c = room(b, need, force, &err);
    if (!c)
        return err;
    uint64_t n = size;
    memcpy(c->data + c->tail, &n, sizeof(n));
    memcpy(c->data + c->tail + sizeof(n), data, size);
    c->tail += need;
    b->queued++;
    if (++b->records > b->peak_records)
        b->peak_records = b->records;
    return 0;
}

const void *np_backlog_peek(const struct np_backlog *b, size_t *size) {
    const struct np_backlog_chunk *c = b->head;
    if (!c || c->head == c->tail)
        return NULL;
    uint64_t n;
    memcpy(&n, c->data + c->head, sizeof(n));
    *size = (size_t)n;
    return c->data + c->head + sizeof(n);
}

void np_backlog_pop(struct np_backlog *b) {
    struct np_backlog_chunk *c = b->head;
    if (!c || c->head == c->tail)
        return;
    uint64_t n;
    memcpy(&n, c->data + c->head, sizeof(n));
    c->head += sizeof(n) + ALIGN8((size_t)n);
    b->records--;
    if (c->head < c->tail)
        return;
    /* emptied: the tail chunk is reused in place, any other is released */
    if (c == b->tail) {
        c->head = c->tail = 0;
        return;
    }
    b->head = c->next;
    b->bytes -= sizeof(*c) + c->cap;
    if (!b->spare && c->cap == CHUNK_BYTES)
        b->spare = c;
    else
        free(c);
}
