/* recfile.h - an append-only file of newline-terminated records that is
 * always cut at a record boundary.
 *
 * The per-launch files of a recording (stacks.ext.folded, the .jsonl files)
 * are written through this. Records are buffered and written whole; when a
 * write fails or comes up short (a full disk), the file is truncated back to
 * the end of its last complete record, latched as cut, and every later record
 * is counted instead of written. What was captured before stays valid. */
#ifndef NP_RECFILE_H
#define NP_RECFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct np_recfile;

/* Creates (truncates) path, mode 0666 & ~umask; -errno. */
int np_recfile_open(const char *path, struct np_recfile **out);
/* Appends one or more whole records (text ending in '\n'). Never fails:
 * an error cuts the file (np_recfile_error says which). */
void np_recfile_append(struct np_recfile *f, const char *text, size_t len);
/* The same with the text in pieces, copied straight into the buffer: a
 * record made of long parts is not put together first. */
struct np_recpart {
    const char *text;
    size_t len;
};
void np_recfile_append_parts(struct np_recfile *f, const struct np_recpart *parts, size_t n);
/* Writes what is buffered; returns the error that cut the file, or 0. */
int np_recfile_flush(struct np_recfile *f);
/* Stops writing: what is buffered is dropped and counted (used to cut every
 * file of a recording together once one of them is cut). */
void np_recfile_cut(struct np_recfile *f, int err);
bool np_recfile_is_cut(const struct np_recfile *f);
/* The -errno that cut the file, 0 if none. */
int np_recfile_error(const struct np_recfile *f);
/* Records written to disk, and records not written because the file was cut. */
uint64_t np_recfile_records(const struct np_recfile *f);
uint64_t np_recfile_records_cut(const struct np_recfile *f);
/* Flushes and closes; returns the error that cut the file, or a close error. */
int np_recfile_close(struct np_recfile *f);

#endif
