/* flows.h - `ncclprobe report --flows [DIR]`: per communicator of a
 * --nccl-flows recording, its ops and bytes per peer and per channel and
 * its steps per pattern and protocol, as a short table or one JSON object. */
#ifndef NP_REPORT_FLOWS_H
#define NP_REPORT_FLOWS_H

#include "report/view.h"

/* 0, or -errno (said: no flows in DIR, a failed write). */
int np_report_flows(const struct np_report_options *opt);

#endif
