/* counts.c - np_counts (report.h): names with counts, kept in the order
 * first added. A handful of names is searched in the array; past that an
 * index by name pointer is built, so a stack under which a CUDA graph ran
 * thousands of different kernels stays linear. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

#define LINEAR_SEARCH_MAX 8

void np_counts_init(struct np_counts *c) {
    memset(c, 0, sizeof(*c));
    np_map_init(&c->index);
}

void np_counts_free(struct np_counts *c) {
    free(c->items);
    np_map_free(&c->index, NULL);
    np_counts_init(c);
}

static int index_all(struct np_counts *c) {
    for (size_t i = 0; i < c->n; i++) {
        int err =
            np_map_put_u64(&c->index, (uintptr_t)c->items[i].name, (void *)(uintptr_t)(i + 1));
        if (err)
            return err;
    }
    return 0;
}

static struct np_count *find(const struct np_counts *c, const char *name) {
    if (c->n <= LINEAR_SEARCH_MAX) {
        for (size_t i = 0; i < c->n; i++) {
            if (c->items[i].name == name)
                return &c->items[i];
        }
        return NULL;
    }
    uintptr_t i = (uintptr_t)np_map_get_u64(&c->index, (uintptr_t)name);
    return i ? &c->items[i - 1] : NULL;
}

static int append(struct np_counts *c, const char *name, uint64_t n) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 2;
        struct np_count *items = realloc(c->items, cap * sizeof(*items));
        if (!items)
            return -ENOMEM;
        c->items = items;
        c->cap = cap;
    }
    c->items[c->n] = (struct np_count){name, n, c->n};
    c->n++;
    if (c->n == LINEAR_SEARCH_MAX + 1)
        return index_all(c);
    if (c->n > LINEAR_SEARCH_MAX)
        return np_map_put_u64(&c->index, (uintptr_t)name, (void *)(uintptr_t)c->n);
    return 0;
}

int np_counts_add(struct np_counts *c, const char *name, uint64_t n) {
    struct np_count *found = find(c, name);
    int err = 0;
    if (found)
        found->count += n;
    else
        err = append(c, name, n);
    if (!err)
        c->total += n;
    return err;
}

static int compare_counts(const void *a, const void *b) {
    const struct np_count *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

void np_counts_sort(struct np_counts *c) {
    np_map_free(&c->index, NULL);
    if (c->n > 1)
        qsort(c->items, c->n, sizeof(*c->items), compare_counts);
}
