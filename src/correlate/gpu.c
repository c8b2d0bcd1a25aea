/* gpu.c - the streaming launch <-> GPU record join (see gpu.h). Three
 * indexes over the waiting launches: by thread (the launch a marker joins),
 * by correlation id (the launch a record joins) and by age (timeouts).
 * Records that come before their id is claimed wait in `orphans`. */
#define _GNU_SOURCE
#include "correlate/gpu.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/hashmap.h"

#define CUPTI_DOMAIN_DRIVER 1
#define CUPTI_DOMAIN_RUNTIME 2

/* Records of one id that no launch has claimed yet. */
struct orphan {
    uint64_t key; /* pid << 32 | id */
    uint64_t first_ns;
    struct np_gpu_record **records;
    uint32_t n, cap;
    struct orphan *prev, *next; /* age order */
};

struct np_gpu_join {
    struct np_gpu_ops ops;
    uint64_t linger_ns, timeout_ns, max_pending;
    struct np_map by_thread; /* pid << 32 | tid -> the thread's open launch */
    struct np_map by_id;     /* pid << 32 | id -> launch */
    struct np_map orphans;   /* pid << 32 | id -> struct orphan */
    struct np_gpu_launch *oldest, *newest;
    struct orphan *oldest_orphan, *newest_orphan;
    size_t waiting, orphan_records;
    struct np_gpu_counters counters;
};

static uint64_t key_of(uint32_t pid, uint32_t low) {
    return (uint64_t)pid << 32 | low;
}

struct np_gpu_join *np_gpu_join_new(const struct np_gpu_ops *ops, uint64_t linger_ns,
                                    uint64_t timeout_ns, uint64_t max_pending) {
    struct np_gpu_join *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->ops = *ops;
    j->linger_ns = linger_ns;
    j->timeout_ns = timeout_ns > linger_ns ? timeout_ns : linger_ns;
    j->max_pending = max_pending ? max_pending : 1;
    np_map_init(&j->by_thread);
    np_map_init(&j->by_id);
    np_map_init(&j->orphans);
    return j;
}

const struct np_gpu_counters *np_gpu_join_counters(const struct np_gpu_join *j) {
    return &j->counters;
}

size_t np_gpu_join_waiting(const struct np_gpu_join *j) {
    return j->waiting;
}

static struct np_gpu_record *copy_record(const struct np_gpu_record *r) {
    struct np_gpu_record *c = malloc(r->size);
    if (c)
        memcpy(c, r, r->size);
    return c;
}

static int push_record(struct np_gpu_record ***arr, uint32_t *n, uint32_t *cap,
                       struct np_gpu_record *r) {
    if (*n == *cap) {
        uint32_t new_cap = *cap ? *cap * 2 : 2;
        struct np_gpu_record **p = realloc(*arr, new_cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        *arr = p;
        *cap = new_cap;
    }
    (*arr)[(*n)++] = r;
    return 0;
}

/* ---- launches ----------------------------------------------------------- */

static void unlink_launch(struct np_gpu_join *j, struct np_gpu_launch *l) {
    if (l->prev)
        l->prev->next = l->next;
    else
        j->oldest = l->next;
    if (l->next)
        l->next->prev = l->prev;
    else
        j->newest = l->prev;
    j->waiting--;
}

static void free_launch(struct np_gpu_launch *l) {
    for (uint32_t i = 0; i < l->nrecords; i++)
        free(l->records[i]);
    free(l->records);
    free(l->json);
    free(l->ext);
    free(l->cpu_kernel);
    if (l->free_extra)
        l->free_extra(l->extra);
    free(l);
}

static void retire(struct np_gpu_join *j, struct np_gpu_launch *l, enum np_gpu_status if_none) {
    enum np_gpu_status status = l->nrecords       ? NP_GPU_MATCHED
                                : l->before_start ? NP_GPU_NONE
                                                  : if_none;
    if (status == NP_GPU_MATCHED)
        j->counters.launches_matched++;
    else if (status == NP_GPU_PENDING)
        j->counters.launches_pending++;
    j->ops.retire(j->ops.ctx, l, status);
    unlink_launch(j, l);
    for (uint32_t i = 0; i < l->nids; i++) {
        uint64_t key = key_of(l->pid, l->ids[i]);
        if (np_map_get_u64(&j->by_id, key) == l)
            np_map_del_u64(&j->by_id, key);
    }
    uint64_t tkey = key_of(l->pid, l->tid);
    if (np_map_get_u64(&j->by_thread, tkey) == l)
        np_map_del_u64(&j->by_thread, tkey);
    free_launch(l);
}

int np_gpu_join_launch(struct np_gpu_join *j, uint32_t pid, uint32_t tid,
                       const struct np_gpu_held *held, bool runtime_api, uint64_t now) {
    struct np_gpu_launch *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->pid = pid, l->tid = tid, l->stack_id = held->stack_id, l->tag = held->tag;
    l->owner = held->owner, l->handle = held->handle, l->cookie = held->cookie;
    l->accepts_runtime = runtime_api;
    l->before_start = held->before_start;
    l->added_ns = now;
    l->json = strdup(held->json);
    l->ext = strdup(held->ext ? held->ext : "");
    l->cpu_kernel = strdup(held->cpu_kernel);
    if (!l->json || !l->ext || !l->cpu_kernel ||
        np_map_put_u64(&j->by_thread, key_of(pid, tid), l) < 0) {
        free_launch(l); /* the extra stays the caller's */
        return -ENOMEM;
    }
    l->extra = held->extra, l->free_extra = held->free_extra;
    l->prev = j->newest;
    if (j->newest)
        j->newest->next = l;
    else
        j->oldest = l;
    j->newest = l;
    j->waiting++;
    j->counters.launches_held++;
    while (j->waiting > j->max_pending) {
        j->counters.launches_evicted++;
        retire(j, j->oldest, NP_GPU_PENDING);
    }
    return 0;
}

/* ---- orphans -------------------------------------------------------------- */

static void unlink_orphan(struct np_gpu_join *j, struct orphan *o) {
    if (o->prev)
        o->prev->next = o->next;
    else
        j->oldest_orphan = o->next;
    if (o->next)
        o->next->prev = o->prev;
    else
        j->newest_orphan = o->prev;
    np_map_del_u64(&j->orphans, o->key);
    j->orphan_records -= o->n;
}

static void expire_orphan(struct np_gpu_join *j, struct orphan *o) {
    unlink_orphan(j, o);
    for (uint32_t i = 0; i < o->n; i++) {
        j->counters.records_unmatched++;
        if (j->ops.unmatched)
            j->ops.unmatched(j->ops.ctx, (uint32_t)(o->key >> 32), o->records[i]);
        free(o->records[i]);
    }
    free(o->records);
    free(o);
}

static void add_orphan(struct np_gpu_join *j, uint32_t pid, const struct np_gpu_record *r,
                       uint64_t now) {
    uint64_t key = key_of(pid, r->correlation_id);
    struct orphan *o = np_map_get_u64(&j->orphans, key);
    struct np_gpu_record *copy = NULL;
    if (j->orphan_records < j->max_pending)
        copy = copy_record(r);
    if (copy && !o && (o = calloc(1, sizeof(*o)))) {
        o->key = key;
        o->first_ns = now;
        if (np_map_put_u64(&j->orphans, key, o) < 0) {
            free(o);
            o = NULL;
        } else {
            o->prev = j->newest_orphan;
            if (j->newest_orphan)
                j->newest_orphan->next = o;
            else
                j->oldest_orphan = o;
            j->newest_orphan = o;
        }
    }
    if (!copy || !o || push_record(&o->records, &o->n, &o->cap, copy) < 0) {
        free(copy); /* no room to wait: written now, without a stack */
        j->counters.records_unmatched++;
        if (j->ops.unmatched)
            j->ops.unmatched(j->ops.ctx, pid, r);
        return;
    }
    j->orphan_records++;
}

/* The launch l just claimed id: records that came first are its own. */
static void adopt_orphans(struct np_gpu_join *j, struct np_gpu_launch *l, uint32_t id,
                          uint64_t now) {
    struct orphan *o = np_map_get_u64(&j->orphans, key_of(l->pid, id));
    if (!o)
        return;
    unlink_orphan(j, o);
    for (uint32_t i = 0; i < o->n; i++) {
        if (push_record(&l->records, &l->nrecords, &l->records_cap, o->records[i]) < 0) {
            free(o->records[i]);
            j->counters.records_unmatched++;
            continue;
        }
        j->counters.records_matched++;
        l->last_record_ns = now;
    }
    free(o->records);
    free(o);
}

/* ---- markers and records ------------------------------------------------ */

void np_gpu_join_marker(struct np_gpu_join *j, uint32_t pid, uint32_t tid, uint32_t id,
                        uint32_t domain, uint64_t now) {
    j->counters.markers++;
    struct np_gpu_launch *l = np_map_get_u64(&j->by_thread, key_of(pid, tid));
    uint8_t bit = (uint8_t)(1u << (domain & 7));
    bool fits = l && (domain == CUPTI_DOMAIN_DRIVER ||
                      (domain == CUPTI_DOMAIN_RUNTIME && l->accepts_runtime));
    if (fits && (l->domains_seen & bit)) {
        for (uint32_t i = 0; i < l->nids; i++)
            if (l->ids[i] == id)
                return; /* the same id again (a driver call sharing the runtime's id) */
        fits = false;   /* a second call of that kind: a launch we do not probe */
    }
    if (!fits || l->nids == NP_GPU_MAX_IDS || np_map_put_u64(&j->by_id, key_of(pid, id), l) < 0) {
        j->counters.markers_unpaired++;
        return;
    }
    l->domains_seen |= bit;
    l->ids[l->nids++] = id;
    adopt_orphans(j, l, id, now);
}

void np_gpu_join_record(struct np_gpu_join *j, uint32_t pid, const struct np_gpu_record *r,
                        uint64_t now) {
    j->counters.records++;
    struct np_gpu_launch *l = np_map_get_u64(&j->by_id, key_of(pid, r->correlation_id));
    if (!l) {
        add_orphan(j, pid, r, now);
        return;
    }
    struct np_gpu_record *copy = copy_record(r);
    if (!copy || push_record(&l->records, &l->nrecords, &l->records_cap, copy) < 0) {
        free(copy);
        j->counters.records_unmatched++;
        if (j->ops.unmatched)
            j->ops.unmatched(j->ops.ctx, pid, r);
        return;
    }
    j->counters.records_matched++;
    l->last_record_ns = now;
}

/* ---- retiring --------------------------------------------------------------- */

void np_gpu_join_library_started(struct np_gpu_join *j, uint32_t pid, uint64_t started_ns) {
    for (struct np_gpu_launch *l = j->oldest; l; l = l->next)
        if (l->pid == pid && l->added_ns < started_ns)
            l->before_start = true;
}

void np_gpu_join_tick(struct np_gpu_join *j, uint64_t now) {
    struct np_gpu_launch *l = j->oldest;
    /* A launch younger than the linger cannot be due: records come after it. */
    while (l && now - l->added_ns >= j->linger_ns) {
        struct np_gpu_launch *next = l->next;
        bool due = l->nrecords ? now - l->last_record_ns >= j->linger_ns
                               : now - l->added_ns >= j->timeout_ns;
        if (due)
            retire(j, l, NP_GPU_PENDING);
        l = next;
    }
    while (j->oldest_orphan && now - j->oldest_orphan->first_ns >= j->timeout_ns)
        expire_orphan(j, j->oldest_orphan);
}

void np_gpu_join_finish_pid(struct np_gpu_join *j, uint32_t pid,
                            enum np_gpu_status status_if_none) {
    for (struct np_gpu_launch *l = j->oldest, *next; l; l = next) {
        next = l->next;
        if (l->pid == pid)
            retire(j, l, status_if_none);
    }
    for (struct orphan *o = j->oldest_orphan, *next; o; o = next) {
        next = o->next;
        if ((uint32_t)(o->key >> 32) == pid)
            expire_orphan(j, o);
    }
}

void np_gpu_join_finish_all(struct np_gpu_join *j) {
    while (j->oldest)
        retire(j, j->oldest, NP_GPU_PENDING);
    while (j->oldest_orphan)
        expire_orphan(j, j->oldest_orphan);
}

void np_gpu_join_free(struct np_gpu_join *j) {
    if (!j)
        return;
    while (j->oldest) {
        struct np_gpu_launch *l = j->oldest;
        unlink_launch(j, l);
        free_launch(l);
    }
    while (j->oldest_orphan) {
        struct orphan *o = j->oldest_orphan;
        unlink_orphan(j, o);
        for (uint32_t i = 0; i < o->n; i++)
            free(o->records[i]);
        free(o->records);
        free(o);
    }
    np_map_free(&j->by_thread, NULL);
    np_map_free(&j->by_id, NULL);
    np_map_free(&j->orphans, NULL);
    free(j);
}
