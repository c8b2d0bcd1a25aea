/* run.h - `ncclprobe report` once its options are parsed: reads the
 * recording, turns --start-ts, --duration and --function into one time
 * window, groups the matching kernels by launch stack, counts the
 * diagnostics of an empty result and prints (docs/report.md). */
#ifndef NP_REPORT_RUN_H
#define NP_REPORT_RUN_H

#include "report/view.h"

/* 0, or -errno (said: bad input, an ambiguous --function, a failed write). */
int np_report_run(const struct np_report_options *opt);

#endif
