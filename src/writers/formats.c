/* formats.c - the --format list and the derived writers it runs (see
 * formats.h): the library half of `ncclprobe convert`, which record and the
 * daemon (through an exec'd convert) share; merge parses the same list. */
#include "writers/formats.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/util.h"
#include "writers/flamegraph.h"
#include "writers/perfetto.h"
#include "writers/pprof.h"

static const struct {
    const char *name;
    unsigned bits;
} names[] = {
    {"pprof", NP_FORMAT_PPROF},
    {"perfetto", NP_FORMAT_PERFETTO},
    {"svg", NP_FORMAT_SVG},
    {"all", NP_FORMAT_ALL},
    {"none", 0},
    {"folded", 0},
    {"jsonl", 0},
};

int np_formats_parse(const char *list, unsigned *out, char *err, size_t errlen) {
    unsigned bits = 0;
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ", \t");
        if (n) {
            size_t i = 0;
            while (i < NP_ARRAY_SIZE(names) &&
                   !(strlen(names[i].name) == n && strncmp(names[i].name, p, n) == 0))
                i++;
            if (i == NP_ARRAY_SIZE(names)) {
                snprintf(err, errlen, "unknown format '%.*s' (%s)", (int)n, p, NP_FORMATS_HELP);
                return -EINVAL;
            }
            bits |= names[i].bits;
        }
        p += n;
        p += strspn(p, ", \t");
    }
    *out = bits;
    return 0;
}

/* The first error that matters (each writer says its own; a missing input,
 * -ENOENT, is what an aggregate set or a partial recording has). */
static int first_error(int first, int err) {
    return first ? first : (err == -ENOENT ? 0 : err);
}

int np_formats_write(const char *dir, unsigned formats) {
    int first = 0;
    if (formats & NP_FORMAT_SVG)
        first = first_error(first, np_write_flamegraphs(dir));
    if (formats & NP_FORMAT_PPROF)
        first = first_error(first, np_write_pprof(dir));
    if (formats & NP_FORMAT_PERFETTO)
        first = first_error(first, np_write_trace_json(dir));
    return first;
}

void np_formats_name(unsigned formats, char *out, size_t size) {
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < 3; i++) /* the single formats lead the table */
        if (formats & names[i].bits)
            n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s%s", n ? "," : "",
                                  names[i].name);
    if (!formats)
        snprintf(out, size, "none");
}
