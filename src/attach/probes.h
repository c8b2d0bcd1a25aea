/* probes.h - the table of functions ncclprobe probes: their symbol names,
 * what each probe does in BPF (its role) and how its arguments are laid
 * out, so that user space can decode the raw registers an event carries.
 * Adding an entry point means adding one row to probes.c. */
#ifndef NP_PROBES_H
#define NP_PROBES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ncclprobe/events.h"

enum np_probe_family {
    NP_FAMILY_RUNTIME, /* libcudart (shared or static) */
    NP_FAMILY_DRIVER,  /* libcuda */
    NP_FAMILY_NCCL,    /* libnccl */
    NP_FAMILY_LOADER,  /* the dynamic loader (ld.so) */
    NP_FAMILY_CUPTI,   /* our own libncclprobe_cupti.so: the correlation marker */
    NP_FAMILY_PYTHON,  /* CPython itself: its code-object deallocator */
};

/* How the arguments of a probed function are passed (SysV x86-64). */
enum np_arg_layout {
    NP_LAYOUT_NONE,
    NP_LAYOUT_RT_LAUNCH,        /* (func, dim3 grid, dim3 block, args, shmem@s0, stream@s1) */
    NP_LAYOUT_RT_LAUNCH_HANDLE, /* same, but the first argument is a cudaKernel_t */
    NP_LAYOUT_RT_LAUNCH_EXC,    /* (const cudaLaunchConfig_t *cfg, func, args) */
    NP_LAYOUT_GRAPH,            /* (graphExec, stream) */
    NP_LAYOUT_DRV_LAUNCH,       /* (f, gx, gy, gz, bx, by, bz@s0, shmem@s1, stream@s2, ...) */
    NP_LAYOUT_DRV_LAUNCH_EX,    /* (const CUlaunchConfig *cfg, f, params, extra) */
    NP_LAYOUT_NCCL_LAUNCH,      /* ncclLaunchKernel(comm, plan) */
    NP_LAYOUT_NCCL_REDUCE_OP,   /* (send, recv, count, dtype, op, comm, stream@s0) */
    NP_LAYOUT_NCCL_REDUCE_ROOT, /* ncclReduce(send, recv, count, dtype, op, root, comm@s0,
                                   stream@s1) */
    NP_LAYOUT_NCCL_ROOT,        /* Broadcast/Gather/Scatter(send, recv, count, dtype, root, comm,
                                   stream@s0) */
    NP_LAYOUT_NCCL_BCAST,       /* ncclBcast(buff, count, dtype, root, comm, stream) */
    NP_LAYOUT_NCCL_PLAIN,       /* AllGather/AlltoAll(send, recv, count, dtype, comm, stream) */
    NP_LAYOUT_NCCL_P2P,         /* Send/Recv(buff, count, dtype, peer, comm, stream) */
    NP_LAYOUT_NCCL_GROUP,       /* GroupStart/GroupEnd() */
    NP_LAYOUT_HANDLE,           /* a handle producer; see out_arg/src_arg */
};

struct np_probe_def {
    const char *symbol; /* exact ELF symbol name (mangled for C++) */
    const char *api;    /* what outputs call it: "cudaLaunchKernel", "AllReduce" */
    enum np_probe_family family;
    enum np_probe_role role; /* NP_ROLE_LAUNCH, _API, _HANDLE_ENTRY or _LOADER */
    enum np_arg_layout layout;
    int deref_arg; /* argument whose pointee BPF copies, -1 for none */
    int deref_len;
    int out_arg, src_arg; /* handle producers; graph calls: out, and the capture mode's */
    enum np_handle_source src_kind;
    enum np_graph_op graph_op; /* NP_ROLE_GRAPH_CALL */
};

/* The agent's fast path (events.h): the launch APIs whose CUPTI callback
 * hands over their arguments, so that the marker can take the launch in
 * place of the int3 uprobe on the function. CUPTI's params struct holds
 * the arguments by value (generated_cuda_runtime_api_meta.h,
 * generated_cuda_meta.h); `slots` says where each register / stack-word
 * argument of the function lies in it, so user space rebuilds what the
 * int3 probe would have read (np_launch_regs_from_params). */
#define NP_FAST_SLOTS 12
struct np_fast_slot {
    uint8_t at;    /* offset in the params struct */
    uint8_t width; /* 4 or 8 bytes; 0: no such argument */
};
struct np_fast_def {
    const char *symbol;       /* the probed function (a probe def's symbol) */
    const char *thunk_target; /* where it jumps when it is a thunk (__cudaLaunchKernel) */
    uint32_t domain;          /* CUpti_CallbackDomain: 1 driver, 2 runtime */
    uint32_t cbid;            /* its callback id: the same in every CUPTI 12.4-13.5 */
    uint32_t params_len;      /* bytes of the params struct */
    int deref_at;             /* the pointer whose pointee the probe copies (-1: none) */
    uint32_t deref_len;
    bool cupti13; /* its callback id exists from CUPTI 13.0 only */
    struct np_fast_slot slots[NP_FAST_SLOTS];
};

const struct np_fast_def *np_fast_def_by_symbol(const char *symbol);
/* Rebuilds args[NP_REG_ARGS] and stack_args[NP_STACK_ARGS] from the raw
 * params bytes BPF copied into them (in place). */
void np_fast_regs_from_params(const struct np_fast_def *f, __u64 *args, __u64 *stack_args);

const struct np_probe_def *np_probe_defs(size_t *count);
/* CPython's code-object deallocator: probed at the address PyCode_Type
 * holds (a static function, which stripped builds do not name), not found
 * by symbol like the others. */
extern const struct np_probe_def np_python_code_free_def;
const struct np_probe_def *np_probe_def_by_symbol(const char *symbol);
bool np_probe_is_graph(const struct np_probe_def *def);
/* The argument (0-5 registers, 6-11 stack words) that holds an NCCL
 * function's communicator, -1 when it has none. */
int np_probe_comm_arg(const struct np_probe_def *def);

#endif
