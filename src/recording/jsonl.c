/* jsonl.c - reads a recording's JSON files (jsonl.h). cJSON keeps every
 * number as a double, which holds whole numbers exactly only below 2^53:
 * CLOCK_MONOTONIC nanoseconds pass that after 104 days of uptime, and
 * CLOCK_REALTIME ones always do. So before a text is parsed, each integer
 * written with more than 15 digits is turned into a string holding a marker
 * byte and the digits, and np_json_u64() reads those digits back exactly. */
#define _GNU_SOURCE
#include "recording/jsonl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LONG_INT_MARK '\x01'
#define LONG_INT_MARK_JSON "\\u0001"
#define DOUBLE_EXACT_DIGITS 15

int np_jsonl_open(struct np_jsonl *r, const char *path) {
    memset(r, 0, sizeof(*r));
    np_str_init(&r->text);
    r->path = strdup(path);
    if (!r->path)
        return -ENOMEM;
    r->f = fopen(r->path, "re");
    return r->f ? 0 : -errno;
}

void np_jsonl_close(struct np_jsonl *r) {
    if (r->f)
        fclose(r->f);
    free(r->path);
    free(r->buf);
    np_str_free(&r->text);
    memset(r, 0, sizeof(*r));
}

/* Length of the number token at p (sign, digits, fraction, exponent). */
static size_t number_len(const char *p, bool *integer, size_t *digits) {
    size_t n = 0;
    *integer = true;
    *digits = 0;
    for (;; n++) {
        char c = p[n];
        if (c >= '0' && c <= '9')
            (*digits)++;
        else if (c == '.' || c == 'e' || c == 'E' || c == '+')
            *integer = false;
        else if (c != '-')
            return n;
    }
}

/* The text with every long non-negative integer outside strings written as
 * "<mark>DIGITS"; everything else copied as is. */
static void quote_long_integers(struct np_str *out, const char *text, size_t len) {
    bool in_string = false;
    np_str_reset(out);
    for (size_t i = 0; i < len;) {
        char c = text[i];
        if (in_string || !(c == '-' || (c >= '0' && c <= '9'))) {
            if (in_string && c == '\\' && i + 1 < len) {
                np_str_append_n(out, text + i, 2);
                i += 2;
                continue;
            }
            if (c == '"')
                in_string = !in_string;
            np_str_append_n(out, text + i, 1);
            i++;
            continue;
        }
        bool integer;
        size_t digits, n = number_len(text + i, &integer, &digits);
        if (integer && c != '-' && digits == n && digits > DOUBLE_EXACT_DIGITS) {
            np_str_append(out, "\"" LONG_INT_MARK_JSON);
            np_str_append_n(out, text + i, n);
            np_str_append(out, "\"");
        } else {
            np_str_append_n(out, text + i, n);
        }
        i += n;
    }
}

cJSON *np_json_parse_exact(const char *text, size_t len) {
    struct np_str quoted;
    np_str_init(&quoted);
    quote_long_integers(&quoted, text, len);
    cJSON *json = quoted.failed ? NULL : cJSON_ParseWithOpts(np_str_cstr(&quoted), NULL, 1);
    np_str_free(&quoted);
    return json;
}

static bool blank(const char *s) {
    return s[strspn(s, " \t\r\n")] == '\0';
}

static int parse_line(struct np_jsonl *r, size_t len, cJSON **out, const char **why) {
    if (strlen(r->buf) != len) {
        *why = "the line holds a NUL byte";
        return -EBADMSG;
    }
    quote_long_integers(&r->text, r->buf, len);
    if (r->text.failed)
        return -ENOMEM;
    cJSON *json = cJSON_ParseWithOpts(np_str_cstr(&r->text), NULL, 1);
    if (!json) {
        *why = "not valid JSON";
        return -EBADMSG;
    }
    if (!cJSON_IsObject(json)) {
        cJSON_Delete(json);
        *why = "not a JSON object";
        return -EBADMSG;
    }
    *out = json;
    return 1;
}

int np_jsonl_next(struct np_jsonl *r, cJSON **out, const char **why) {
    *out = NULL;
    *why = NULL;
    for (;;) {
        errno = 0;
        ssize_t n = getline(&r->buf, &r->cap, r->f);
        if (n < 0) {
            if (!ferror(r->f))
                return 0;
            int err = errno ? -errno : -EIO;
            np_err("cannot read %s: %s", r->path, strerror(-err));
            return err;
        }
        r->line++;
        if (!blank(r->buf))
            return parse_line(r, (size_t)n, out, why);
    }
}

/* ---- members -------------------------------------------------------------------- */

bool np_json_long_integer(const cJSON *item, const char **digits) {
    if (!cJSON_IsString(item) || item->valuestring[0] != LONG_INT_MARK)
        return false;
    const char *d = item->valuestring + 1;
    if (!*d || strspn(d, "0123456789") != strlen(d))
        return false;
    *digits = d;
    return true;
}

static int long_integer(const cJSON *item, uint64_t *out) {
    const char *digits;
    if (!np_json_long_integer(item, &digits))
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(digits, NULL, 10);
    if (errno == ERANGE)
        return -EINVAL;
    *out = v;
    return 0;
}

static const cJSON *member(const cJSON *obj, const char *key) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    return item && !cJSON_IsNull(item) ? item : NULL;
}

int np_json_u64(const cJSON *obj, const char *key, uint64_t *out) {
    const cJSON *item = member(obj, key);
    if (!item)
        return -ENOENT;
    if (cJSON_IsString(item))
        return long_integer(item, out);
    if (!cJSON_IsNumber(item))
        return -EINVAL;
    double v = item->valuedouble;
    if (!(v >= 0 && v < 18446744073709551616.0) || v != (double)(uint64_t)v)
        return -EINVAL;
    *out = (uint64_t)v;
    return 0;
}

int np_json_double(const cJSON *obj, const char *key, double *out) {
    const cJSON *item = member(obj, key);
    const char *digits;
    if (!item)
        return -ENOENT;
    if (np_json_long_integer(item, &digits)) {
        *out = strtod(digits, NULL);
        return 0;
    }
    if (!cJSON_IsNumber(item))
        return -EINVAL;
    *out = item->valuedouble;
    return 0;
}

int np_json_str(const cJSON *obj, const char *key, const char **out) {
    const cJSON *item = member(obj, key);
    if (!item)
        return -ENOENT;
    if (!cJSON_IsString(item) || item->valuestring[0] == LONG_INT_MARK)
        return -EINVAL;
    *out = item->valuestring;
    return 0;
}

int np_json_bool(const cJSON *obj, const char *key, bool *out) {
    const cJSON *item = member(obj, key);
    if (!item)
        return -ENOENT;
    if (!cJSON_IsBool(item))
        return -EINVAL;
    *out = cJSON_IsTrue(item);
    return 0;
}
