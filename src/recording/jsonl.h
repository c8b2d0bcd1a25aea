/* jsonl.h - the JSON reader of recordings: one cJSON object per line of a
 * .jsonl file (or one object per whole file: summary.json, window.json),
 * and typed member getters that read integers exactly (timestamps beyond
 * 2^53 ns included, which a double cannot hold). What a malformed line is
 * called is returned, never said: src/recording/lines.c decides. */
#ifndef NP_RECORDING_JSONL_H
#define NP_RECORDING_JSONL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "lib/util.h"

struct np_jsonl {
    FILE *f;
    char *path; /* for messages */
    long line;  /* 1-based number of the line last read */
    char *buf;  /* getline's buffer */
    size_t cap;
    struct np_str text; /* the line with long integers quoted (see jsonl.c) */
};

/* Opens path: 0, or -errno (nothing said: the caller knows whether the file
 * is optional). r is ready for np_jsonl_close() either way. */
int np_jsonl_open(struct np_jsonl *r, const char *path);
void np_jsonl_close(struct np_jsonl *r);

/* The next non-blank line as a JSON object (the caller frees it): 1, 0 at
 * the end of the file, -EBADMSG when the line is not a JSON object (*why
 * says how, a static string), -ENOMEM, or another -errno (said). */
int np_jsonl_next(struct np_jsonl *r, cJSON **out, const char **why);

/* A whole JSON text (summary.json) parsed the same way: NULL when it is not
 * valid JSON or out of memory. */
cJSON *np_json_parse_exact(const char *text, size_t len);

/* Member `key` of obj: 0, -ENOENT when absent or null, -EINVAL when of
 * another type (for np_json_u64: not a whole number in [0, 2^64)). */
int np_json_u64(const cJSON *obj, const char *key, uint64_t *out);
int np_json_double(const cJSON *obj, const char *key, double *out);
int np_json_str(const cJSON *obj, const char *key, const char **out);
int np_json_bool(const cJSON *obj, const char *key, bool *out);

/* Whether item is an integer too long for a double, as the reader keeps it
 * (a string it marked); *digits: its decimal digits. For writers that copy
 * a parsed value back out as JSON. */
bool np_json_long_integer(const cJSON *item, const char **digits);

#endif
