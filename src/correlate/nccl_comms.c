/* nccl_comms.c - per-communicator totals (see nccl_comms.h). */
#include "correlate/nccl_comms.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/nccl_plan.h"
#include "lib/util.h"

void np_nccl_comms_init(struct np_nccl_comms *c) {
    memset(c, 0, sizeof(*c));
    np_map_init(&c->index);
}

void np_nccl_comms_free(struct np_nccl_comms *c) {
    np_map_free(&c->index, NULL);
    free(c->items);
    memset(c, 0, sizeof(*c));
}

static bool same_id(const struct np_nccl_comm_id *a, const struct np_nccl_comm_id *b) {
    return a->hash == b->hash && a->rank == b->rank && a->nranks == b->nranks &&
           a->cuda_dev == b->cuda_dev;
}

static struct np_nccl_comm_stats *add_entry(struct np_nccl_comms *c, const char *key, uint32_t pid,
                                            uint64_t comm, const struct np_nccl_comm_id *id) {
    struct np_nccl_comm_stats *items =
        np_grow_array(c->items, &c->cap, c->count + 1, sizeof(*items));
    if (!items)
        return NULL;
    c->items = items;
    if (np_map_put_str(&c->index, key, (void *)(uintptr_t)(c->count + 1)) < 0)
        return NULL;
    struct np_nccl_comm_stats *s = &c->items[c->count++];
    memset(s, 0, sizeof(*s));
    s->pid = pid;
    s->comm = comm;
    if (id)
        s->id = *id;
    return s;
}

/* A pointer can be reused: a communicator destroyed and another created
 * at the same address. A different identity read there starts a new
 * entry (the key then names the newest). */
struct np_nccl_comm_stats *np_nccl_comms_get(struct np_nccl_comms *c, uint32_t pid, uint64_t comm,
                                             const struct np_nccl_comm_id *id) {
    char key[48];
    snprintf(key, sizeof(key), "%u:%" PRIx64, pid, comm);
    uintptr_t at = (uintptr_t)np_map_get_str(&c->index, key);
    if (!at)
        return add_entry(c, key, pid, comm, id);
    struct np_nccl_comm_stats *s = &c->items[at - 1];
    if (id && id->known) {
        if (!s->id.known)
            s->id = *id;
        else if (!same_id(&s->id, id))
            return add_entry(c, key, pid, comm, id);
    }
    return s;
}

int np_nccl_func_of_api(const char *api) {
    for (int f = 0; f < NP_NCCL_FUNCS; f++)
        if (strcmp(api, np_nccl_func_name(f)) == 0)
            return f;
    return -1;
}
