/* frames.c - parses the frame texts of stacks.jsonl and the folded files,
 * for `ncclprobe report` and the writers (pprof, the flame graph).
 * A Python frame is "qualname (file)" or "qualname (file:LINE)": the text
 * ends in ')', and the qualname and the file have balanced brackets. C++
 * names with " (" inside template arguments ("f<void (int)>") do not split
 * that way, so they stay whole. */
#define _GNU_SOURCE
#include "report/frames.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define INLINED_SUFFIX " [inlined]"

/* Whether the brackets (<>, ()) of len bytes at text pair up: a C++ name
 * whose template arguments hold a function type ("f<void ()>") does, but a
 * piece of it cut at " (" does not. */
static bool balanced(const char *text, size_t len) {
    long angle = 0, paren = 0;
    for (size_t i = 0; i < len && angle >= 0 && paren >= 0; i++) {
        angle += (text[i] == '<') - (text[i] == '>');
        paren += (text[i] == '(') - (text[i] == ')');
    }
    return angle == 0 && paren == 0;
}

bool np_frame_python(const char *text, size_t len, size_t *qual_len, const char **file,
                     size_t *file_len, int64_t *line) {
    if (len < 5 || text[0] == '[' || text[len - 1] != ')')
        return false;
    size_t open = len - 1;
    while (open > 0 && !(text[open - 1] == ' ' && text[open] == '('))
        open--;
    if (open < 2)
        return false;
    const char *name = text + open + 1;
    size_t name_len = len - open - 2;
    const char *colon = memrchr(name, ':', name_len);
    *line = 0;
    if (colon) {
        const char *digits = colon + 1, *end = text + len - 1;
        size_t n = (size_t)(end - digits), sign = n > 0 && *digits == '-';
        if (n > sign && strspn(digits + sign, "0123456789") == n - sign) {
            *line = strtoll(digits, NULL, 10);
            name_len = (size_t)(colon - name);
        }
    }
    if (!name_len || !balanced(text, open - 1) || !balanced(name, name_len))
        return false;
    *qual_len = open - 1;
    *file = name;
    *file_len = name_len;
    return true;
}

/* Offset of the " (" opening a Python frame's file, or 0 when not one. */
static size_t python_paren(const char *frame) {
    size_t qual_len, file_len;
    const char *file;
    int64_t line;
    return np_frame_python(frame, strlen(frame), &qual_len, &file, &file_len, &line) ? qual_len : 0;
}

static size_t np_frame_func_len(const char *frame) {
    size_t paren = python_paren(frame);
    if (paren)
        return paren;
    size_t len = strlen(frame), suffix = strlen(INLINED_SUFFIX);
    if (len > suffix && strcmp(frame + len - suffix, INLINED_SUFFIX) == 0)
        return len - suffix;
    return len;
}

static size_t np_frame_key_len(const char *frame) {
    size_t len = strlen(frame);
    if (!python_paren(frame))
        return len;
    size_t digits = len - 1; /* the ')' */
    while (digits > 0 && frame[digits - 1] >= '0' && frame[digits - 1] <= '9')
        digits--;
    if (digits < len - 1 && digits > 0 && frame[digits - 1] == ':')
        return digits - 1;
    return len;
}

bool np_frame_same_call(const char *a, const char *b) {
    if (a == b)
        return true;
    size_t n = np_frame_key_len(a);
    return n == np_frame_key_len(b) && memcmp(a, b, n) == 0;
}

bool np_frame_matches(const char *frame, const char *name) {
    size_t n = np_frame_func_len(frame), want = strlen(name);
    if (n == want && memcmp(frame, name, n) == 0)
        return true;
    if (!python_paren(frame))
        return false;
    const char *last = frame;
    for (size_t i = 0; i < n; i++) {
        if (frame[i] == '.')
            last = frame + i + 1;
    }
    return last != frame && (size_t)(frame + n - last) == want && memcmp(last, name, want) == 0;
}

bool np_nccl_frame_has_op(const char *frame, const char *op) {
    size_t prefix = strlen(NP_NCCL_FRAME_PREFIX), want = strlen(op);
    if (strncmp(frame, NP_NCCL_FRAME_PREFIX, prefix) != 0 || want == 0)
        return false;
    for (const char *p = frame + prefix;;) {
        size_t n = strcspn(p, "+");
        if (n == want && strncasecmp(p, op, n) == 0)
            return true;
        if (!p[n])
            return false;
        p += n + 1;
    }
}

bool np_contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    }
    return n == 0;
}
