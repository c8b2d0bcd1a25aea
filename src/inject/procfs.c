/* procfs.c - /proc readers for the injector (see procfs.h). */
#define _GNU_SOURCE
#include "inject/procfs.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach/procmaps.h"
#include "lib/util.h"

int np_inj_threads(pid_t pid, pid_t **tids, size_t *count) {
    char path[64];
    size_t n = 0, cap = 0;
    pid_t *list = NULL;
    struct dirent *de;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    dir = opendir(path);
    if (!dir)
        return errno == ENOENT ? -ESRCH : -errno;
    while ((de = readdir(dir))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        pid_t *bigger = np_grow_array(list, &cap, n + 1, sizeof(*list));
        if (!bigger) {
            closedir(dir);
            free(list);
            return -ENOMEM;
        }
        list = bigger;
        list[n++] = (pid_t)atoi(de->d_name);
    }
    closedir(dir);
    *tids = list;
    *count = n;
    return 0;
}

/* The state letter after "(comm)" in a stat line (comm may hold spaces and
 * parentheses: the last ')' ends it). */
static int stat_state(pid_t pid, pid_t tid, char *state) {
    char path[96], *text = NULL;
    int err;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    err = np_read_file(path, &text, NULL);
    if (err)
        return err == -ENOENT ? -ESRCH : err;
    const char *p = strrchr(text, ')');
    *state = p && p[1] == ' ' ? p[2] : '?';
    free(text);
    return 0;
}

int np_inj_thread_where(pid_t pid, pid_t tid, struct np_inj_where *out) {
    char path[96], *text = NULL;
    long nr;
    int err;

    memset(out, 0, sizeof(*out));
    err = stat_state(pid, tid, &out->state);
    if (err)
        return err;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
    err = np_read_file(path, &text, NULL);
    if (err)
        return err == -ENOENT ? -ESRCH : err;
    /* "running", "-1 sp pc" (blocked outside a syscall) or "nr a0..a5 sp pc" */
    if (sscanf(text, "%ld", &nr) == 1 && nr >= 0) {
        int n = sscanf(text,
                       "%ld %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64
                       " %" SCNx64 " %" SCNx64,
                       &out->nr, &out->args[0], &out->args[1], &out->args[2], &out->args[3],
                       &out->args[4], &out->args[5], &out->sp, &out->pc);
        out->in_syscall = n == 9;
    }
    free(text);
    return 0;
}

/* The value after "key:" in a /proc status text, or NULL. */
static const char *status_field(const char *status, const char *key) {
    size_t klen = strlen(key);

    for (const char *line = status; line && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            const char *v = line + klen + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            return v;
        }
    }
    return NULL;
}

static uint64_t hex_field(const char *status, const char *key) {
    const char *v = status_field(status, key);
    return v ? strtoull(v, NULL, 16) : 0;
}

int np_inj_thread_status(pid_t pid, pid_t tid, struct np_inj_status *out) {
    char path[96], *text = NULL;
    const char *v;
    int err;

    memset(out, 0, sizeof(*out));
    snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
    err = np_read_file(path, &text, NULL);
    if (err)
        return err == -ENOENT ? -ESRCH : err;
    v = status_field(text, "TracerPid");
    out->tracer = v ? (pid_t)atoi(v) : 0;
    v = status_field(text, "Seccomp");
    out->seccomp = v ? atoi(v) : 0;
    v = status_field(text, "x86_Thread_features");
    if (v) {
        const char *eol = strchr(v, '\n');
        const char *hit = strstr(v, "shstk");
        out->shadow_stack = hit && (!eol || hit < eol);
    }
    out->sig_pending = hex_field(text, "SigPnd");
    out->shared_pending = hex_field(text, "ShdPnd");
    out->sig_blocked = hex_field(text, "SigBlk");
    free(text);
    return 0;
}

void np_inj_comm(pid_t pid, char *out, size_t size) {
    char path[64], *text = NULL;

    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    if (np_read_file(path, &text, NULL) < 0) {
        snprintf(out, size, "?");
        return;
    }
    text[strcspn(text, "\n")] = '\0';
    snprintf(out, size, "%s", text);
    free(text);
}

/* An inode the process maps (the loaded library's memfd, which stays open). */
static bool mapped_inode(pid_t pid, uint64_t inode) {
    struct np_maps maps;
    if (np_maps_read_all(pid, &maps) < 0)
        return false;
    bool found = false;
    for (size_t i = 0; i < maps.count && !found; i++)
        found = maps.items[i].inode == inode;
    np_maps_free(&maps);
    return found;
}

int np_inj_find_memfd(pid_t pid, const char *name) {
    char dir_path[64], want[128];
    int best = -ENOENT;
    struct dirent *de;
    DIR *dir;

    snprintf(dir_path, sizeof(dir_path), "/proc/%d/fd", (int)pid);
    snprintf(want, sizeof(want), "/memfd:%s (deleted)", name);
    dir = opendir(dir_path);
    if (!dir)
        return errno == ENOENT ? -ESRCH : -errno;
    while ((de = readdir(dir))) {
        char link[256];
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        ssize_t n = readlinkat(dirfd(dir), de->d_name, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        int fd = atoi(de->d_name);
        struct stat st;
        if (strcmp(link, want) != 0 || fstatat(dirfd(dir), de->d_name, &st, 0) < 0 ||
            mapped_inode(pid, (uint64_t)st.st_ino))
            continue; /* not ours, or the library itself (loaded: it stays open) */
        if (best < 0 || fd < best)
            best = fd;
    }
    closedir(dir);
    return best;
}

uint64_t np_inj_stack_limit(pid_t pid) {
    char path[64], *text = NULL;
    uint64_t limit = 8ULL << 20;

    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    if (np_read_file(path, &text, NULL) < 0)
        return limit;
    const char *line = strstr(text, "Max stack size");
    if (line) {
        line += strlen("Max stack size");
        while (*line == ' ')
            line++;
        limit = strncmp(line, "unlimited", 9) == 0 ? UINT64_MAX : strtoull(line, NULL, 10);
    }
    free(text);
    return limit;
}
