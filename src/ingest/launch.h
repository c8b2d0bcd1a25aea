/* launch.h - a launch event decoded: the raw registers and stack words the
 * probe copied, turned into the arguments of the function the caller
 * called (see enum np_arg_layout). An NCCL call's datatype and reduction op
 * are named with its library's own names (nccl_names). */
#ifndef NP_LAUNCH_H
#define NP_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>

#include "attach/probes.h"
#include "ingest/nccl_plan.h"
#include "ncclprobe/events.h"

struct np_launch {
    const struct np_launch_event *ev;
    const struct np_probe_def *def; /* the function the caller called */
    bool nested;   /* set by ingest: runs inside another launch (see really_nested) */
    uint64_t func; /* host stub, cudaKernel_t, CUfunction or graph exec */
    bool has_dims;
    uint32_t grid[3], block[3];
    uint64_t shmem;
    uint64_t stream;
    /* NCCL API */
    bool is_nccl_op;
    bool nccl_internal; /* set by ingest: a call libnccl made itself (part of the outer one) */
    uint64_t sendbuff, recvbuff, count, comm;
    int64_t datatype, redop, root, peer; /* -1 when the call has none */
    struct np_nccl_comm_id comm_id;      /* the communicator's identity, when read */
    /* NCCL calls and launches: the enum names of the library probed (set by
     * ingest; NULL: the built-in table) */
    const struct np_nccl_names *nccl_names;
    /* NCCL kernel launches: the plan (NULL when it was not read) and what
     * is missing, set by ingest */
    const struct np_nccl_plan *nccl_plan;
    const char *nccl_missing;
};

void np_launch_decode(const struct np_launch_event *e, const struct np_probe_def *def,
                      struct np_launch *out);

#endif
