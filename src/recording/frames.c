/* frames.c - parses the frame texts of stacks.jsonl and the folded files
 * (frames.h), for the report and the writers (pprof, trace.json, the flame
 * graph).
 * A Python frame is "qualname (file)" or "qualname (file:LINE)": the text
 * ends in ')', and the qualname and the file have balanced brackets. C++
 * names with " (" inside template arguments ("f<void (int)>") do not split
 * that way, so they stay whole. */
#define _GNU_SOURCE
#include "recording/frames.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ncclprobe/recording.h"

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool np_frame_inlined(const char *text, size_t len) {
    size_t suffix = strlen(NP_FRAME_INLINED_SUFFIX);
    return len > suffix && memcmp(text + len - suffix, NP_FRAME_INLINED_SUFFIX, suffix) == 0;
}

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

static bool is_gpu_leaf(const char *frame) {
    return starts_with(frame, NP_LEAF_KERNEL) || starts_with(frame, NP_LEAF_MEMCPY) ||
           starts_with(frame, NP_LEAF_MEMSET) || starts_with(frame, NP_LEAF_PENDING);
}

enum np_frame_kind np_frame_kind(const char *frame) {
    size_t len = strlen(frame);
    if (is_gpu_leaf(frame))
        return NP_FRAME_KIND_GPU;
    if (starts_with(frame, NP_FRAME_NCCL_PREFIX))
        return NP_FRAME_KIND_NCCL;
    /* [unknown], [lib.so+0x1f2], [truncated], [python truncated], [no launch stack]... */
    if (len > 1 && frame[0] == '[' && frame[len - 1] == ']')
        return NP_FRAME_KIND_SYNTHETIC;
    if (np_frame_inlined(frame, len))
        return NP_FRAME_KIND_INLINED;
    if (python_paren(frame))
        return NP_FRAME_KIND_PYTHON;
    return NP_FRAME_KIND_NATIVE;
}

static size_t func_len(const char *frame) {
    size_t paren = python_paren(frame);
    if (paren)
        return paren;
    size_t len = strlen(frame);
    return np_frame_inlined(frame, len) ? len - strlen(NP_FRAME_INLINED_SUFFIX) : len;
}

static size_t key_len(const char *frame) {
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
    size_t n = key_len(a);
    return n == key_len(b) && memcmp(a, b, n) == 0;
}

bool np_frame_matches(const char *frame, const char *name) {
    size_t n = func_len(frame), want = strlen(name);
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

const char *np_frame_nccl_ops(const char *frame) {
    return starts_with(frame, NP_FRAME_NCCL_PREFIX) ? frame + strlen(NP_FRAME_NCCL_PREFIX) : NULL;
}

const char *np_frames_last_nccl(const char *const *frames, size_t n) {
    for (size_t i = n; i-- > 0;) {
        if (np_frame_nccl_ops(frames[i]))
            return frames[i];
    }
    return NULL;
}

bool np_frame_nccl_has_op(const char *frame, const char *op) {
    const char *ops = np_frame_nccl_ops(frame);
    size_t want = strlen(op);
    if (!ops || want == 0)
        return false;
    static const char separator[] = {NP_FRAME_NCCL_OP_SEPARATOR, '\0'};
    for (const char *p = ops;;) {
        size_t n = strcspn(p, separator);
        if (n == want && strncasecmp(p, op, n) == 0)
            return true;
        if (!p[n])
            return false;
        p += n + 1;
    }
}

/* The index of the last [graph capture] frame, or n when none. */
static size_t capture_mark(const char *const *frames, size_t n) {
    for (size_t i = n; i-- > 0;) {
        if (strcmp(frames[i], NP_FRAME_GRAPH_CAPTURE) == 0)
            return i;
    }
    return n;
}

const char *np_frames_capture_site(const char *const *frames, size_t n) {
    size_t mark = capture_mark(frames, n);
    if (mark == n)
        return NULL;
    for (size_t i = n; i-- > mark + 1;) {
        if (np_frame_kind(frames[i]) == NP_FRAME_KIND_PYTHON)
            return frames[i];
    }
    size_t api = n;
    while (api > mark + 1 && np_frame_kind(frames[api - 1]) == NP_FRAME_KIND_NCCL)
        api--;
    /* frames[api - 1] is the launch API; its caller is before it */
    return api >= mark + 3 ? frames[api - 2] : NULL;
}
