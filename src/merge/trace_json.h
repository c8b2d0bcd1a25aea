/* trace_json.h - streaming reader of Chrome trace JSON files, the GPU input of
 * `ncclprobe merge` (the CUPTI injection library's trace, PyTorch/Kineto-style
 * traces): one event at a time, in constant memory, whatever the file size,
 * with numbers read exactly. What the events mean is gpu_input.c's business.
 *
 * Accepted shapes: {"traceEvents":[ {...}, ... ], ...other members...} and a
 * bare array [ {...}, ... ]; the closing brackets may be missing (a writer
 * that was killed), as the Chrome trace format allows. Each element of the
 * event array is cut out of the file by a small scanner (strings, escapes,
 * bracket depth) and parsed on its own by cJSON. */
#ifndef NP_MERGE_TRACE_JSON_H
#define NP_MERGE_TRACE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* One element of the event array. Everything here belongs to the reader and
 * stays valid until the next np_trace_next() call. */
struct np_trace_event {
    cJSON *json;       /* the event object, or NULL when the element is not one */
    const char *error; /* json == NULL: why ("not a JSON object", "invalid JSON", ...) */
    const char *text;  /* the element's JSON text (not NUL-terminated) */
    size_t text_len;
    long line; /* 1-based line of the file where the element starts */
};

struct np_trace_reader;

/* Opens path: 0, or -errno. */
int np_trace_open(const char *path, struct np_trace_reader **out);
void np_trace_close(struct np_trace_reader *r);

/* The next element of the event array: 1 (check ev->json), 0 at the end of
 * the trace, -EBADMSG when the file is not a Chrome trace (np_trace_error()
 * says why and where), another -errno on a read error. */
int np_trace_next(struct np_trace_reader *r, struct np_trace_event *ev);

/* What made np_trace_next() return -EBADMSG: "line N: ...". */
const char *np_trace_error(const struct np_trace_reader *r);

/* The number `item`, a member of the event (of its member object `parent`
 * when parent is not NULL), as an exact count of 10^-scale units, rounded
 * half away from zero: with scale 3, microseconds "1234567.891" become
 * 1234567891 nanoseconds. cJSON keeps numbers as doubles; where a double
 * cannot hold the value exactly, it is read from the event's text, so every
 * digit counts. Returns 0, -ENOENT (item is NULL), -EINVAL (not a number) or
 * -ERANGE (does not fit in int64_t). */
int np_trace_number(const struct np_trace_event *ev, const char *parent, const cJSON *item,
                    int scale, int64_t *out);

#endif
