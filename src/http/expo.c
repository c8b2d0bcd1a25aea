/* expo.c - Prometheus text exposition and the `seconds` argument (expo.h):
 * kept apart from the server so that the escaping and the parsing are
 * tested alone, byte for byte. */
#define _GNU_SOURCE
#include "http/expo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void np_expo_family(struct np_str *out, const char *name, const char *type, const char *help) {
    np_str_appendf(out, "# HELP %s ", name);
    for (const char *p = help; *p; p++) {
        if (*p == '\\')
            np_str_append(out, "\\\\");
        else if (*p == '\n')
            np_str_append(out, "\\n");
        else
            np_str_append_n(out, p, 1);
    }
    np_str_appendf(out, "\n# TYPE %s %s\n", name, type);
}

/* The length of the valid UTF-8 sequence at p (0: not one). */
static size_t utf8_len(const unsigned char *p) {
    size_t n = p[0] < 0x80             ? 1
               : (p[0] & 0xe0) == 0xc0 ? 2
               : (p[0] & 0xf0) == 0xe0 ? 3
               : (p[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    if (n == 2 && p[0] < 0xc2)
        return 0; /* overlong */
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

void np_expo_escape(struct np_str *out, const char *value) {
    const unsigned char *p = (const unsigned char *)value;
    while (*p) {
        size_t n = utf8_len(p);
        if (*p == '\\')
            np_str_append(out, "\\\\");
        else if (*p == '"')
            np_str_append(out, "\\\"");
        else if (*p == '\n')
            np_str_append(out, "\\n");
        else if (n)
            np_str_append_n(out, (const char *)p, n);
        else
            np_str_append(out, "?");
        p += n ? n : 1;
    }
}

static void labels_text(struct np_str *out, const char *name, const char *const *labels, size_t n) {
    np_str_append(out, name);
    if (!n)
        return;
    np_str_append(out, "{");
    for (size_t i = 0; i < n; i++) {
        np_str_appendf(out, "%s%s=\"", i ? "," : "", labels[2 * i]);
        np_expo_escape(out, labels[2 * i + 1] ? labels[2 * i + 1] : "");
        np_str_append(out, "\"");
    }
    np_str_append(out, "}");
}

void np_expo_sample(struct np_str *out, const char *name, const char *const *labels, size_t n,
                    uint64_t value) {
    labels_text(out, name, labels, n);
    np_str_append(out, " ");
    np_str_append_u64(out, value);
    np_str_append(out, "\n");
}

void np_expo_sample_double(struct np_str *out, const char *name, const char *const *labels,
                           size_t n, double value) {
    labels_text(out, name, labels, n);
    if (isnan(value))
        np_str_append(out, " NaN\n");
    else if (isinf(value))
        np_str_append(out, value > 0 ? " +Inf\n" : " -Inf\n");
    else
        np_str_appendf(out, " %.17g\n", value);
}

int np_http_parse_seconds(const char *text, unsigned def, unsigned max, unsigned *out, char *msg,
                          size_t size) {
    if (!text) {
        *out = def;
        return 0;
    }
    uint64_t v = 0;
    const char *p = text;
    for (; *p >= '0' && *p <= '9' && v <= max; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    if (p == text || *p || v < 1 || v > max) {
        snprintf(
            msg, size, "seconds=%.40s%s: %s (expected a whole number of seconds from 1 to %u)\n",
            text, strlen(text) > 40 ? "..." : "",
            p == text || (*p && (*p < '0' || *p > '9')) ? "not a whole number" : "out of range",
            max);
        return -EINVAL;
    }
    *out = (unsigned)v;
    return 0;
}
