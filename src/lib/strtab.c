/* strtab.c - the string table of strtab.h: interning through a
 * string-keyed np_map, items kept in id order. */
#include "lib/strtab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void np_strtab_init(struct np_strtab *t) {
    memset(t, 0, sizeof(*t));
    np_map_init(&t->index);
}

void np_strtab_free(struct np_strtab *t) {
    for (size_t i = 0; i < t->count; i++)
        free(t->items[i]);
    free(t->items);
    np_map_free(&t->index, NULL);
}

int np_strtab_intern(struct np_strtab *t, const char *text, uint32_t *id) {
    struct np_interned *found = np_map_get_str(&t->index, text);
    if (found) {
        *id = found->id;
        return 0;
    }
    if (t->count >= UINT32_MAX - 1)
        return -ERANGE;
    size_t len = strlen(text);
    struct np_interned *item = malloc(sizeof(*item) + len + 1);
    struct np_interned **items = np_grow_array(t->items, &t->cap, t->count + 1, sizeof(*t->items));
    if (items)
        t->items = items;
    int err = item && items ? np_map_put_str(&t->index, text, item) : -ENOMEM;
    if (err) {
        free(item);
        return err;
    }
    item->id = (uint32_t)t->count;
    memcpy(item->text, text, len + 1);
    t->items[t->count++] = item;
    *id = item->id;
    return 0;
}

const char *np_strtab_text(const struct np_strtab *t, uint32_t id) {
    return t->items[id]->text;
}
