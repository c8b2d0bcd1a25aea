/* cpu_input.h - the CPU input of `ncclprobe merge`: an extended folded file
 * (stacks.ext.folded, read by recording/ext_folded.c) turned into one launch
 * per line - its time and thread for the matcher, its stack normalized and
 * interned. Stacks are normalized by the established Python merge tool's
 * frame rules (startup frames dropped, launch wrappers collapsed), so that its
 * users get the same bytes (docs/merge.md). */
#ifndef NP_MERGE_CPU_INPUT_H
#define NP_MERGE_CPU_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "lib/hashmap.h"
#include "lib/strtab.h"
#include "merge/malformed.h"
#include "merge/match.h"

struct np_merge_cpu {
    struct np_strtab stacks;  /* normalized stacks */
    struct np_map raw_stacks; /* stack text as read -> struct np_interned of its normalized stack */
    /* One entry per launch, in file order: */
    struct np_match_point *points;
    uint32_t *stack_ids; /* into stacks */
    size_t count, cap;
    size_t no_frames; /* lines with no frame left once normalized */
    struct np_malformed_log malformed;
};

void np_merge_cpu_init(struct np_merge_cpu *cpu, const char *path);
void np_merge_cpu_free(struct np_merge_cpu *cpu);

/* Reads the file at path (the one given to init): 0, or -errno (said on stderr). */
int np_merge_cpu_read(const char *path, struct np_merge_cpu *cpu);

#endif
