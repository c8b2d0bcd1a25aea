/* procmaps.c - /proc/PID/maps parsing (see procmaps.h). */
#define _GNU_SOURCE
#include "attach/procmaps.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "lib/util.h"

static int push(struct np_maps *out, size_t *cap, const struct np_mapping *m) {
    if (out->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        struct np_mapping *items = realloc(out->items, ncap * sizeof(*items));
        if (!items)
            return -ENOMEM;
        out->items = items;
        *cap = ncap;
    }
    out->items[out->count++] = *m;
    return 0;
}

/* One line: "start-end perms offset major:minor inode   path". Returns 1
 * for a line that is not a file's mapping unless all. */
static int parse_line(char *line, bool all, struct np_mapping *m) {
    unsigned int major, minor;
    char perms[8];
    int path_at = 0;

    memset(m, 0, sizeof(*m));
    if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &m->start,
               &m->end, perms, &m->offset, &major, &minor, &m->inode, &path_at) < 7)
        return -EINVAL;
    const char *path = path_at ? line + path_at : "";
    if (!all && (path[0] != '/' || m->inode == 0))
        return 1; /* anonymous, [heap], [vdso], ...: not a file */
    m->dev = makedev(major, minor);
    m->exec = strchr(perms, 'x') != NULL;
    snprintf(m->perms, sizeof(m->perms), "%.4s", perms);
    m->path = strdup(path);
    return m->path ? 0 : -ENOMEM;
}

static int parse(const char *text, bool all, struct np_maps *out) {
    size_t cap = 0;
    char *copy = strdup(text), *save = NULL;

    memset(out, 0, sizeof(*out));
    if (!copy)
        return -ENOMEM;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct np_mapping m;
        int r = parse_line(line, all, &m);
        if (r == 1 || r == -EINVAL)
            continue;
        if (r == 0)
            r = push(out, &cap, &m);
        if (r < 0) {
            free(m.path);
            free(copy);
            np_maps_free(out);
            return r;
        }
    }
    free(copy);
    return 0;
}

int np_maps_parse(const char *text, struct np_maps *out) {
    return parse(text, false, out);
}

int np_maps_parse_all(const char *text, struct np_maps *out) {
    return parse(text, true, out);
}

static int read_maps(pid_t pid, bool all, struct np_maps *out) {
    char path[64], *text = NULL;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    int err = np_read_file(path, &text, NULL);
    if (err)
        return err == -ENOENT ? -ESRCH : err;
    err = parse(text, all, out);
    free(text);
    return err;
}

int np_maps_read(pid_t pid, struct np_maps *out) {
    return read_maps(pid, false, out);
}

int np_maps_read_all(pid_t pid, struct np_maps *out) {
    return read_maps(pid, true, out);
}

const struct np_mapping *np_maps_find(const struct np_maps *maps, uint64_t addr) {
    for (size_t i = 0; i < maps->count; i++)
        if (addr >= maps->items[i].start && addr < maps->items[i].end)
            return &maps->items[i];
    return NULL;
}

void np_maps_free(struct np_maps *maps) {
    for (size_t i = 0; i < maps->count; i++)
        free(maps->items[i].path);
    free(maps->items);
    maps->items = NULL;
    maps->count = 0;
}
