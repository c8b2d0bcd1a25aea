/* config.c - the daemon's configuration file: the `key = value` line
 * syntax (comments, quoting, CRLF, each key once), reading the file, the
 * defaults and freeing, and the process filter (see config.h). What each
 * key means, its type, range, default and messages are its row of
 * np_settings_table (session/settings.c), shared with `record`. */
#define _GNU_SOURCE
#include "daemon/config.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- defaults and freeing ---------------------------------------------- */

void np_config_free(struct np_daemon_config *c) {
    np_settings_free(NP_SIDE_CONFIG, c);
    memset(c, 0, sizeof(*c));
}

int np_config_defaults(struct np_daemon_config *c) {
    memset(c, 0, sizeof(*c));
    int rc = np_settings_defaults(NP_SIDE_CONFIG, c);
    if (rc < 0)
        np_config_free(c);
    return rc;
}

/* ---- lines --------------------------------------------------------------- */

/* Where a message goes: "FILE:LINE: " starts each. */
struct parser {
    const char *file;
    unsigned line;
    char *err;
    size_t errlen;
};

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...) {
    if (ps->err && ps->errlen) {
        int n = snprintf(ps->err, ps->errlen, "%s:%u: ", ps->file, ps->line);
        if (n >= 0 && (size_t)n < ps->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

static bool is_blank(char c) {
    return c == ' ' || c == '\t';
}

/* A quoted value ("..." with \" and \\; p at the opening quote, e the
 * line's end): unquoted into a new string. */
static int quoted_value(struct parser *ps, const char *key, const char *p, const char *e,
                        char **out) {
    struct np_str s;
    np_str_init(&s);
    np_str_append(&s, ""); /* "" is a value too */
    for (p++; p < e && *p != '"'; p++) {
        if (*p == '\\' && (p + 1 == e || (p[1] != '"' && p[1] != '\\'))) {
            np_str_free(&s);
            return fail(ps, "%s: unknown escape in quoted value (only \\\" and \\\\)", key);
        }
        p += *p == '\\';
        np_str_append_n(&s, p, 1);
    }
    if (p == e) {
        np_str_free(&s);
        return fail(ps, "%s: unterminated quoted value (a closing '\"' is missing)", key);
    }
    for (p++; p < e && is_blank(*p); p++)
        ;
    if (p < e && *p != '#') {
        np_str_free(&s);
        return fail(ps, "%s: text after the closing quote (only a # comment may follow)", key);
    }
    if (s.failed) {
        np_str_free(&s);
        return -ENOMEM;
    }
    *out = s.buf;
    return 0;
}

/* The value after '=' (p..e, blanks skipped): unquoted into a new string.
 * An unquoted one ends at a '#' that follows a blank, blanks trimmed. */
static int line_value(struct parser *ps, const char *key, const char *p, const char *e,
                      char **out) {
    if (p < e && *p == '"')
        return quoted_value(ps, key, p, e, out);
    const char *end = p;
    while (end < e && !(*end == '#' && is_blank(end[-1]))) /* p[-1] is '=' or a blank */
        end++;
    while (end > p && is_blank(end[-1]))
        end--;
    if (memchr(p, '"', (size_t)(end - p)))
        return fail(ps, "%s: '\"' inside an unquoted value (quote the whole value: \"...\")", key);
    return (*out = strndup(p, (size_t)(end - p))) ? 0 : -ENOMEM;
}

/* Refuses a line with a NUL byte or a control character other than a tab. */
static int check_text(struct parser *ps, const char *s, const char *e) {
    for (const char *q = s; q < e; q++) {
        unsigned char ch = (unsigned char)*q;
        if (ch == '\0')
            return fail(ps, "NUL byte at column %zu (a configuration file is text)",
                        (size_t)(q - s) + 1);
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return fail(ps, "control character 0x%02x at column %zu (only text and tabs)", ch,
                        (size_t)(q - s) + 1);
    }
    return 0;
}

/* The key of a line that starts at p (blanks skipped): its row, and *eq
 * the '=' after it. */
static int line_key(struct parser *ps, const char *p, const char *e, const struct np_setting **row,
                    const char **eq) {
    const char *q = p;
    while (q < e && *q != '=' && !(*q == '#' && is_blank(q[-1])))
        q++;
    if (q == e || *q != '=') {
        const char *w = p;
        while (w < e && !is_blank(*w) && *w != '#')
            w++;
        return fail(ps, "%.*s: not a 'key = value' line (no '='; '#' starts a comment)",
                    (int)(w - p > 64 ? 64 : w - p), p);
    }
    const char *key_end = q;
    while (key_end > p && is_blank(key_end[-1]))
        key_end--;
    if (key_end == p)
        return fail(ps, "missing key before '=' (lines are 'key = value')");
    *row = np_setting_by_key(p, (size_t)(key_end - p));
    if (!*row)
        return fail(ps,
                    "%.*s: unknown key (the keys are listed in `man ncclprobe` and "
                    "docs/daemon.md)",
                    (int)(key_end - p > 64 ? 64 : key_end - p), p);
    *eq = q;
    return 0;
}

/* One line (s..e, no line end) into c; seen[] holds the line each key
 * (np_settings_table's row) was set on. */
static int parse_line(struct parser *ps, const char *s, const char *e, struct np_daemon_config *c,
                      unsigned *seen) {
    const struct np_setting *row = NULL;
    const char *p = s, *eq = NULL;
    int rc = check_text(ps, s, e);

    while (!rc && p < e && is_blank(*p))
        p++;
    if (rc || p == e || *p == '#')
        return rc;
    if ((rc = line_key(ps, p, e, &row, &eq)) < 0)
        return rc;
    size_t id = (size_t)(row - np_settings_table);
    if (seen[id])
        return fail(ps, "%s: set again, first set on line %u (each key at most once)", row->key,
                    seen[id]);
    seen[id] = ps->line;

    const char *v = eq + 1;
    while (v < e && is_blank(*v))
        v++;
    char *text = NULL, msg[768];
    if ((rc = line_value(ps, row->key, v, e, &text)) < 0)
        return rc;
    rc = np_setting_set(row, NP_SIDE_CONFIG, text, c, msg, sizeof(msg));
    free(text);
    return rc == -EINVAL ? fail(ps, "%s", msg) : rc;
}

/* Every line of text[0..len) into c. */
static int parse_lines(struct parser *ps, const char *text, size_t len,
                       struct np_daemon_config *c) {
    unsigned *seen = calloc(np_settings_count, sizeof(*seen));
    size_t pos = 0;
    int rc = seen ? 0 : -ENOMEM;

    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) /* a UTF-8 byte order mark */
        pos = 3;
    while (!rc && pos < len) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        const char *e = nl ? nl : text + len;
        pos = (size_t)(e - text) + (nl ? 1 : 0);
        if (e > s && e[-1] == '\r') /* CRLF */
            e--;
        ps->line++;
        rc = parse_line(ps, s, e, c, seen);
    }
    free(seen);
    return rc;
}

int np_config_parse(const char *text, size_t len, const char *filename,
                    struct np_daemon_config *out, char *err, size_t errlen) {
    struct parser ps = {.file = filename ? filename : "(config)", .err = err, .errlen = errlen};
    struct np_daemon_config tmp;
    int rc;

    if (err && errlen)
        err[0] = '\0';
    if ((rc = np_config_defaults(&tmp)) < 0 || (rc = parse_lines(&ps, text, len, &tmp)) < 0) {
        if (rc == -ENOMEM && err && errlen)
            snprintf(err, errlen, "%s:%u: out of memory", ps.file, ps.line);
        np_config_free(&tmp);
        return rc;
    }
    np_config_free(out);
    *out = tmp;
    return 0;
}

int np_config_load(const char *path, struct np_daemon_config *out, char *err, size_t errlen) {
    struct stat st;
    char *text = NULL;
    size_t len = 0;
    int rc;

    char scratch[1];
    if (!err || !errlen) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    if (stat(path, &st) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "cannot read %s: %s (expected a configuration file)", path,
                 strerror(EISDIR));
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "cannot read %s: not a regular file", path);
        return -EINVAL;
    }
    if (st.st_size > NP_CONFIG_MAX_FILE_BYTES) {
        snprintf(err, errlen,
                 "cannot read %s: %lld bytes, more than a configuration file has "
                 "(at most 1 MiB)",
                 path, (long long)st.st_size);
        return -EFBIG;
    }
    if ((rc = np_read_file(path, &text, &len)) < 0) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
        return rc;
    }
    if (len > NP_CONFIG_MAX_FILE_BYTES) { /* grew since stat() */
        free(text);
        snprintf(err, errlen, "cannot read %s: more than a configuration file has (at most 1 MiB)",
                 path);
        return -EFBIG;
    }
    rc = np_config_parse(text, len, path, out, err, errlen);
    free(text);
    return rc;
}

/* ---- the process filter ------------------------------------------------- */

static bool matches_any(const struct np_globs *g, const char *s) {
    for (size_t i = 0; i < g->n; i++)
        if (fnmatch(g->items[i], s, 0) == 0)
            return true;
    return false;
}

static bool label_selected(const struct np_globs *include, const struct np_globs *exclude,
                           const char *s) {
    if (!s)
        s = "";
    if (include->n && !matches_any(include, s))
        return false;
    return !matches_any(exclude, s);
}

bool np_config_selects(const struct np_daemon_config *c, const struct np_process_labels *p) {
    static const struct np_process_labels none = {0};
    if (!p)
        p = &none;
    return label_selected(&c->include_comm, &c->exclude_comm, p->comm) &&
           label_selected(&c->include_exe, &c->exclude_exe, p->exe) &&
           label_selected(&c->include_cgroup, &c->exclude_cgroup, p->cgroup) &&
           label_selected(&c->include_container, &c->exclude_container, p->container);
}
