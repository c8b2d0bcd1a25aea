/* flows.h - the --nccl-flows files of a recording (docs/nccl.md, "Flows"),
 * one set per (process, communicator, rank) in flows/comm_<commHash>/:
 *   proxy_flow_rank<R>.jsonl  one line per op posted to NCCL's proxy
 *   flow_steps_rank<R>.jsonl  one line per step of each direction and peer
 *   flow_rank<R>.json         {"rank":R,"meta":<first proxy_flow line>,"steps":[...]}
 * and flows/topology_<commHash>_rank<R>.json: the channels' peers. The
 * field names are the ones of the NCCL patch simulators read. */
#ifndef NP_WRITERS_FLOWS_H
#define NP_WRITERS_FLOWS_H

#include <stdint.h>

#include "ingest/nccl_flows.h"

struct np_flows_out;

struct np_flows_totals {
    uint64_t ops, peers, steps, sets, malformed, write_errors;
};

/* Creates dir/flows lazily (at the first record); -errno. */
int np_flows_out_open(const char *dir, struct np_flows_out **out);
void np_flows_out_write(struct np_flows_out *o, const struct np_flow_rec *r);
/* One communicator's topology, written once per (pid, comm, rank). */
struct np_flow_topology;
void np_flows_out_topology(struct np_flows_out *o, const struct np_flow_rec *r,
                           const struct np_flow_topology *t);
void np_flows_out_malformed(struct np_flows_out *o);
struct cJSON;
/* Adds totals to o as summary.json's and window.json's "nccl_flows" say them. */
void np_flows_totals_json(struct cJSON *o, const struct np_flows_totals *t);

/* Writes flow_rank<R>.json of every set, closes everything; totals may be NULL. */
void np_flows_out_close(struct np_flows_out *o, struct np_flows_totals *totals);

#endif
