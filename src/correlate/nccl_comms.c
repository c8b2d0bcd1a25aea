/* nccl_comms.c - per-communicator totals (see nccl_comms.h). */
#include "correlate/nccl_comms.h"

#include <stdlib.h>
#include <string.h>

#include "ingest/nccl_plan.h"

void np_nccl_comms_init(struct np_nccl_comms *c) {
    memset(c, 0, sizeof(*c));
    np_map_init(&c->index);
}

void np_nccl_comms_free(struct np_nccl_comms *c) {
    np_map_free(&c->index, NULL);
    free(c->items);
    memset(c, 0, sizeof(*c));
}

/* Pointers are 8-aligned and below 2^56 in user space: mixing in the pid
 * keeps (pid, comm) pairs apart; the entry itself is checked on lookup. */
static uint64_t key_of(uint32_t pid, uint64_t comm) {
    return (comm ^ ((uint64_t)pid << 40) ^ ((uint64_t)pid * 0x9e3779b97f4a7c15ull)) | 1;
}

struct np_nccl_comm_stats *np_nccl_comms_get(struct np_nccl_comms *c, uint32_t pid, uint64_t comm,
                                             const struct np_nccl_comm_id *id) {
    uint64_t key = key_of(pid, comm);
    for (;; key += 2) { /* open addressing over keys on a (rare) clash */
        uintptr_t at = (uintptr_t)np_map_get_u64(&c->index, key);
        if (!at)
            break;
        struct np_nccl_comm_stats *s = &c->items[at - 1];
        if (s->pid == pid && s->comm == comm) {
            if (!s->id.known && id && id->known)
                s->id = *id;
            return s;
        }
    }
    if (c->count == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 8;
        struct np_nccl_comm_stats *items = realloc(c->items, ncap * sizeof(*items));
        if (!items)
            return NULL;
        c->items = items;
        c->cap = ncap;
    }
    if (np_map_put_u64(&c->index, key, (void *)(uintptr_t)(c->count + 1)) < 0)
        return NULL;
    struct np_nccl_comm_stats *s = &c->items[c->count++];
    memset(s, 0, sizeof(*s));
    s->pid = pid;
    s->comm = comm;
    if (id)
        s->id = *id;
    return s;
}

int np_nccl_func_of_api(const char *api) {
    for (int f = 0; f < NP_NCCL_FUNCS; f++)
        if (strcmp(api, np_nccl_func_name(f)) == 0)
            return f;
    return -1;
}
