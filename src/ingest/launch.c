/* launch.c - argument decoding per layout (see launch.h). Register order is SysV x86-64: rdi rsi
 * rdx rcx r8 r9, then the stack above the return address. A dim3 (12 bytes)
 * travels in two registers: x|y<<32, then z. */
#include "ingest/launch.h"

#include <string.h>

static void dims_from_regs(uint32_t dim[3], uint64_t xy, uint64_t z) {
    dim[0] = (uint32_t)xy;
    dim[1] = (uint32_t)(xy >> 32);
    dim[2] = (uint32_t)z;
}

/* cudaLaunchConfig_t and CUlaunchConfig agree on the part we read:
 * grid x,y,z @0, block x,y,z @12, shared memory @24, stream @32. */
static void dims_from_config(struct np_launch *l, const uint8_t *cfg, bool smem_is_size_t) {
    uint32_t u[7];
    memcpy(u, cfg, sizeof(u));
    memcpy(l->grid, &u[0], sizeof(l->grid));
    memcpy(l->block, &u[3], sizeof(l->block));
    if (smem_is_size_t)
        memcpy(&l->shmem, cfg + 24, sizeof(l->shmem));
    else
        l->shmem = u[6];
    memcpy(&l->stream, cfg + 32, sizeof(l->stream));
    l->has_dims = true;
}

static void decode_nccl(struct np_launch *l, const __u64 *a, const __u64 *s) {
    l->is_nccl_op = true;
    switch (l->def->layout) {
    case NP_LAYOUT_NCCL_REDUCE_OP: /* send, recv, count, dtype, op, comm, stream@s0 */
        l->sendbuff = a[0], l->recvbuff = a[1], l->count = a[2];
        l->datatype = (int32_t)a[3], l->redop = (int32_t)a[4], l->comm = a[5], l->stream = s[0];
        break;
    case NP_LAYOUT_NCCL_REDUCE_ROOT: /* send, recv, count, dtype, op, root, comm@s0, stream@s1 */
        l->sendbuff = a[0], l->recvbuff = a[1], l->count = a[2];
        l->datatype = (int32_t)a[3], l->redop = (int32_t)a[4], l->root = (int32_t)a[5];
        l->comm = s[0], l->stream = s[1];
        break;
    case NP_LAYOUT_NCCL_ROOT: /* send, recv, count, dtype, root, comm, stream@s0 */
        l->sendbuff = a[0], l->recvbuff = a[1], l->count = a[2];
        l->datatype = (int32_t)a[3], l->root = (int32_t)a[4], l->comm = a[5], l->stream = s[0];
        break;
    case NP_LAYOUT_NCCL_PLAIN: /* send, recv, count, dtype, comm, stream */
        l->sendbuff = a[0], l->recvbuff = a[1], l->count = a[2];
        l->datatype = (int32_t)a[3], l->comm = a[4], l->stream = a[5];
        break;
    case NP_LAYOUT_NCCL_BCAST: /* buff, count, dtype, root, comm, stream */
        l->sendbuff = l->recvbuff = a[0], l->count = a[1], l->datatype = (int32_t)a[2];
        l->root = (int32_t)a[3], l->comm = a[4], l->stream = a[5];
        break;
    case NP_LAYOUT_NCCL_P2P: /* buff, count, dtype, peer, comm, stream */
        l->sendbuff = a[0], l->count = a[1], l->datatype = (int32_t)a[2];
        l->peer = (int32_t)a[3], l->comm = a[4], l->stream = a[5];
        break;
    default: /* group start/end: no arguments */
        break;
    }
}

void np_launch_decode(const struct np_launch_event *e, const struct np_probe_def *def,
                      struct np_launch *l) {
    const __u64 *a = e->args, *s = e->stack_args;

    memset(l, 0, sizeof(*l));
    l->ev = e;
    l->def = def;
    l->datatype = l->redop = l->root = l->peer = -1;

    switch (def->layout) {
    case NP_LAYOUT_RT_LAUNCH:
    case NP_LAYOUT_RT_LAUNCH_HANDLE:
        l->func = a[0];
        dims_from_regs(l->grid, a[1], a[2]);
        dims_from_regs(l->block, a[3], a[4]);
        l->shmem = s[0];
        l->stream = s[1];
        l->has_dims = true;
        break;
    case NP_LAYOUT_RT_LAUNCH_EXC:
        l->func = a[1];
        if (!(e->flags & NP_LF_DEREF_ERR) && a[0])
            dims_from_config(l, e->deref, true);
        break;
    case NP_LAYOUT_DRV_LAUNCH:
        l->func = a[0];
        l->grid[0] = (uint32_t)a[1], l->grid[1] = (uint32_t)a[2], l->grid[2] = (uint32_t)a[3];
        l->block[0] = (uint32_t)a[4], l->block[1] = (uint32_t)a[5], l->block[2] = (uint32_t)s[0];
        l->shmem = (uint32_t)s[1];
        l->stream = s[2];
        l->has_dims = true;
        break;
    case NP_LAYOUT_DRV_LAUNCH_EX:
        l->func = a[1];
        if (!(e->flags & NP_LF_DEREF_ERR) && a[0])
            dims_from_config(l, e->deref, false);
        break;
    case NP_LAYOUT_GRAPH:
        l->func = a[0];
        l->stream = a[1];
        break;
    case NP_LAYOUT_NCCL_LAUNCH:
        l->comm = a[0];
        l->func = a[1]; /* the kernel plan */
        break;
    case NP_LAYOUT_NONE:
    case NP_LAYOUT_HANDLE:
        break;
    default:
        decode_nccl(l, a, s);
        break;
    }
}
