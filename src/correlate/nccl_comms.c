/* nccl_comms.c - per-communicator totals (see nccl_comms.h). */
#include "correlate/nccl_comms.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/probes.h"
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

/* The API probes' operations, in probe-table order, each once. */
static const char *const *api_slots(void) {
    static const char *slots[NP_NCCL_API_SLOTS + 1];
    static int ready;
    if (ready)
        return slots;
    size_t n, used = 0;
    const struct np_probe_def *defs = np_probe_defs(&n);
    for (size_t i = 0; i < n && used < NP_NCCL_API_SLOTS; i++) {
        if (defs[i].role != NP_ROLE_API || defs[i].layout == NP_LAYOUT_NCCL_GROUP)
            continue;
        bool seen = false;
        for (size_t j = 0; j < used && !seen; j++)
            seen = strcmp(slots[j], defs[i].api) == 0;
        if (!seen)
            slots[used++] = defs[i].api;
    }
    ready = 1;
    return slots;
}

int np_nccl_api_slot(const char *api) {
    const char *const *slots = api_slots();
    for (int i = 0; slots[i]; i++)
        if (strcmp(api, slots[i]) == 0)
            return i;
    return -1;
}

const char *np_nccl_api_slot_name(int slot) {
    return slot >= 0 && slot < NP_NCCL_API_SLOTS ? api_slots()[slot] : NULL;
}
