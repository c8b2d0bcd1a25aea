/* flamegraph.h - ncclprobe's own flame graph renderer: folded stacks
 * ("f1;f2;...;leaf WEIGHT" lines) in, one self-contained interactive SVG out
 * (in the manner of flamegraph.pl: click to zoom, search, hover details),
 * frames coloured by kind (native, inlined, Python, [NCCL], GPU, unknown). */
#ifndef NP_FLAMEGRAPH_H
#define NP_FLAMEGRAPH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum np_flame_unit {
    NP_FLAME_COUNT, /* weights are counts: "N samples" */
    NP_FLAME_NS,    /* weights are GPU nanoseconds: shown as milliseconds */
};

#define NP_FLAME_DEFAULT_WIDTH 1200
#define NP_FLAME_MIN_WIDTH 200
#define NP_FLAME_MAX_WIDTH 20000

struct np_flame_opts {
    const char *title;  /* NULL: "Flame Graph" */
    const char *source; /* the input's name in messages; NULL: "input" */
    enum np_flame_unit unit;
    int width; /* pixels; 0: NP_FLAME_DEFAULT_WIDTH */
};

/* What one render read. */
struct np_flame_stats {
    uint64_t lines;   /* valid lines */
    uint64_t skipped; /* malformed lines (no weight, bad weight, no frame) */
    uint64_t total;   /* the sum of the weights (saturated at UINT64_MAX) */
};

/* Reads folded lines from in and writes the SVG to out; says what was read
 * (stats may be NULL). 0 or -errno (-EIO, -ENOMEM). */
int np_flamegraph_render_stats(FILE *in, FILE *out, const struct np_flame_opts *o,
                               struct np_flame_stats *stats);

/* dir/merged.folded -> dir/flamegraph.svg (by launch count) and, when
 * dir/merged.gpu_ns.folded has any weight, -> dir/flamegraph.gpu_ns.svg (by
 * GPU time). Files are written atomically. -ENOENT without merged.folded. */
int np_write_flamegraphs(const char *dir);
/* One folded file to one SVG (written atomically): 0 or -errno (said). */
int np_flamegraph_file(const char *in_path, const char *out_path, const struct np_flame_opts *o);

#endif
