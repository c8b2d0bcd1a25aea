/* summary_nccl.h - the "nccl" section of summary.json: plan records and
 * what became of them, each libnccl a process mapped (its version, .symtab
 * and DWARF, how well ncclprobe reads it and why, every field offset and
 * enum name it took from the library), and the per-communicator totals. */
#ifndef NP_SUMMARY_NCCL_H
#define NP_SUMMARY_NCCL_H

#include "writers/summary.h"

struct cJSON *np_summary_nccl_json(const struct np_summary *s);

#endif
