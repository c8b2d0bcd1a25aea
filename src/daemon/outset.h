/* outset.h - the daemon's output sets: one directory per process per
 * window, <host>-<pid>-<comm>-<window start>, holding what `record` writes
 * for one process plus window.json (who, which window, what was captured).
 * Also the retention of output_dir: size and age caps, oldest first. */
#ifndef NP_DAEMON_OUTSET_H
#define NP_DAEMON_OUTSET_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/proc.h"
#include "ncclprobe/recording.h"

struct np_output;
struct np_flows_out;

enum np_outset_kind {
    NP_OUTSET_AGGREGATE, /* always-on: aggregated files only */
    NP_OUTSET_WINDOW,    /* a capture window: every file */
};

struct np_outset {
    struct np_output *out;
    char *dir;
    enum np_outset_kind kind;
    struct np_proc_labels labels; /* copied at open: the process may be gone at close */
    uint64_t window_id;           /* 0: the always-on aggregation */
    char reason[32];              /* what opened the window: ctl, flag_file, ... */
    uint64_t start_realtime_ns, end_realtime_ns;
    uint64_t held; /* its launches waiting in the GPU join for their records */
    uint64_t drops_at_open, limited_at_open; /* the process's counters when it opened */
    uint64_t drops, rate_limited;            /* ... their growth while it was open */
    bool closing;                            /* no new records; written once `held` is 0 */
    struct np_flows_out *flows;              /* nccl_flows: a window's flows/, opened at its
                                                first flow record (NULL: none yet) */
    struct np_outset *next;                  /* the daemon's list of open and closing sets */
};

/* A safe file-name part: [A-Za-z0-9._-] kept, other bytes '_', no leading
 * '.', at most max bytes (max < size); "_" when empty. */
void np_outset_safe_name(char *out, size_t size, size_t max, const char *in);

/* Creates the set's directory under root and opens its writers. */
int np_outset_open(const char *root, const char *host, enum np_outset_kind kind,
                   const struct np_proc_labels *labels, uint64_t window_id, const char *reason,
                   uint64_t start_realtime_ns, struct np_outset **out);
/* Closes the writers (aggregated files, flows/), writes window.json and
 * frees the set. Returns the first write error; *launches gets what the set holds.
 * The derived outputs (writers/formats.h) are the caller's: they read
 * window.json for the process's labels. */
int np_outset_finish(struct np_outset *s, uint64_t *launches);

/* Every set directory holds the marker NP_REC_SET_MARKER (recording.h)
 * from its creation: retention only ever deletes directories that have it. */

struct np_retention {
    uint64_t bytes, sets;  /* what output_dir holds (sets only) */
    uint64_t deleted_sets; /* by this call */
};

/* Deletes the oldest finished sets of root (never one of the list `open`,
 * linked by next) until the rest fit max_bytes, and every set older than
 * max_age_ns (0: no age cap). */
int np_outset_retain(const char *root, uint64_t max_bytes, uint64_t max_age_ns,
                     const struct np_outset *open, struct np_retention *out);

#endif
