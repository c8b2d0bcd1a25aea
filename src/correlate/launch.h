/* launch.h - what a decoded launch becomes before it is written: the name
 * of the kernel it runs (from the handle it passed, its host stub, or the
 * nvcc launch stub on its stack), and for NCCL the [NCCL]Op frame above the
 * kernel and the per-communicator totals of kernel launches and API calls.
 * The session calls these between ingest and the writers. */
#ifndef NP_CORRELATE_LAUNCH_H
#define NP_CORRELATE_LAUNCH_H

#include <stddef.h>

struct np_kernel_names;
struct np_symbolizer;
struct np_launch;
struct np_stack_texts;
struct np_nccl_comms;

/* The name of the kernel a launch runs, or a bracketed placeholder written
 * into buf ("<unnamed 0x...>", "<graph cudaGraphLaunch>", "<nccl kernel>"). */
const char *np_launch_kernel_name(const struct np_kernel_names *names, struct np_symbolizer *sym,
                                  const struct np_launch *l, const struct np_stack_texts *stack,
                                  char *buf, size_t size);

/* An NCCL kernel launch with its plan: the [NCCL]Op frame goes on top of
 * its stack and its communicator counts it (comms NULL: not counted). */
void np_launch_add_nccl_kernel(struct np_nccl_comms *comms, const struct np_launch *l,
                               const char *kernel, struct np_stack_texts *stack);

/* An NCCL API call (not an internal one): its communicator's totals. */
void np_launch_count_nccl_op(struct np_nccl_comms *comms, const struct np_launch *l);

#endif
