/* hashmap.h - an open-addressing hash map from a 64-bit key or a string key
 * to a pointer. Used for symbol caches, kernel-handle tables and stack
 * aggregation. Integer keys can be deleted (streaming indexes); string
 * maps are freed whole. */
#ifndef NP_HASHMAP_H
#define NP_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

struct np_map_entry {
    uint64_t hash;
    uint64_t ikey;
    char *skey; /* owned copy for string keys, NULL for integer keys */
    void *value;
    int used;
};

struct np_map {
    struct np_map_entry *slots;
    size_t cap;
    size_t count;
};

void np_map_init(struct np_map *m);
/* Frees the table and string keys; calls free_value (if non-NULL) on each value. */
void np_map_free(struct np_map *m, void (*free_value)(void *));

void *np_map_get_u64(const struct np_map *m, uint64_t key);
int np_map_put_u64(struct np_map *m, uint64_t key,
                   void *value); /* replaces (never fails); a new key: -ENOMEM */
/* Removes an integer key; returns its value (NULL if absent). */
void *np_map_del_u64(struct np_map *m, uint64_t key);

void *np_map_get_str(const struct np_map *m, const char *key);
/* Inserts or replaces (the key is copied); -ENOMEM. */
int np_map_put_str(struct np_map *m, const char *key, void *value);

/* The same with the key's hash known already (np_hash_str of it, the hash
 * the calls above compute): a long key hashed once for several maps or
 * lookups. */
void *np_map_get_str_hashed(const struct np_map *m, const char *key, uint64_t hash);
int np_map_put_str_hashed(struct np_map *m, const char *key, uint64_t hash, void *value);
/* The value slot of key, added (holding NULL) when missing: one lookup to
 * read and update a value. NULL without memory for a new key. */
void **np_map_slot_str_hashed(struct np_map *m, const char *key, uint64_t hash);

/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slots[i].used) ... */

uint64_t np_hash_bytes(const void *data, size_t len);
/* np_hash_bytes of a string without its NUL: a string key's hash. */
uint64_t np_hash_str(const char *key);

#endif
