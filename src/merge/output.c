/* output.c - the files of a merge (output.h): the joined (stack, kernel)
 * counts turned into text lines, sorted and folded, written next to their
 * final names and renamed together; then the flame graphs and the pprof
 * profile of those files, by the writers. */
#define _GNU_SOURCE
#include "merge/output.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/strtab.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"
#include "writers/flamegraph.h"
#include "writers/formats.h"
#include "writers/pprof.h"

#define OUTPUT_BUFFER_SIZE (1 << 20)

struct output_line {
    char *text;
    uint64_t count;
    uint64_t gpu_ns;
    bool ran_kernel;
};

/* ---- the lines ------------------------------------------------------------------ */

static int compare_lines(const void *a, const void *b) {
    const struct output_line *x = a, *y = b;
    return strcmp(x->text, y->text);
}

static void free_lines(struct output_line *lines, size_t n) {
    for (size_t i = 0; lines && i < n; i++)
        free(lines[i].text);
    free(lines);
}

static char *line_text(const struct np_merged_stack *m, const struct np_merge_cpu *cpu,
                       const struct np_merge_gpu *gpu) {
    struct np_str text;
    np_str_init(&text);
    np_str_append(&text, np_strtab_text(&cpu->stacks, m->stack_id));
    if (m->kernel_slot) {
        np_str_append(&text, ";" NP_LEAF_KERNEL);
        np_str_append(&text, np_strtab_text(&gpu->kernel_names, m->kernel_slot - 1));
    } else {
        np_str_append(&text, ";" NP_LEAF_PENDING);
    }
    if (text.failed) {
        np_str_free(&text);
        return NULL;
    }
    return text.buf;
}

/* Sums lines with the same text (sorted), in place; returns how many are left. */
static size_t fold_equal_lines(struct output_line *lines, size_t n) {
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept > 0 && strcmp(lines[kept - 1].text, lines[i].text) == 0) {
            lines[kept - 1].count += lines[i].count;
            lines[kept - 1].gpu_ns += lines[i].gpu_ns;
            lines[kept - 1].ran_kernel |= lines[i].ran_kernel;
            free(lines[i].text);
            continue;
        }
        lines[kept++] = lines[i];
    }
    return kept;
}

/* The merged stacks as text, sorted byte-wise. */
static int build_lines(const struct np_merge_result *result, const struct np_merge_cpu *cpu,
                       const struct np_merge_gpu *gpu, struct output_line **out, size_t *count) {
    size_t n = 0;
    struct output_line *lines = calloc(result->merged.count + 1, sizeof(*lines));
    if (!lines)
        return -ENOMEM;
    for (size_t i = 0; i < result->merged.cap; i++) {
        if (!result->merged.slots[i].used)
            continue;
        const struct np_merged_stack *m = result->merged.slots[i].value;
        lines[n] =
            (struct output_line){line_text(m, cpu, gpu), m->count, m->gpu_ns, m->kernel_slot != 0};
        if (!lines[n++].text) {
            free_lines(lines, n);
            return -ENOMEM;
        }
    }
    qsort(lines, n, sizeof(*lines), compare_lines);
    *out = lines;
    *count = fold_equal_lines(lines, n);
    return 0;
}

/* ---- the folded files ------------------------------------------------------------- */

static char *temp_path(const char *path) {
    char *tmp = NULL;
    return asprintf(&tmp, "%s.tmp", path) < 0 ? NULL : tmp;
}

/* Writes path.tmp: lines weighted by count, or by GPU ns (pending ones left out). */
static int write_temp(const char *tmp, const struct output_line *lines, size_t n, bool by_gpu_ns) {
    FILE *f = fopen(tmp, "we");
    if (!f)
        return -errno;
    setvbuf(f, NULL, _IOFBF, OUTPUT_BUFFER_SIZE);
    for (size_t i = 0; i < n; i++) {
        if (by_gpu_ns && !lines[i].ran_kernel)
            continue;
        unsigned long long weight = by_gpu_ns ? lines[i].gpu_ns : lines[i].count;
        fprintf(f, "%s %llu\n", lines[i].text, weight);
    }
    int err = ferror(f) ? (errno ? -errno : -EIO) : 0;
    if (fclose(f) != 0 && !err)
        err = errno ? -errno : -EIO;
    if (err)
        unlink(tmp);
    return err;
}

/* Writes both outputs next to their final names, then renames them: a
 * failed merge leaves no half-written file. */
static int write_folded(const struct np_merge_opts *opts, const struct output_line *lines,
                        size_t n) {
    const char *paths[2] = {opts->out_path, opts->gpu_ns_path};
    char *tmps[2] = {NULL, NULL};
    size_t count = opts->gpu_ns_path ? 2 : 1, written = 0;
    int err = 0;

    for (; written < count && !err; written++) {
        tmps[written] = temp_path(paths[written]);
        err = tmps[written] ? write_temp(tmps[written], lines, n, written == 1) : -ENOMEM;
        if (err)
            np_err("cannot write %s: %s", paths[written], strerror(-err));
    }
    for (size_t i = 0; i < count && !err; i++) {
        if (rename(tmps[i], paths[i]) != 0) {
            err = -errno;
            np_err("cannot rename %s to %s: %s", tmps[i], paths[i], strerror(errno));
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (err && tmps[i])
            unlink(tmps[i]);
        free(tmps[i]);
    }
    return err;
}

/* ---- --format ---------------------------------------------------------------------- */

/* One folded file as a flame graph, PATH.svg. */
static int write_svg(const char *folded, const char *title, enum np_flame_unit unit) {
    char svg[4200];
    snprintf(svg, sizeof(svg), "%s.svg", folded);
    struct np_flame_opts o = {.title = title, .unit = unit};
    return np_flamegraph_file(folded, svg, &o);
}

/* The pictures and the pprof profile of the merged files. */
static int write_formats(const struct np_merge_opts *opts) {
    int err = 0;
    if (opts->formats & NP_FORMAT_SVG) {
        err = write_svg(opts->out_path, "ncclprobe merge: launches by stack", NP_FLAME_COUNT);
        if (!err && opts->gpu_ns_path)
            err = write_svg(opts->gpu_ns_path, "ncclprobe merge: GPU time by stack", NP_FLAME_NS);
    }
    if (!err && (opts->formats & NP_FORMAT_PPROF)) {
        char pb[4200];
        snprintf(pb, sizeof(pb), "%s.pb.gz", opts->out_path);
        err = np_write_pprof_folded(opts->out_path, opts->gpu_ns_path, pb);
    }
    return err;
}

int np_merge_write_outputs(const struct np_merge_opts *opts, const struct np_merge_cpu *cpu,
                           const struct np_merge_gpu *gpu, const struct np_merge_result *result) {
    struct output_line *lines = NULL;
    size_t nlines = 0;

    int err = build_lines(result, cpu, gpu, &lines, &nlines);
    if (err) {
        np_err("merge: %s", strerror(-err));
        return err;
    }
    err = write_folded(opts, lines, nlines);
    free_lines(lines, nlines);
    return err ? err : write_formats(opts);
}
