/* ext_folded.c - reads stacks.ext.folded line by line (see ext_folded.h):
 * getline, then each line split at its first five runs of blanks, the
 * numbers checked. */
#define _GNU_SOURCE
#include "recording/ext_folded.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

/* pid and tid are kept below 2^31 (Linux allows at most 2^22), so that readers
 * may reserve keys above every (pid, tid) pair (the merge's "no thread"). */
#define MAX_ID 0x7fffffffL

int np_ext_open(struct np_ext_reader *r, const char *path) {
    memset(r, 0, sizeof(*r));
    r->file = fopen(path, "re");
    return r->file ? 0 : -errno;
}

void np_ext_close(struct np_ext_reader *r) {
    if (r->file)
        fclose(r->file);
    free(r->buf);
    memset(r, 0, sizeof(*r));
}

static bool is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* NUL-terminates the field at *cursor and moves the cursor past the blanks
 * after it; returns the field, or NULL when the line has no more fields. */
static char *take_field(char **cursor) {
    char *p = *cursor;
    while (is_blank(*p))
        p++;
    if (!*p)
        return NULL;
    char *field = p;
    while (*p && !is_blank(*p))
        p++;
    if (*p)
        *p++ = '\0';
    while (is_blank(*p))
        p++;
    *cursor = p;
    return field;
}

static int parse_id(const char *text, uint32_t *out) {
    long v;
    int err = np_parse_long(text, 0, MAX_ID, &v);
    if (err)
        return err;
    *out = (uint32_t)v;
    return 0;
}

/* Splits one line (no trailing newline; modified in place: fields are
 * NUL-terminated) at its first five runs of blanks. Returns 0, or -EINVAL
 * with *error saying why. Blank lines are -ENODATA. */
static int split_line(char *text, struct np_ext_line *line, const char **error) {
    char *cursor = text, *fields[5];
    long ts;

    for (size_t i = 0; i < NP_ARRAY_SIZE(fields); i++) {
        fields[i] = take_field(&cursor);
        if (!fields[i]) {
            *error = "fewer than 6 fields";
            return i == 0 ? -ENODATA : -EINVAL;
        }
    }
    if (!*cursor) {
        *error = "fewer than 6 fields";
        return -EINVAL;
    }
    if (np_parse_long(fields[0], 0, LONG_MAX, &ts) < 0) {
        *error = "timestamp is not a non-negative integer";
        return -EINVAL;
    }
    if (parse_id(fields[2], &line->pid) < 0 || parse_id(fields[3], &line->tid) < 0) {
        *error = "pid or tid is not a number";
        return -EINVAL;
    }
    if (parse_id(fields[4], &line->cpu) < 0) {
        *error = "cpu is not a number";
        return -EINVAL;
    }
    line->ts_ns = ts;
    line->comm = fields[1];
    line->stack = cursor;
    return 0;
}

static void strip_line_end(char *text, ssize_t *len) {
    while (*len > 0 && (text[*len - 1] == '\n' || text[*len - 1] == '\r'))
        text[--*len] = '\0';
}

/* getline() returned -1: the end of the file (0), or why not (-errno). */
static int read_end_status(const struct np_ext_reader *r) {
    if (errno == ENOMEM || errno == EOVERFLOW)
        return -errno;
    if (ferror(r->file))
        return errno ? -errno : -EIO;
    return 0;
}

int np_ext_next(struct np_ext_reader *r, struct np_ext_line *line) {
    for (;;) {
        errno = 0;
        ssize_t len = getline(&r->buf, &r->cap, r->file);
        if (len < 0)
            return read_end_status(r);
        r->line_no++;
        strip_line_end(r->buf, &len);
        memset(line, 0, sizeof(*line));
        line->line_no = r->line_no;
        const char *error = NULL;
        int err = split_line(r->buf, line, &error);
        if (err == -ENODATA)
            continue; /* blank line */
        line->error = err ? error : NULL;
        return 1;
    }
}
