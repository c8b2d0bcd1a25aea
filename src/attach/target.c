/* target.c - per-process state (see target.h). */
#define _GNU_SOURCE
#include "attach/target.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "attach/procmaps.h"
#include "correlate/kernels.h"
#include "lib/util.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"

static int read_comm(pid_t pid, char *comm, size_t size) {
    char path[64], *text = NULL;
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    int err = np_read_file(path, &text, NULL);
    if (err)
        return err == -ENOENT ? -ESRCH : err;
    text[strcspn(text, "\n")] = '\0';
    snprintf(comm, size, "%s", text);
    free(text);
    return 0;
}

static char *read_exe(pid_t pid) {
    char link[64], exe[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    return strdup(exe);
}

void np_target_refresh_identity(struct np_target *t) {
    read_comm(t->pid, t->comm, sizeof(t->comm));
    char *exe = read_exe(t->pid);
    if (exe && *exe) {
        free(t->exe);
        t->exe = exe;
    } else {
        free(exe);
    }
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

int np_target_new(pid_t pid, struct np_target **out) {
    struct np_target *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->pid = pid;
    t->pidfd = -1;
    np_map_init(&t->seen_files);
    int err = read_comm(pid, t->comm, sizeof(t->comm));
    if (err) {
        free(t);
        return err;
    }
    t->exe = read_exe(pid);
    t->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    err = !t->exe ? -ENOMEM : t->pidfd < 0 ? -errno : 0;
    if (err) { /* without a pidfd we would never notice the exit */
        np_target_free(t);
        return err;
    }
    *out = t;
    return 0;
}

void np_target_free(struct np_target *t) {
    if (!t)
        return;
    for (size_t i = 0; i < t->nlibs; i++)
        free(t->libs[i].path);
    free(t->libs);
    np_map_free(&t->seen_files, NULL);
    np_map_free(&t->python_checked, NULL);
    np_target_forget_stacks(t);
    np_unwinder_free(t->unwinder);
    np_symbolizer_free(t->sym);
    np_kernel_names_free(t->kernels);
    np_pycode_free(t->pycode);
    if (t->pidfd >= 0)
        close(t->pidfd);
    free(t->exe);
    free(t);
}

int np_target_probe_count(const struct np_target *t) {
    int n = 0;
    for (size_t i = 0; i < t->nlibs; i++)
        if (t->libs[i].cuda)
            n += t->libs[i].probes_ok;
    return n;
}

int np_target_cuda_library_count(const struct np_target *t) {
    int n = 0;
    for (size_t i = 0; i < t->nlibs; i++)
        n += t->libs[i].cuda;
    return n;
}

static void file_key(char *key, size_t size, uint64_t dev, uint64_t inode) {
    snprintf(key, size, "%" PRIu64 ":%" PRIu64, dev, inode);
}

void np_target_detect_python(struct np_target *t) {
    struct np_maps maps;
    if (t->python.found || np_maps_read(t->pid, &maps) < 0)
        return;
    for (size_t i = 0; i < maps.count && !t->python.found; i++) {
        const struct np_mapping *m = &maps.items[i];
        char key[48];
        file_key(key, sizeof(key), m->dev, m->inode);
        if (!m->exec || np_map_get_str(&t->python_checked, key))
            continue;
        if (np_map_put_str(&t->python_checked, key, (void *)1) < 0)
            break;
        np_python_inspect(t->pid, m, &t->python);
    }
    np_maps_free(&maps);
}

void np_target_forget_stacks(struct np_target *t) {
    t->stack_text_bytes = 0;
    np_map_free(&t->stack_texts, free);
}

struct np_library *np_target_add_library(struct np_target *t, const char *path) {
    if (t->nlibs == t->libs_cap) {
        size_t ncap = t->libs_cap ? t->libs_cap * 2 : 8;
        struct np_library *libs = realloc(t->libs, ncap * sizeof(*libs));
        if (!libs)
            return NULL;
        t->libs = libs;
        t->libs_cap = ncap;
    }
    struct np_library *lib = &t->libs[t->nlibs];
    memset(lib, 0, sizeof(*lib));
    lib->path = strdup(path);
    if (!lib->path)
        return NULL;
    t->nlibs++;
    return lib;
}

bool np_target_saw_file(const struct np_target *t, uint64_t dev, uint64_t inode) {
    char key[48];
    file_key(key, sizeof(key), dev, inode);
    return np_map_get_str(&t->seen_files, key) != NULL;
}

int np_target_mark_file(struct np_target *t, uint64_t dev, uint64_t inode) {
    char key[48];
    file_key(key, sizeof(key), dev, inode);
    return np_map_put_str(&t->seen_files, key, (void *)1);
}
