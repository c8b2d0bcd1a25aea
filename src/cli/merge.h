/* merge.h - `ncclprobe merge`: joins the CPU launch stacks of a recording
 * (stacks.ext.folded) with the kernels of a CUPTI Chrome trace into folded
 * stacks ending in the kernel each launch ran (docs/merge.md). */
#ifndef NP_MERGE_H
#define NP_MERGE_H

/* argv[0] is "merge". Returns the process exit code: 0 ok, 1 failure, 2 usage. */
int np_cmd_merge(int argc, char **argv);

#endif
