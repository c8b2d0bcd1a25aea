/* proc.c - process labels and /proc walks for the daemon (see proc.h). */
#define _GNU_SOURCE
#include "daemon/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach/procmaps.h"
#include "lib/util.h"

/* The number after "\nKEY:" in a /proc status text: the last of a tab
 * separated list ("NSpid:\t<ours>\t...\t<innermost>"); 0 when absent. */
static long status_last_number(const char *text, const char *key) {
    const char *line = strstr(text, key);
    if (!line)
        return 0;
    line += strlen(key);
    const char *end = strchr(line, '\n');
    const char *last = line;
    for (const char *p = line; *p && (!end || p < end); p++)
        if ((*p == '\t' || *p == ' ') && p[1] != '\t' && p[1] != ' ')
            last = p + 1;
    return strtol(last, NULL, 10);
}

/* From /proc/PID/status: the pid in its own namespace (the innermost
 * NSpid) and its tracer (TracerPid). */
static void read_status(pid_t pid, pid_t *ns_pid, pid_t *tracer) {
    char path[64], *text = NULL;
    size_t len;
    *ns_pid = pid;
    *tracer = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (np_read_file(path, &text, &len) < 0)
        return;
    long v = status_last_number(text, "\nNSpid:");
    if (v > 0)
        *ns_pid = (pid_t)v;
    v = status_last_number(text, "\nTracerPid:");
    if (v > 0)
        *tracer = (pid_t)v;
    free(text);
}

static void read_cgroup(pid_t pid, char *out, size_t size) {
    char path[64], *text = NULL;
    size_t len;
    out[0] = '\0';
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    if (np_read_file(path, &text, &len) < 0)
        return;
    /* cgroup v2: "0::/path"; on a hybrid system the v2 line still says it */
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(out, size, "%s", line + 3);
            break;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
}

void np_proc_container_id(const char *cgroup, char *out, size_t size) {
    out[0] = '\0';
    size_t run = 0;
    for (const char *p = cgroup;; p++) {
        if (*p && isxdigit((unsigned char)*p) && !isupper((unsigned char)*p)) {
            run++;
            continue;
        }
        if (run == NP_CONTAINER_ID_LEN && size > NP_CONTAINER_ID_LEN)
            snprintf(out, size, "%.*s", NP_CONTAINER_ID_LEN, p - run);
        run = 0;
        if (!*p)
            break;
    }
}

int np_proc_read_labels(pid_t pid, struct np_proc_labels *out) {
    memset(out, 0, sizeof(*out));
    out->pid = pid;
    char path[64], *text = NULL;
    size_t len;
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    if (np_read_file(path, &text, &len) < 0)
        return -ESRCH;
    text[strcspn(text, "\n")] = '\0';
    snprintf(out->comm, sizeof(out->comm), "%s", text);
    free(text);
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, out->exe, sizeof(out->exe) - 1);
    out->exe[n > 0 ? n : 0] = '\0';
    read_status(pid, &out->ns_pid, &out->tracer);
    read_cgroup(pid, out->cgroup, sizeof(out->cgroup));
    np_proc_container_id(out->cgroup, out->container, sizeof(out->container));
    return 0;
}

bool np_proc_maps_library(pid_t pid, const char *const *prefixes) {
    struct np_maps maps;
    if (np_maps_read(pid, &maps) < 0)
        return false;
    bool found = false;
    for (size_t i = 0; i < maps.count && !found; i++) {
        const struct np_mapping *m = &maps.items[i];
        if (!m->exec || !m->path || m->path[0] != '/')
            continue;
        const char *base = strrchr(m->path, '/') + 1;
        for (const char *const *p = prefixes; *p && !found; p++)
            found = strncmp(base, *p, strlen(*p)) == 0;
    }
    np_maps_free(&maps);
    return found;
}

int np_proc_each(int (*fn)(void *ctx, pid_t pid), void *ctx) {
    DIR *d = opendir("/proc");
    if (!d)
        return -errno;
    int ret = 0;
    struct dirent *e;
    while (!ret && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        ret = fn(ctx, (pid_t)pid);
    }
    closedir(d);
    return ret;
}
