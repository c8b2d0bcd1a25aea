/* procmaps.h - parses /proc/PID/maps into file-backed mappings. */
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
    char *path; /* as the target sees it (its own mount namespace) */
};

struct np_maps {
    struct np_mapping *items;
    size_t count;
};

/* Reads the file-backed mappings of pid; -ESRCH when the process is gone. */
int np_maps_read(pid_t pid, struct np_maps *out);
/* Parses maps text (exposed for unit tests). */
int np_maps_parse(const char *text, struct np_maps *out);
void np_maps_free(struct np_maps *maps);

#endif
