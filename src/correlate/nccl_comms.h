/* nccl_comms.h - per-communicator totals: the NCCL operations each
 * communicator of each process was asked to run (API calls: calls and
 * bytes by operation type) and the kernels it launched (plans, the
 * operations in them, GPU time once the join has it). A communicator is
 * (process, ncclComm pointer); its identity (commHash, rank, nRanks,
 * cudaDev) is filled from whichever record read it first - an API call
 * or a launch - so communicators created before ncclprobe attached are
 * named too; a pointer reused by a new communicator (another identity)
 * starts a new entry. Written to summary.json. */
#ifndef NP_NCCL_COMMS_H
#define NP_NCCL_COMMS_H

#include <stdint.h>

#include "attach/nccl_layout.h"
#include "lib/hashmap.h"

#define NP_NCCL_API_SLOTS 16 /* distinct operations of the API probes (probes.c) */

struct np_nccl_op_totals {
    uint64_t calls, bytes;
};

struct np_nccl_comm_stats {
    uint32_t pid;
    uint64_t comm;
    struct np_nccl_comm_id id;
    struct np_nccl_op_totals api[NP_NCCL_API_SLOTS]; /* API calls by operation (api slot) */
    uint64_t launches;                               /* kernel launches (plans) */
    uint64_t planned_ops;                            /* operations in those plans */
    uint64_t gpu_ns, gpu_records;                    /* GPU work the join gave those launches */
};

struct np_nccl_comms {
    struct np_map index; /* "pid:comm" -> 1-based index into items (the newest there) */
    struct np_nccl_comm_stats *items;
    size_t count, cap;
};

void np_nccl_comms_init(struct np_nccl_comms *c);
void np_nccl_comms_free(struct np_nccl_comms *c);
/* The communicator's entry (created on first sight); NULL without memory. */
struct np_nccl_comm_stats *np_nccl_comms_get(struct np_nccl_comms *c, uint32_t pid, uint64_t comm,
                                             const struct np_nccl_comm_id *id);
/* The totals' slot of an API operation ("AllReduce": ncclAllReduce and
 * ncclAllReduceConfig), -1 for none (group calls); and the operation of a
 * slot (NULL past the last). Slots follow the probe table, not any
 * library's ncclFunc_t. */
int np_nccl_api_slot(const char *api);
const char *np_nccl_api_slot_name(int slot);

#endif
