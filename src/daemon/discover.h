/* discover.h - system-wide notifications of execs and CUDA/NCCL library
 * loads (bpf/discover.bpf.c), for the daemon to attach within
 * milliseconds of a library being mapped instead of on its next /proc scan. */
#ifndef NP_DAEMON_DISCOVER_H
#define NP_DAEMON_DISCOVER_H

#include <stdint.h>
#include <sys/types.h>

#include "ncclprobe/discover.h"

struct np_discover;

/* The base-name prefixes of the libraries that make a process a target. */
extern const char *const np_discover_prefixes[];

/* fn is called for each notification while np_discover_poll runs. */
typedef void (*np_discover_fn)(void *ctx, const struct np_disc_event *ev);

int np_discover_open(np_discover_fn fn, void *ctx, struct np_discover **out);
int np_discover_fd(const struct np_discover *d);
/* Reads what is queued; returns the number of notifications, or -errno. */
int np_discover_poll(struct np_discover *d);
/* Notifications lost to a full ring buffer (the daemon rescans /proc then). */
uint64_t np_discover_lost(const struct np_discover *d);
/* How the programs are attached: "tp_btf" (no tracefs needed) or "tracefs". */
const char *np_discover_mode(const struct np_discover *d);
void np_discover_close(struct np_discover *d);

#endif
