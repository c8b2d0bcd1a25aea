/* strtab.h - a string table: each distinct string stored once, numbered in
 * the order first seen. Used by the merge readers (normalized stacks, kernel
 * names), the recording reader (its interned text) and the pprof writer
 * (string_table); ids are dense, so per-string data can live in arrays. */
#ifndef NP_STRTAB_H
#define NP_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "lib/hashmap.h"
#include "lib/util.h"

/* A string stored once; id is its index in the table. */
struct np_interned {
    uint32_t id;
    char text[];
};

struct np_strtab {
    struct np_map index; /* text -> struct np_interned */
    struct np_interned **items;
    size_t count, cap;
};

void np_strtab_init(struct np_strtab *t);
void np_strtab_free(struct np_strtab *t);

/* The id of text, added when new: 0, -ENOMEM, or -ERANGE when the table is full. */
int np_strtab_intern(struct np_strtab *t, const char *text, uint32_t *id);

/* The text of an id the table handed out. */
const char *np_strtab_text(const struct np_strtab *t, uint32_t id);

#endif
