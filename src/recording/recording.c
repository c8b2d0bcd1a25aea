/* recording.c - a recording directory being read (recording.h): its path,
 * the strings it interns, and the stacks of stacks.jsonl, kept in file
 * order with an index by stack_id. Reading lines (stacks.jsonl's too) is
 * lines.c's, metadata meta.c's, folded files folded.c's. */
#define _GNU_SOURCE
#include "recording/recording.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int np_recording_open(struct np_recording *rec, const char *dir, enum np_rec_mode mode) {
    memset(rec, 0, sizeof(*rec));
    rec->mode = mode;
    np_strtab_init(&rec->strings);
    np_map_init(&rec->stack_index);
    rec->dir = strdup(dir);
    return rec->dir ? 0 : -ENOMEM;
}

void np_recording_close(struct np_recording *rec) {
    for (size_t i = 0; i < rec->nstacks; i++) {
        free(rec->stacks[i].frames);
        free((void *)rec->stacks[i].locations);
    }
    free(rec->stacks);
    np_map_free(&rec->stack_index, NULL);
    np_strtab_free(&rec->strings);
    free(rec->dir);
    memset(rec, 0, sizeof(*rec));
}

char *np_rec_path(const char *dir, const char *name) {
    char *path = NULL;
    size_t n = strlen(dir);
    if (asprintf(&path, "%s%s%s", dir, n > 0 && dir[n - 1] == '/' ? "" : "/", name) < 0)
        return NULL;
    return path;
}

bool np_recording_has(const struct np_recording *rec, const char *name) {
    char *path = np_rec_path(rec->dir, name);
    bool there = path && access(path, F_OK) == 0;
    free(path);
    return there;
}

const char *np_recording_intern(struct np_recording *rec, const char *text) {
    uint32_t id;
    return np_strtab_intern(&rec->strings, text, &id) == 0 ? np_strtab_text(&rec->strings, id)
                                                           : NULL;
}

/* ---- stacks.jsonl ------------------------------------------------------------------ */

const struct np_rec_stack *np_recording_stack(const struct np_recording *rec, uint64_t id,
                                              size_t *index) {
    uintptr_t at = (uintptr_t)np_map_get_u64(&rec->stack_index, id);
    if (at && index)
        *index = at - 1;
    return at ? &rec->stacks[at - 1] : NULL;
}

int np_recording_add_stack(struct np_recording *rec, struct np_rec_stack *s) {
    struct np_rec_stack *all =
        np_grow_array(rec->stacks, &rec->stacks_cap, rec->nstacks + 1, sizeof(*all));
    int err = all && rec->nstacks < UINT32_MAX ? 0 : -ENOMEM;
    if (all)
        rec->stacks = all;
    if (!err)
        err = np_map_put_u64(&rec->stack_index, s->id, (void *)(uintptr_t)(rec->nstacks + 1));
    if (err) {
        free(s->frames);
        free((void *)s->locations);
        return err;
    }
    rec->stacks[rec->nstacks++] = *s;
    return 0;
}
