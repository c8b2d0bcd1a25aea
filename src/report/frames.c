/* frames.c - parses the frame texts of stacks.jsonl for `ncclprobe report`.
 * A Python frame is "qualname (file)" or "qualname (file:LINE)": the text
 * ends in ')' and the part after its last " (" holds no other parenthesis.
 * C++ names with " (" inside template arguments ("f<void (int)>") end in
 * something else, so they stay whole. */
#include "report/frames.h"

#include <string.h>
#include <strings.h>

#define INLINED_SUFFIX " [inlined]"

/* Offset of the " (" opening a Python frame's file, or 0 when not one. */
static size_t python_paren(const char *frame) {
    size_t len = strlen(frame);
    if (len < 4 || frame[len - 1] != ')')
        return 0;
    for (size_t i = len - 1; i-- > 1;) {
        if (frame[i] == ')')
            return 0;
        if (frame[i] == '(')
            return frame[i - 1] == ' ' && i + 1 < len - 1 ? i - 1 : 0;
    }
    return 0;
}

size_t np_frame_func_len(const char *frame) {
    size_t paren = python_paren(frame);
    if (paren)
        return paren;
    size_t len = strlen(frame), suffix = strlen(INLINED_SUFFIX);
    if (len > suffix && strcmp(frame + len - suffix, INLINED_SUFFIX) == 0)
        return len - suffix;
    return len;
}

size_t np_frame_key_len(const char *frame) {
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
