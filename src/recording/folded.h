/* folded.h - the folded-stack reader: "frame;frame;...;leaf WEIGHT" lines
 * (launches.folded, merged.folded, merged.gpu_ns.folded, `merge` outputs,
 * any flamegraph.pl input), one at a time, from a file or a stream.
 *
 * A line is its stack, then spaces, then its weight (a decimal integer);
 * trailing blanks and "\r" do not count, blank lines are skipped. Any other
 * line (no weight, a weight out of range, no stack, a NUL byte) is
 * malformed: skipped and counted, the first few said as warnings with
 * their file and line. */
#ifndef NP_RECORDING_FOLDED_H
#define NP_RECORDING_FOLDED_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct np_folded {
    FILE *f;
    bool owned;          /* opened here: closed by np_folded_close */
    const char *name;    /* for messages */
    uint64_t max_weight; /* larger weights are malformed (UINT64_MAX unless set) */
    char *buf;
    size_t cap;
    long line;
    uint64_t malformed;
};

struct np_folded_line {
    char *stack; /* frames joined by ';' (NUL-terminated; the caller may cut it up) */
    size_t len;
    uint64_t weight;
};

/* Reads path: 0, or -errno (nothing said: the caller knows whether the file
 * is optional). r is ready for np_folded_close() either way. */
int np_folded_open(struct np_folded *r, const char *path);
/* Reads a stream the caller owns (stdin), called name in messages. */
void np_folded_attach(struct np_folded *r, FILE *f, const char *name);
void np_folded_close(struct np_folded *r);

/* The next well-formed line: 1, 0 at the end, -ENOMEM (not said), or
 * another -errno when the file cannot be read (said). */
int np_folded_next(struct np_folded *r, struct np_folded_line *out);

#endif
