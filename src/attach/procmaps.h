/* procmaps.h - parses /proc/PID/maps: the file-backed mappings (what the
 * attacher probes), or every mapping with its permissions (what the
 * injector needs to tell a thread's stack and its guard page). */
#ifndef NP_PROCMAPS_H
#define NP_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct np_mapping {
    uint64_t start, end, offset;
    uint64_t dev; /* makedev(major, minor) */
    uint64_t inode;
    bool exec;
    char perms[5]; /* "r-xp", "rw-p", "---p", ... */
    char *path;    /* as the target sees it (its own mount namespace); np_maps_read_all:
                    * "" for anonymous memory, "[stack]", "[heap]", "[vdso]", ... */
};

struct np_maps {
    struct np_mapping *items;
    size_t count;
};

/* Reads the file-backed mappings of pid; -ESRCH when the process is gone. */
int np_maps_read(pid_t pid, struct np_maps *out);
/* Every mapping of pid, anonymous ones too; -ESRCH when it is gone. */
int np_maps_read_all(pid_t pid, struct np_maps *out);
/* Parses maps text (exposed for unit tests); all: keep every mapping. */
int np_maps_parse(const char *text, struct np_maps *out);
int np_maps_parse_all(const char *text, struct np_maps *out);
/* The mapping that holds addr, or NULL. */
const struct np_mapping *np_maps_find(const struct np_maps *maps, uint64_t addr);
void np_maps_free(struct np_maps *maps);

#endif
