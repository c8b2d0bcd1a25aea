/* outset.c - output sets and retention (see outset.h). */
#define _GNU_SOURCE
#include "daemon/outset.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/util.h"
#include "writers/flows.h"
#include "writers/output.h"

void np_outset_safe_name(char *out, size_t size, size_t max, const char *in) {
    size_t n = 0;
    if (max >= size)
        max = size - 1;
    for (const unsigned char *p = (const unsigned char *)in; *p && n < max; p++) {
        unsigned char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        out[n] = ok && !(n == 0 && c == '.') ? (char)c : '_';
        n++;
    }
    if (n == 0)
        out[n++] = '_';
    out[n] = '\0';
}

int np_outset_open(const char *root, const char *host, enum np_outset_kind kind,
                   const struct np_proc_labels *labels, uint64_t window_id, const char *reason,
                   uint64_t start_realtime_ns, struct np_outset **out) {
    char safe_host[65], safe_comm[65], when[32], dir[4096];
    np_outset_safe_name(safe_host, sizeof(safe_host), 64, host);
    np_outset_safe_name(safe_comm, sizeof(safe_comm), 64, labels->comm);
    np_format_utc(when, sizeof(when), start_realtime_ns, true);
    int n = snprintf(dir, sizeof(dir), "%s/%s-%d-%s-%s", root, safe_host, (int)labels->pid,
                     safe_comm, when);
    if (n < 0 || (size_t)n + 8 >= sizeof(dir))
        return -ENAMETOOLONG;
    /* a second set of one process in one second (a window right after a
     * rotation): made unique, never merged into the first */
    if (mkdir(root, 0700) < 0 && errno != EEXIST)
        return -errno;
    for (int i = 1; mkdir(dir, 0700) < 0; i++) {
        if (errno != EEXIST || i > 999)
            return -errno;
        snprintf(dir + n, sizeof(dir) - (size_t)n, "-%d", i);
    }
    char marker[4200];
    snprintf(marker, sizeof(marker), "%s/" NP_REC_SET_MARKER, dir);
    int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);

    struct np_outset *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->dir = strdup(dir);
    s->kind = kind;
    s->labels = *labels;
    s->window_id = window_id;
    snprintf(s->reason, sizeof(s->reason), "%s", reason);
    s->start_realtime_ns = start_realtime_ns;
    int err = s->dir ? np_output_open_flags(
                           dir, kind == NP_OUTSET_AGGREGATE ? NP_OUTPUT_AGGREGATE : 0, &s->out)
                     : -ENOMEM;
    if (err) {
        free(s->dir);
        free(s);
        return err;
    }
    *out = s;
    return 0;
}

static int write_window_json(const struct np_outset *s, const struct np_output_totals *t,
                             const struct np_flows_totals *flows) {
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return -ENOMEM;
    char when[32];
    np_json_add_u64(root, "format_version", 1);
    cJSON *proc = cJSON_AddObjectToObject(root, NP_KEY_PROCESS);
    np_json_add_u64(proc, "pid", (uint64_t)s->labels.pid);
    np_json_add_u64(proc, "ns_pid", (uint64_t)s->labels.ns_pid);
    np_json_add_text(proc, "comm", s->labels.comm);
    np_json_add_text(proc, "exe", s->labels.exe);
    np_json_add_text(proc, "cgroup", s->labels.cgroup);
    np_json_add_text(proc, "container", s->labels.container);
    cJSON *win = cJSON_AddObjectToObject(root, NP_KEY_WINDOW);
    cJSON_AddStringToObject(win, "kind", s->kind == NP_OUTSET_AGGREGATE ? "aggregate" : "window");
    np_json_add_u64(win, "id", s->window_id);
    cJSON_AddStringToObject(win, "reason", s->reason);
    np_format_utc(when, sizeof(when), s->start_realtime_ns, false);
    cJSON_AddStringToObject(win, "start", when);
    np_format_utc(when, sizeof(when), s->end_realtime_ns, false);
    cJSON_AddStringToObject(win, "end", when);
    np_json_add_u64(win, NP_KEY_START_UNIX_NS, s->start_realtime_ns);
    np_json_add_u64(win, NP_KEY_END_UNIX_NS, s->end_realtime_ns);
    cJSON *tot = cJSON_AddObjectToObject(root, "totals");
    np_json_add_u64(tot, "launches", t->launches);
    np_json_add_u64(tot, "nested_launches", t->nested);
    np_json_add_u64(tot, "nccl_ops", t->nccl_ops);
    np_json_add_u64(tot, "events_dropped", s->drops);
    np_json_add_u64(tot, "rate_limited", s->rate_limited);
    np_json_add_u64(tot, "write_errors", t->write_errors);
    cJSON_AddBoolToObject(tot, "per_launch_complete", t->cut_error == 0);
    np_json_add_u64(tot, "records_cut", t->records_cut);
    if (flows) /* what the set's flows/ holds */
        np_flows_totals_json(cJSON_AddObjectToObject(root, "nccl_flows"), flows);
    char path[4200];
    snprintf(path, sizeof(path), "%s/" NP_REC_WINDOW_JSON, s->dir);
    return np_json_write_file(path, root);
}

int np_outset_finish(struct np_outset *s, uint64_t *launches) {
    if (!s->end_realtime_ns)
        s->end_realtime_ns = np_realtime_ns();
    int err = np_output_finish(s->out);
    struct np_output_totals totals = *np_output_totals(s->out);
    int cerr = np_output_close(s->out);
    err = err ? err : cerr;
    struct np_flows_totals flows = {0};
    if (s->flows)
        np_flows_out_close(s->flows, &flows);
    int jerr = write_window_json(s, &totals, s->flows ? &flows : NULL);
    if (launches)
        *launches = totals.launches;
    free(s->dir);
    free(s);
    return err ? err : jerr;
}

/* ---- retention ------------------------------------------------------------ */

struct set_entry {
    char *name;
    uint64_t bytes;
    int64_t mtime_ns;
};

static int by_age(const void *a, const void *b) {
    const struct set_entry *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

/* The files of a set (flat: sets have no subdirectories) and their bytes;
 * -ENOENT when it is not a set. */
static int measure_set(int rootfd, const char *name, uint64_t *bytes, int64_t *mtime_ns) {
    int fd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstatat(fd, NP_REC_SET_MARKER, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        close(fd);
        return -ENOENT;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    *bytes = 0;
    *mtime_ns = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        *bytes += (uint64_t)st.st_blocks * 512;
        int64_t m = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
        if (m > *mtime_ns)
            *mtime_ns = m;
    }
    closedir(d);
    return 0;
}

static void delete_set(int rootfd, const char *name) {
    int fd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    if (unlinkat(rootfd, name, AT_REMOVEDIR) < 0)
        np_warn("retention: cannot remove %s: %s", name, strerror(errno));
}

static bool is_open(const char *root, const char *name, const struct np_outset *open) {
    size_t rlen = strlen(root);
    for (const struct np_outset *s = open; s; s = s->next)
        if (strncmp(s->dir, root, rlen) == 0 && s->dir[rlen] == '/' &&
            strcmp(s->dir + rlen + 1, name) == 0)
            return true;
    return false;
}

int np_outset_retain(const char *root, uint64_t max_bytes, uint64_t max_age_ns,
                     const struct np_outset *open, struct np_retention *out) {
    memset(out, 0, sizeof(*out));
    DIR *d = opendir(root);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    struct set_entry *sets = NULL;
    size_t n = 0, cap = 0;
    int err = 0;
    struct dirent *e;
    while (!err && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        struct set_entry s = {0};
        if (measure_set(dirfd(d), e->d_name, &s.bytes, &s.mtime_ns) < 0)
            continue;
        out->bytes += s.bytes;
        out->sets++;
        if (is_open(root, e->d_name, open))
            continue; /* counted, never deleted */
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            struct set_entry *p = realloc(sets, ncap * sizeof(*p));
            if (!p) {
                err = -ENOMEM;
                break;
            }
            sets = p, cap = ncap;
        }
        s.name = strdup(e->d_name);
        if (!s.name) {
            err = -ENOMEM;
            break;
        }
        sets[n++] = s;
    }
    if (n)
        qsort(sets, n, sizeof(*sets), by_age);
    int64_t now = (int64_t)np_realtime_ns();
    for (size_t i = 0; !err && i < n; i++) {
        bool too_old = max_age_ns && now - sets[i].mtime_ns > (int64_t)max_age_ns;
        if (!too_old && out->bytes <= max_bytes)
            continue;
        delete_set(dirfd(d), sets[i].name);
        out->bytes -= sets[i].bytes < out->bytes ? sets[i].bytes : out->bytes;
        out->sets--;
        out->deleted_sets++;
    }
    for (size_t i = 0; i < n; i++)
        free(sets[i].name);
    free(sets);
    closedir(d);
    return err;
}
