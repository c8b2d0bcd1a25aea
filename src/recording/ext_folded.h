/* ext_folded.h - the reader of a recording's stacks.ext.folded
 * (docs/output-formats.md), the one reader of its line format: one
 * launch per line, `timestamp_ns comm pid tid cpu frame;frame;...`. It lives
 * with the recording because `record` writes the file; `ncclprobe merge` reads
 * it (the same format written by other tools too). Lines are read one at a
 * time (getline), so files of any size are read in constant memory. */
#ifndef NP_RECORDING_EXT_FOLDED_H
#define NP_RECORDING_EXT_FOLDED_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One line of the file. The strings point into the reader's line buffer and
 * stay valid until the next np_ext_next() call. */
struct np_ext_line {
    long line_no;      /* 1-based line number in the file */
    const char *error; /* NULL, or why the line is malformed (the fields below are then unset) */
    int64_t ts_ns;     /* >= 0 */
    const char *comm;
    uint32_t pid;
    uint32_t tid;
    uint32_t cpu;
    const char *stack; /* the rest of the line: frames joined by ';', may contain spaces */
};

/* A file being read; the caller's, all members the reader's. */
struct np_ext_reader {
    FILE *file;
    char *buf; /* the current line */
    size_t cap;
    long line_no;
};

/* Opens path for reading: 0, or -errno. */
int np_ext_open(struct np_ext_reader *r, const char *path);
/* Closes what np_ext_open() opened (after a failed open too). */
void np_ext_close(struct np_ext_reader *r);

/* Reads the next non-blank line into *line: 1 (check line->error), 0 at the
 * end of the file, -errno on a read error. */
int np_ext_next(struct np_ext_reader *r, struct np_ext_line *line);

#endif
