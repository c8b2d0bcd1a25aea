/* report.h - `ncclprobe report [DIR]`: the call stacks that launched the
 * matching (by default NCCL) kernels of a recording, most frequent first
 * (docs/report.md). */
#ifndef NP_CLI_REPORT_H
#define NP_CLI_REPORT_H

/* argv[0] is "report". Returns the exit status: 0, 1 (bad input, failure),
 * 2 (usage error). */
int np_cmd_report(int argc, char **argv);

#endif
