/* trace_json.c - streaming Chrome trace reader for `ncclprobe merge` (see
 * trace_json.h).
 *
 * The file is read in 64 KiB chunks. The scanner follows only the outer
 * structure: the top-level object (skipping members other than
 * "traceEvents") or array, then the event array, whose elements it copies
 * one at a time into a buffer that cJSON parses on its own. Numbers that
 * must keep every digit are read back from that text (np_trace_number). */
#define _GNU_SOURCE
#include "merge/trace_json.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

#define CHUNK_SIZE 65536
#define MAX_NUMBER_DIGITS 64

enum reader_state { AT_START, IN_TOP_OBJECT, IN_EVENTS, AT_END };

struct np_trace_reader {
    FILE *file;
    char chunk[CHUNK_SIZE];
    size_t pos, len;
    bool eof;
    int read_error;
    long line;
    enum reader_state state;
    bool events_in_object; /* the event array is a member of a top-level object */
    bool found_events;
    struct np_str element; /* text of the current element */
    cJSON *json;           /* the current element, parsed */
    char error[128];
};

/* Where a value being copied stands: inside a string (after a backslash),
 * how deep in brackets, whether its first byte was seen. */
struct scan_state {
    int depth;
    bool in_string;
    bool escaped;
    bool started;
};

int np_trace_open(const char *path, struct np_trace_reader **out) {
    struct np_trace_reader *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->file = fopen(path, "re");
    if (!r->file) {
        int err = -errno;
        free(r);
        return err;
    }
    r->line = 1;
    np_str_init(&r->element);
    *out = r;
    return 0;
}

void np_trace_close(struct np_trace_reader *r) {
    if (!r)
        return;
    fclose(r->file);
    cJSON_Delete(r->json);
    np_str_free(&r->element);
    free(r);
}

const char *np_trace_error(const struct np_trace_reader *r) {
    return r->error;
}

static int fail(struct np_trace_reader *r, const char *what) {
    snprintf(r->error, sizeof(r->error), "line %ld: %s", r->line, what);
    return -EBADMSG;
}

/* Makes sure a byte is buffered: false at the end of the file (or on a read
 * error, kept in read_error). */
static bool refill(struct np_trace_reader *r) {
    if (r->pos < r->len)
        return true;
    if (r->eof)
        return false;
    r->pos = 0;
    r->len = fread(r->chunk, 1, sizeof(r->chunk), r->file);
    if (r->len > 0)
        return true;
    r->eof = true;
    if (ferror(r->file))
        r->read_error = errno ? -errno : -EIO;
    return false;
}

/* The next byte without consuming it, or -1 at the end of the file. */
static int peek(struct np_trace_reader *r) {
    return refill(r) ? (unsigned char)r->chunk[r->pos] : -1;
}

static void advance(struct np_trace_reader *r) {
    if (r->chunk[r->pos++] == '\n')
        r->line++;
}

static bool is_json_space(int c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void skip_space(struct np_trace_reader *r) {
    int c;
    while ((c = peek(r)) >= 0 && is_json_space(c))
        advance(r);
}

/* Bytes that end a run the scanner can skip: inside a string, and between
 * the tokens of an object or array. */
static const bool ends_string_run[256] = {['"'] = true, ['\\'] = true, ['\n'] = true};
static const bool ends_token_run[256] = {
    ['"'] = true, ['{'] = true, ['}'] = true, ['['] = true, [']'] = true, ['\n'] = true};

/* Moves p through a string being copied: to its closing quote (consumed),
 * past one escape, or to the end of the buffer. */
static const char *scan_string(const char *p, const char *end, struct scan_state *s, long *line) {
    if (s->escaped) {
        s->escaped = false;
        return p + 1;
    }
    while (p < end && !ends_string_run[(unsigned char)*p])
        p++;
    if (p == end)
        return p;
    if (*p == '\\')
        s->escaped = true;
    else if (*p == '"')
        s->in_string = false;
    else
        (*line)++; /* a raw newline: not JSON, but the line count stays right */
    return p + 1;
}

/* Scans buffered bytes of the value being copied: true when it ended (a
 * closing bracket or quote is consumed, the byte after a bare word is not). */
static bool scan_chunk(struct np_trace_reader *r, struct scan_state *s) {
    const char *p = r->chunk + r->pos, *end = r->chunk + r->len;
    bool done = false;

    while (p < end && !done) {
        if (s->in_string) {
            p = scan_string(p, end, s, &r->line);
            done = !s->in_string && s->depth == 0;
            continue;
        }
        while (s->depth > 0 && p < end && !ends_token_run[(unsigned char)*p])
            p++; /* numbers, ':', ',' and spaces inside the value */
        if (p == end)
            break;
        char c = *p;
        bool delimiter = c == ',' || c == ']' || c == '}' || is_json_space(c);
        if (s->depth == 0 && s->started && delimiter) {
            done = true; /* the end of a bare word: the delimiter stays */
            break;
        }
        p++;
        s->started = true;
        if (c == '"')
            s->in_string = true;
        else if (c == '{' || c == '[')
            s->depth++;
        else if (c == '}' || c == ']')
            done = --s->depth <= 0; /* < 0: a stray bracket, one byte long */
        else if (c == '\n')
            r->line++;
    }
    r->pos = (size_t)(p - r->chunk);
    return done;
}

/* Copies the value at the current byte into r->element: an object or array
 * up to its closing bracket, a string up to its closing quote, anything else
 * up to the next delimiter. False when the file ended first. */
static bool capture_value(struct np_trace_reader *r) {
    struct scan_state s = {0};

    np_str_reset(&r->element);
    while (refill(r)) {
        size_t start = r->pos;
        bool done = scan_chunk(r, &s);
        np_str_append_n(&r->element, r->chunk + start, r->pos - start);
        if (done)
            return true;
    }
    return false;
}

static void skip_byte_order_mark(struct np_trace_reader *r) {
    if (refill(r) && r->len >= 3 && memcmp(r->chunk, "\xef\xbb\xbf", 3) == 0)
        r->pos = 3;
}

static int read_start(struct np_trace_reader *r) {
    skip_byte_order_mark(r);
    skip_space(r);
    int c = peek(r);
    if (c < 0)
        return r->read_error ? r->read_error : fail(r, "empty file, expected a JSON trace");
    if (c != '{' && c != '[')
        return fail(r, "not JSON: expected '{' or '[' (a Chrome trace)");
    advance(r);
    r->state = c == '[' ? IN_EVENTS : IN_TOP_OBJECT;
    r->found_events = c == '[';
    return 0;
}

/* One member of the top-level object: enters "traceEvents", skips others. */
static int read_top_member(struct np_trace_reader *r) {
    skip_space(r);
    int c = peek(r);
    if (c < 0 || c == '}') {
        r->state = AT_END;
        if (c == '}')
            advance(r);
        return 0;
    }
    if (c == ',') {
        advance(r);
        return 0;
    }
    if (c != '"')
        return fail(r, "not a Chrome trace: expected a member name in the top-level object");
    if (!capture_value(r))
        return 0; /* the file ends inside the name: at the end next time */
    bool is_events = strcmp(np_str_cstr(&r->element), "\"traceEvents\"") == 0;
    skip_space(r);
    if (peek(r) < 0)
        return 0;
    if (peek(r) != ':')
        return fail(r, "not a Chrome trace: expected ':' after a member name");
    advance(r);
    skip_space(r);
    if (is_events && peek(r) == '[') {
        advance(r);
        r->state = IN_EVENTS;
        r->found_events = r->events_in_object = true;
        return 0;
    }
    if (peek(r) >= 0)
        capture_value(r);
    return 0;
}

/* One element of the event array: 1 with *ev filled, 0 when there was none. */
static int read_event(struct np_trace_reader *r, struct np_trace_event *ev) {
    skip_space(r);
    int c = peek(r);
    if (c < 0) {
        r->state = AT_END; /* no closing bracket: allowed */
        return 0;
    }
    if (c == ',') {
        advance(r);
        return 0;
    }
    if (c == ']') {
        advance(r);
        r->state = r->events_in_object ? IN_TOP_OBJECT : AT_END;
        return 0;
    }
    ev->line = r->line;
    bool complete = capture_value(r);
    if (r->element.failed)
        return -ENOMEM;
    ev->text = np_str_cstr(&r->element);
    ev->text_len = r->element.len;
    if (c != '{') {
        ev->error = "not a JSON object";
    } else if (!complete) {
        ev->error = "incomplete event at the end of the file";
        r->state = AT_END;
    } else {
        r->json = cJSON_ParseWithLength(ev->text, ev->text_len);
        ev->json = r->json;
        if (!ev->json)
            ev->error = "invalid JSON";
    }
    return 1;
}

static int read_end(struct np_trace_reader *r) {
    if (r->read_error)
        return r->read_error;
    if (!r->found_events)
        return fail(r, "not a Chrome trace: no \"traceEvents\" array");
    return 0;
}

int np_trace_next(struct np_trace_reader *r, struct np_trace_event *ev) {
    cJSON_Delete(r->json);
    r->json = NULL;
    memset(ev, 0, sizeof(*ev));
    for (;;) {
        int ret;
        switch (r->state) {
        case AT_START:
            ret = read_start(r);
            break;
        case IN_TOP_OBJECT:
            ret = read_top_member(r);
            break;
        case IN_EVENTS:
            ret = read_event(r, ev);
            break;
        default:
            return read_end(r);
        }
        if (ret != 0)
            return ret;
    }
}

/* ---- exact numbers from the event's text ---------------------------------- */

static const char *skip_text_space(const char *p, const char *end) {
    while (p < end && is_json_space(*p))
        p++;
    return p;
}

/* p at an opening quote: returns the byte after the closing one. */
static const char *skip_text_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return end;
}

static const char *skip_text_value(const char *p, const char *end) {
    int depth = 0;
    while (p < end) {
        char c = *p;
        if (c == '"') {
            p = skip_text_string(p, end);
            if (depth == 0)
                return p;
            continue;
        }
        if (depth == 0 && (c == ',' || c == '}' || c == ']' || is_json_space(c)))
            return p;
        if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth == 0)
            return p + 1;
        p++;
    }
    return p;
}

/* The text of member `key`'s value in the JSON object text [p, end). Keys
 * are compared as written (an escaped key does not match). */
static bool find_member(const char *p, const char *end, const char *key, const char **value,
                        const char **value_end) {
    size_t key_len = strlen(key);

    p = skip_text_space(p, end);
    if (p == end || *p != '{')
        return false;
    for (p++;;) {
        p = skip_text_space(p, end);
        if (p < end && *p == ',')
            p = skip_text_space(p + 1, end);
        if (p == end || *p != '"')
            return false;
        const char *name = p + 1;
        p = skip_text_string(p, end);
        bool match = p - 1 - name == (long)key_len && memcmp(name, key, key_len) == 0;
        p = skip_text_space(p, end);
        if (p == end || *p != ':')
            return false;
        const char *start = skip_text_space(p + 1, end);
        p = skip_text_value(start, end);
        if (match) {
            *value = start;
            *value_end = p;
            return true;
        }
    }
}

/* A JSON number's digits (leading zeros included) and the power of ten of
 * its decimal point: "12.5e1" is digits "125", point after 2 + 1 = 3. */
struct decimal {
    bool negative;
    char digits[MAX_NUMBER_DIGITS];
    int ndigits;
    long point;
};

static int split_decimal(const char *p, const char *end, struct decimal *d) {
    memset(d, 0, sizeof(*d));
    if (p < end && *p == '-') {
        d->negative = true;
        p++;
    }
    bool seen_point = false;
    for (; p < end && ((*p >= '0' && *p <= '9') || (*p == '.' && !seen_point)); p++) {
        if (*p == '.') {
            seen_point = true;
            continue;
        }
        if (d->ndigits == MAX_NUMBER_DIGITS)
            return -ERANGE;
        d->digits[d->ndigits++] = *p;
        d->point += !seen_point;
    }
    if (d->ndigits == 0)
        return -EINVAL;
    if (p < end && (*p == 'e' || *p == 'E')) {
        char *exp_end;
        long exponent = strtol(p + 1, &exp_end, 10); /* the text ends at a delimiter */
        if (exp_end == p + 1 || exponent > 1000 || exponent < -1000)
            return -ERANGE;
        d->point += exponent;
        p = exp_end;
    }
    return p == end ? 0 : -EINVAL;
}

/* The decimal times 10^scale, rounded half away from zero. */
static int scale_decimal(const struct decimal *d, int scale, int64_t *out) {
    long keep = d->point + scale; /* digits that land before the new point */
    uint64_t value = 0;

    if (keep > 40)
        return -ERANGE;
    for (long i = 0; i < keep; i++) {
        int digit = i < d->ndigits ? d->digits[i] - '0' : 0;
        if (value > (INT64_MAX - (uint64_t)digit) / 10)
            return -ERANGE;
        value = value * 10 + (uint64_t)digit;
    }
    if (keep >= 0 && keep < d->ndigits && d->digits[keep] >= '5') {
        if (value == INT64_MAX)
            return -ERANGE;
        value++;
    }
    *out = d->negative ? -(int64_t)value : (int64_t)value;
    return 0;
}

static int number_from_text(const struct np_trace_event *ev, const char *parent, const char *key,
                            int scale, int64_t *out) {
    const char *p = ev->text, *end = ev->text + ev->text_len, *value, *value_end;
    struct decimal d;

    if (parent) {
        if (!find_member(p, end, parent, &value, &value_end))
            return -ENOENT;
        p = value;
        end = value_end;
    }
    if (!find_member(p, end, key, &value, &value_end))
        return -ENOENT;
    int err = split_decimal(value, value_end, &d);
    return err ? err : scale_decimal(&d, scale, out);
}

/* cJSON's double, rounded: when the text could not be read (a member name
 * written with escapes). */
static int number_from_double(double value, int scale, int64_t *out) {
    for (int i = 0; i < scale; i++)
        value *= 10;
    if (!(value > -9.2e18 && value < 9.2e18))
        return -ERANGE;
    *out = (int64_t)(value < 0 ? value - 0.5 : value + 0.5);
    return 0;
}

/* cJSON's double, when it holds the exact value: a whole number n of
 * 10^-scale units with |n| < 2^52, so that n / 10^scale is the double the
 * text was read as and no other such number rounds to it. Checked by
 * dividing back. Otherwise (more decimals, larger numbers) the text is read. */
static bool exact_from_double(double value, int scale, int64_t *out) {
    double units = 1, limit = 4503599627370496.0; /* 2^52 */
    for (int i = 0; i < scale; i++)
        units *= 10;
    double scaled = value * units;
    if (!(scaled > -limit && scaled < limit))
        return false;
    int64_t n = (int64_t)(scaled < 0 ? scaled - 0.5 : scaled + 0.5);
    if ((double)n / units != value)
        return false;
    *out = n;
    return true;
}

int np_trace_number(const struct np_trace_event *ev, const char *parent, const cJSON *item,
                    int scale, int64_t *out) {
    if (!item)
        return -ENOENT;
    if (!cJSON_IsNumber(item))
        return -EINVAL;
    if (exact_from_double(item->valuedouble, scale, out))
        return 0;
    int err = item->string ? number_from_text(ev, parent, item->string, scale, out) : -ENOENT;
    if (err == -ENOENT || err == -EINVAL)
        err = number_from_double(item->valuedouble, scale, out);
    return err;
}
