/* flows.h - reads a recording's --nccl-flows files (names from
 * ncclprobe/recording.h): every line of every communicator's
 * proxy_flow_rank*.jsonl and flow_steps_rank*.jsonl, parsed. */
#ifndef NP_RECORDING_FLOWS_H
#define NP_RECORDING_FLOWS_H

#include <stdbool.h>

struct cJSON;

/* Called per line: steps false for a proxy op, true for a step; the object is freed after. */
typedef int (*np_rec_flow_fn)(void *ctx, const char *comm_dir, bool steps,
                              const struct cJSON *line);

/* 0; -ENOENT when dir has no flows/ (recorded without --nccl-flows); another -errno, or the
 * callback's non-zero return. A line that is not a JSON object is said and skipped. */
int np_rec_flows_each(const char *dir, np_rec_flow_fn fn, void *ctx);

#endif
