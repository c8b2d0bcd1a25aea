/* malformed.h - the record of input `ncclprobe merge` could not use in one
 * file (a CPU line, a trace event): counted, the first few described, and
 * reported as warnings once reading is over. Both input readers (cpu_input.c,
 * gpu_input.c) keep one, so that a bad file is described the same way
 * whichever side it is. */
#ifndef NP_MERGE_MALFORMED_H
#define NP_MERGE_MALFORMED_H

#include <stddef.h>

#include "lib/util.h"

/* How many malformed lines or events of a file are described one by one. */
#define NP_MALFORMED_SHOWN 5

struct np_malformed_log {
    const char *path;
    const char *unit; /* "line", "event" */
    size_t count;
    struct np_str shown; /* one description per line */
};

void np_malformed_init(struct np_malformed_log *log, const char *path, const char *unit);
void np_malformed_free(struct np_malformed_log *log);

/* Counts one unusable line or event at `line` of the file; why: the reason. */
void np_malformed_note(struct np_malformed_log *log, long line, const char *why);

/* Warns about the ones described, then how many there were in all. */
void np_malformed_report(const struct np_malformed_log *log);

#endif
