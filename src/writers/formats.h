/* formats.h - the --format list of record, convert, merge and the daemon:
 * which of the derived outputs (pprof, Perfetto trace, SVG flame graphs) are
 * written from a recording directory once its own files are closed. The
 * folded and JSONL files are always written: the others are made from them. */
#ifndef NP_FORMATS_H
#define NP_FORMATS_H

#include <stddef.h>

enum np_format {
    NP_FORMAT_PPROF = 1u << 0,    /* profile.pb.gz */
    NP_FORMAT_PERFETTO = 1u << 1, /* trace.json */
    NP_FORMAT_SVG = 1u << 2,      /* flamegraph.svg, flamegraph.gpu_ns.svg */
    NP_FORMAT_ALL = (1u << 3) - 1,
};

#define NP_FORMATS_DEFAULT NP_FORMAT_ALL
#define NP_FORMATS_HELP "pprof, perfetto, svg, all, none (folded and jsonl are always written)"

/* Parses "pprof,svg" (commas or blanks between names; "all", "none";
 * "folded" and "jsonl" accepted and ignored). 0, or -EINVAL with err
 * naming the unknown word. */
int np_formats_parse(const char *list, unsigned *out, char *err, size_t errlen);

/* Writes the selected outputs into dir; a failure is logged and the others
 * are still written. Returns the first error. */
int np_formats_write(const char *dir, unsigned formats);

/* "pprof,perfetto,svg" (or "none") for a set of formats, as parse reads it. */
void np_formats_name(unsigned formats, char *out, size_t size);

#endif
