/* hashmap.c - open addressing with linear probing (see hashmap.h).
 * Deletion shifts later entries of the probe run back (no tombstones), so
 * a map used as a streaming index stays as fast as a fresh one. */
#include "lib/hashmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

/* MurmurHash3's 64-bit block mixing, one lane, 8 bytes a step: the reader
 * hashes every launch's whole stack text (kilobytes for a Python stack), and
 * FNV-1a's byte-at-a-time multiply chain made that its hottest loop. */
uint64_t np_hash_bytes(const void *data, size_t len) {
    const uint64_t c1 = 0x87c37b91114253d5ull, c2 = 0x4cf5ad432745937full;
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h ^= rotl64(k * c1, 31) * c2;
        h = rotl64(h, 27) * 5 + 0x52dce729;
    }
    uint64_t tail = 0;
    if (len) /* p may be NULL when nothing is hashed (an empty np_str) */
        memcpy(&tail, p, len);
    h ^= rotl64(tail * c1, 31) * c2;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

void np_map_init(struct np_map *m) {
    memset(m, 0, sizeof(*m));
}

void np_map_free(struct np_map *m, void (*free_value)(void *)) {
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used)
            continue;
        free(m->slots[i].skey);
        if (free_value)
            free_value(m->slots[i].value);
    }
    free(m->slots);
    np_map_init(m);
}

static struct np_map_entry *find_slot(const struct np_map *m, uint64_t hash, uint64_t ikey,
                                      const char *skey) {
    size_t mask = m->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        struct np_map_entry *e = &m->slots[i];
        if (!e->used)
            return e;
        if (e->hash != hash)
            continue;
        if (skey ? (e->skey && strcmp(e->skey, skey) == 0) : (!e->skey && e->ikey == ikey))
            return e;
    }
}

static int grow(struct np_map *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    struct np_map_entry *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    struct np_map old = *m;
    m->slots = slots;
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.slots[i].used)
            continue;
        struct np_map_entry *e =
            find_slot(m, old.slots[i].hash, old.slots[i].ikey, old.slots[i].skey);
        *e = old.slots[i];
    }
    free(old.slots);
    return 0;
}

/* Replacing the value of a key already there never allocates, so it
 * cannot fail: callers may free the old value before replacing it. */
static int put(struct np_map *m, uint64_t hash, uint64_t ikey, const char *skey, void *value) {
    struct np_map_entry *e = m->cap ? find_slot(m, hash, ikey, skey) : NULL;
    if (e && e->used) {
        e->value = value;
        return 0;
    }
    if ((m->count + 1) * 10 > m->cap * 7) {
        int err = grow(m);
        if (err)
            return err;
        e = find_slot(m, hash, ikey, skey);
    }
    char *copy = NULL;
    if (skey) {
        copy = strdup(skey);
        if (!copy)
            return -ENOMEM;
    }
    e->used = 1;
    e->hash = hash;
    e->ikey = ikey;
    e->skey = copy;
    e->value = value;
    m->count++;
    return 0;
}

void *np_map_get_u64(const struct np_map *m, uint64_t key) {
    if (!m->cap)
        return NULL;
    struct np_map_entry *e = find_slot(m, hash_u64(key), key, NULL);
    return e->used ? e->value : NULL;
}

int np_map_put_u64(struct np_map *m, uint64_t key, void *value) {
    return put(m, hash_u64(key), key, NULL, value);
}

uint64_t np_hash_str(const char *key) {
    return np_hash_bytes(key, strlen(key));
}

void *np_map_get_str_hashed(const struct np_map *m, const char *key, uint64_t hash) {
    if (!m->cap)
        return NULL;
    struct np_map_entry *e = find_slot(m, hash, 0, key);
    return e->used ? e->value : NULL;
}

int np_map_put_str_hashed(struct np_map *m, const char *key, uint64_t hash, void *value) {
    return put(m, hash, 0, key, value);
}

void **np_map_slot_str_hashed(struct np_map *m, const char *key, uint64_t hash) {
    struct np_map_entry *e = m->cap ? find_slot(m, hash, 0, key) : NULL;
    if (e && e->used)
        return &e->value;
    if (put(m, hash, 0, key, NULL) < 0)
        return NULL;
    e = find_slot(m, hash, 0, key);
    return &e->value;
}

void *np_map_get_str(const struct np_map *m, const char *key) {
    return np_map_get_str_hashed(m, key, np_hash_str(key));
}

int np_map_put_str(struct np_map *m, const char *key, void *value) {
    return put(m, np_hash_str(key), 0, key, value);
}

/* Is slot j's entry (home slot `home`) still reachable if slot `hole`
 * becomes empty? Only when its home lies cyclically in (hole, j]. */
static int stays_reachable(size_t home, size_t hole, size_t j) {
    return hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
}

void *np_map_del_u64(struct np_map *m, uint64_t key) {
    if (!m->cap)
        return NULL;
    struct np_map_entry *e = find_slot(m, hash_u64(key), key, NULL);
    if (!e->used)
        return NULL;
    void *value = e->value;
    size_t mask = m->cap - 1, hole = (size_t)(e - m->slots);
    for (size_t j = (hole + 1) & mask; m->slots[j].used; j = (j + 1) & mask) {
        if (stays_reachable(m->slots[j].hash & mask, hole, j))
            continue;
        m->slots[hole] = m->slots[j];
        hole = j;
    }
    memset(&m->slots[hole], 0, sizeof(m->slots[hole]));
    m->count--;
    return value;
}
