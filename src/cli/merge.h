/* merge.h - `ncclprobe merge`, the command: its options, then one call into
 * the offline merge (merge/merge.h, docs/merge.md). */
#ifndef NP_CLI_MERGE_H
#define NP_CLI_MERGE_H

/* argv[0] is "merge". Returns the process exit code: 0 ok, 1 failure, 2 usage. */
int np_cmd_merge(int argc, char **argv);

#endif
