/* process.c - per-process attach state (see process.h). */
#define _GNU_SOURCE
#include "attach/process.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/procmaps.h"
#include "lib/util.h"

void np_process_init(struct np_process *p, pid_t pid) {
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    np_map_init(&p->seen_files);
    np_map_init(&p->python_checked);
}

void np_process_release(struct np_process *p) {
    for (size_t i = 0; i < p->nlibs; i++)
        free(p->libs[i].path);
    free(p->libs);
    p->libs = NULL;
    p->nlibs = p->libs_cap = 0;
    np_map_free(&p->seen_files, NULL);
    np_map_free(&p->python_checked, NULL);
}

int np_process_tgid(pid_t pid) {
    char path[64], *text = NULL;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    int err = np_read_file(path, &text, NULL);
    if (err)
        return err == -ENOENT ? -ESRCH : err;
    const char *line = strstr(text, "\nTgid:");
    int tgid = line ? atoi(line + 6) : -EINVAL;
    free(text);
    return tgid > 0 ? tgid : -EINVAL;
}

int np_process_probe_count(const struct np_process *p) {
    int n = 0;
    for (size_t i = 0; i < p->nlibs; i++)
        if (p->libs[i].cuda)
            n += p->libs[i].probes_ok;
    return n;
}

int np_process_cuda_library_count(const struct np_process *p) {
    int n = 0;
    for (size_t i = 0; i < p->nlibs; i++)
        n += p->libs[i].cuda;
    return n;
}

static void file_key(char *key, size_t size, uint64_t dev, uint64_t inode) {
    snprintf(key, size, "%" PRIu64 ":%" PRIu64, dev, inode);
}

void np_process_detect_python(struct np_process *p) {
    struct np_maps maps;
    if (p->python.found || np_maps_read(p->pid, &maps) < 0)
        return;
    for (size_t i = 0; i < maps.count && !p->python.found; i++) {
        const struct np_mapping *m = &maps.items[i];
        char key[48];
        file_key(key, sizeof(key), m->dev, m->inode);
        if (!m->exec || np_map_get_str(&p->python_checked, key))
            continue;
        if (np_map_put_str(&p->python_checked, key, (void *)1) < 0)
            break;
        np_python_inspect(p->pid, m, &p->python);
    }
    np_maps_free(&maps);
}

int np_cudart_major_of(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    static const char prefix[] = "libcudart.so.";
    if (strncmp(base, prefix, sizeof(prefix) - 1) != 0)
        return 0;
    const char *digits = base + sizeof(prefix) - 1;
    int major = 0;
    for (; *digits >= '0' && *digits <= '9' && major < 1000; digits++)
        major = major * 10 + (*digits - '0');
    return *digits == '\0' || *digits == '.' ? major : 0;
}

struct np_library *np_process_add_library(struct np_process *p, const char *path) {
    struct np_library *libs = np_grow_array(p->libs, &p->libs_cap, p->nlibs + 1, sizeof(*libs));
    if (!libs)
        return NULL;
    p->libs = libs;
    struct np_library *lib = &p->libs[p->nlibs];
    memset(lib, 0, sizeof(*lib));
    lib->path = strdup(path);
    if (!lib->path)
        return NULL;
    p->nlibs++;
    return lib;
}

bool np_process_saw_file(const struct np_process *p, uint64_t dev, uint64_t inode) {
    char key[48];
    file_key(key, sizeof(key), dev, inode);
    return np_map_get_str(&p->seen_files, key) != NULL;
}

int np_process_mark_file(struct np_process *p, uint64_t dev, uint64_t inode) {
    char key[48];
    file_key(key, sizeof(key), dev, inode);
    return np_map_put_str(&p->seen_files, key, (void *)1);
}
