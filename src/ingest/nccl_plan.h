/* nccl_plan.h - an NCCL kernel launch decoded: the plan record BPF copied
 * at ncclLaunchKernel / ncclLaunchCeColl / ncclLaunchRma (raw bytes, see
 * events.h) turned into the communicator, the kernel, its grid and block,
 * the stream, and the operations the plan carries - with the layout of the
 * libnccl that launched it, whose enum names (attach/nccl_names.h) the plan
 * keeps for whoever formats it. The names of NCCL's algorithms and
 * protocols (#defines, not in DWARF) live here too. */
#ifndef NP_NCCL_PLAN_H
#define NP_NCCL_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attach/nccl_layout.h"
#include "ncclprobe/events.h"

struct np_nccl_op {
    int32_t func; /* ncclFunc_t of the launching library (plan->names) */
    uint64_t count;
    int32_t datatype, redop, root, peer; /* -1: none */
    int32_t algorithm, protocol;         /* -1: undefined / not read */
    int32_t nchannels;                   /* -1: not read */
    uint64_t bytes; /* 0 when the element size is unknown (RMA tasks: their own count) */
};

struct np_nccl_plan {
    uint64_t ts_ns;
    uint32_t tid, probe_id, flags; /* enum np_nccl_flags */
    uint64_t comm, stream, kernel_fn;
    bool has_stream, has_kernel_fn;
    struct np_nccl_comm_id id;
    uint32_t grid, block; /* 0: not read */
    bool symmetric, copy_engine, rma;
    const struct np_nccl_names *names; /* of the launching library: func, datatype, redop */
    uint32_t nops, total_ops;          /* decoded; on the plan's lists */
    struct np_nccl_op ops[NP_NCCL_MAX_TASKS];
};

/* Decodes a plan record of `size` bytes; -EINVAL when it is malformed. */
int np_nccl_plan_decode(const struct np_nccl_layout *l, const struct np_nccl_plan_event *e,
                        size_t size, struct np_nccl_plan *out);

/* The plan's operation types for the [NCCL] frame: "AllReduce", several
 * different ones joined with '+' ("Send+Recv"), in plan order, named as its
 * library names them. From the kernel name when the plan carries no task
 * (symmetric kernels). */
void np_nccl_plan_op_types(const struct np_nccl_plan *p, const char *kernel, char *out,
                           size_t size);

const char *np_nccl_algorithm_name(int64_t algorithm); /* "RING"; "" for -1 */
const char *np_nccl_protocol_name(int64_t protocol);   /* "LL"; "" for -1 */

#endif
