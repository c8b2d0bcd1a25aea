/* expo.h - the text the daemon's HTTP endpoints speak, as pure functions
 * (tests/unit/http_unit.c): Prometheus text exposition format 0.0.4 (a
 * family's HELP and TYPE lines, a sample line with escaped label values),
 * and the `seconds` query argument of /pprof/... (docs/daemon.md, "HTTP"). */
#ifndef NP_HTTP_EXPO_H
#define NP_HTTP_EXPO_H

#include <stddef.h>
#include <stdint.h>

#include "lib/util.h"

#define NP_EXPO_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* "# HELP name help\n# TYPE name type\n" (help with '\\' and newline escaped). */
void np_expo_family(struct np_str *out, const char *name, const char *type, const char *help);
/* A label value as the format writes it between its quotes: '\\', '"' and
 * newline escaped; bytes that are not valid UTF-8 become '?'. */
void np_expo_escape(struct np_str *out, const char *value);
/* `name{k1="v1",k2="v2"} value\n`: labels is keys and values in turn, n
 * pairs (n 0: no braces). */
void np_expo_sample(struct np_str *out, const char *name, const char *const *labels, size_t n,
                    uint64_t value);
/* The same with a value that is not a whole number (seconds, ratios). */
void np_expo_sample_double(struct np_str *out, const char *name, const char *const *labels,
                           size_t n, double value);

/* The `seconds` argument: NULL (absent) gives def; otherwise a whole number
 * from 1 to max in decimal digits only. 0, or -EINVAL with msg saying what
 * is wrong and what is allowed. */
int np_http_parse_seconds(const char *text, unsigned def, unsigned max, unsigned *out, char *msg,
                          size_t size);

#endif
