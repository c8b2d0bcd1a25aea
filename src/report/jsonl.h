/* jsonl.h - the JSON Lines reader of `ncclprobe report`: one cJSON object per
 * line of a recording's .jsonl files, each error named by file and line, and
 * typed member getters that read integers exactly (timestamps beyond 2^53 ns
 * included, which a double cannot hold). */
#ifndef NP_REPORT_JSONL_H
#define NP_REPORT_JSONL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "lib/util.h"

struct np_jsonl {
    FILE *f;
    char *path; /* DIR/NAME, for messages */
    long line;  /* 1-based number of the line last read */
    char *buf;  /* getline's buffer */
    size_t cap;
    struct np_str text; /* the line with long integers quoted (see jsonl.c) */
};

/* Opens DIR/NAME: 0, or -errno (nothing said: the caller knows whether the
 * file is optional). r is ready for np_jsonl_close() either way. */
int np_jsonl_open(struct np_jsonl *r, const char *dir, const char *name);
void np_jsonl_close(struct np_jsonl *r);

/* The next non-blank line as a JSON object (the caller frees it): 1, 0 at
 * the end of the file, -EBADMSG when the line is not a JSON object, or
 * another -errno; errors are said on stderr with the file and line. */
int np_jsonl_next(struct np_jsonl *r, cJSON **out);

/* Says "PATH:LINE: MESSAGE" on stderr; returns -EBADMSG. */
int np_jsonl_error(const struct np_jsonl *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Member `key` of obj: 0, -ENOENT when absent or null, -EINVAL when of
 * another type (for np_json_u64: not a whole number in [0, 2^64)). */
int np_json_u64(const cJSON *obj, const char *key, uint64_t *out);
int np_json_str(const cJSON *obj, const char *key, const char **out);
int np_json_bool(const cJSON *obj, const char *key, bool *out);

#endif
