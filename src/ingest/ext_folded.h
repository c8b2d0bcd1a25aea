/* ext_folded.h - streaming reader of extended folded stacks (stacks.ext.folded,
 * docs/output-formats.md): one launch per line, `timestamp_ns comm pid tid cpu
 * frame;frame;...`. Lines are read one at a time (getline), so files of any size
 * are read in constant memory. Used by `ncclprobe merge` and by anything else
 * that reads a recording's launches back. */
#ifndef NP_EXT_FOLDED_H
#define NP_EXT_FOLDED_H

#include <stdint.h>

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

struct np_ext_reader;

/* Opens path for reading: 0, or -errno. */
int np_ext_open(const char *path, struct np_ext_reader **out);
void np_ext_close(struct np_ext_reader *r);

/* Reads the next non-blank line into *line: 1 (check line->error), 0 at the
 * end of the file, -errno on a read error. */
int np_ext_next(struct np_ext_reader *r, struct np_ext_line *line);

/* Splits one line (no trailing newline; modified in place: fields are
 * NUL-terminated) at its first five runs of whitespace. Returns 0, or -EINVAL
 * with *error saying why. Blank lines are -ENODATA. */
int np_ext_split_line(char *text, struct np_ext_line *line, const char **error);

#endif
