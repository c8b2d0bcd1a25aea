/* merge.c - `ncclprobe merge`: the command. Parses the options, reads the CPU
 * launches (ingest/merge_cpu.c) and the GPU trace (ingest/merge_gpu.c) - the
 * two at once, the trace on a thread of its own - joins them
 * (correlate/merge.c) and writes the folded stacks `frame;...;[GPU_Kernel]NAME
 * COUNT` (and, when asked, weighted by GPU nanoseconds) atomically, then the
 * --summary and the closing counts (docs/merge.md). */
#define _GNU_SOURCE
#include "cli/merge.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "correlate/merge.h"
#include "ingest/merge_cpu.h"
#include "ingest/merge_gpu.h"
#include "lib/strtab.h"
#include "lib/util.h"
#include "writers/flamegraph.h"
#include "writers/formats.h"
#include "writers/pprof.h"

#define DEFAULT_TOLERANCE_MS 10.0
#define PENDING_FRAME "[GPU_Launch_Pending]"
#define OUTPUT_BUFFER_SIZE (1 << 20)

struct merge_options {
    const char *cpu_path;
    const char *gpu_path;
    const char *out_path;
    const char *gpu_ns_path;
    int64_t tolerance_ns;
    bool summary;
    bool quiet;
    unsigned formats; /* --format: pprof and svg from the merged files */
};

struct output_line {
    char *text;
    uint64_t count;
    uint64_t gpu_ns;
    bool ran_kernel;
};

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: ncclprobe merge --cpu EXT_FOLDED --gpu TRACE_JSON -o OUT [options]\n"
        "\n"
        "Joins the CPU launch stacks of a recording (stacks.ext.folded) with the\n"
        "kernels of a CUPTI Chrome trace: writes folded stacks ending in\n"
        "[GPU_Kernel]NAME (or [GPU_Launch_Pending]) with their counts.\n"
        "\n"
        "options:\n"
        "      --cpu FILE             extended folded stacks (timestamp comm pid tid cpu stack)\n"
        "      --gpu FILE             Chrome trace JSON with CUDA_Runtime and GPU_Kernel events\n"
        "  -o, --output FILE          folded stacks weighted by launch count\n"
        "      --gpu-ns-output FILE   the same stacks weighted by GPU nanoseconds\n"
        "      --tolerance-ms MS      largest CPU/trace clock gap of a pair (default 10)\n"
        "      --summary              per-kernel counts and GPU time, match counts, on stdout\n"
        "      --quiet                no warnings or closing counts on stderr\n"
        "      --format LIST          also OUT.pb.gz (pprof) and OUT.svg, GPU_NS_OUT.svg\n"
        "                             (svg) from the merged files (default none)\n"
        "  -h, --help                 this text\n");
}

static int parse_tolerance(const char *text, int64_t *out) {
    double ms;
    if (np_parse_seconds(text, &ms) < 0 || ms <= 0 || ms > 1e9) {
        np_err("invalid --tolerance-ms '%s': expected a positive number of milliseconds", text);
        return -EINVAL;
    }
    *out = (int64_t)(ms * 1e6 + 0.5);
    if (*out < 1)
        *out = 1;
    return 0;
}

static int check_options(const struct merge_options *opt) {
    if (!opt->cpu_path || !opt->gpu_path || !opt->out_path) {
        np_err("merge needs --cpu, --gpu and -o");
        return -EINVAL;
    }
    if (opt->gpu_ns_path && strcmp(opt->gpu_ns_path, opt->out_path) == 0) {
        np_err("-o and --gpu-ns-output name the same file");
        return -EINVAL;
    }
    return 0;
}

/* 0, 1 after --help, -EINVAL on a bad command line. */
static int parse_options(int argc, char **argv, struct merge_options *opt) {
    enum { OPT_CPU = 256, OPT_GPU, OPT_GPU_NS, OPT_TOLERANCE, OPT_SUMMARY, OPT_QUIET, OPT_FORMAT };
    static const struct option longopts[] = {
        {"cpu", required_argument, NULL, OPT_CPU},
        {"gpu", required_argument, NULL, OPT_GPU},
        {"output", required_argument, NULL, 'o'},
        {"gpu-ns-output", required_argument, NULL, OPT_GPU_NS},
        {"tolerance-ms", required_argument, NULL, OPT_TOLERANCE},
        {"summary", no_argument, NULL, OPT_SUMMARY},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;

    opt->tolerance_ns = (int64_t)(DEFAULT_TOLERANCE_MS * 1e6);
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_CPU:
            opt->cpu_path = optarg;
            break;
        case OPT_GPU:
            opt->gpu_path = optarg;
            break;
        case 'o':
            opt->out_path = optarg;
            break;
        case OPT_GPU_NS:
            opt->gpu_ns_path = optarg;
            break;
        case OPT_TOLERANCE:
            if (parse_tolerance(optarg, &opt->tolerance_ns) < 0)
                return -EINVAL;
            break;
        case OPT_SUMMARY:
            opt->summary = true;
            break;
        case OPT_QUIET:
            opt->quiet = true;
            break;
        case OPT_FORMAT: {
            char why[256];
            if (np_formats_parse(optarg, &opt->formats, why, sizeof(why)) < 0) {
                np_err("--format: %s", why);
                return -EINVAL;
            }
            if (opt->formats & NP_FORMAT_PERFETTO)
                np_warn("--format perfetto: merge has no per-launch times to draw; use a "
                        "recording's trace.json");
            break;
        }
        case 'h':
            usage(stdout);
            return 1;
        default:
            return -EINVAL;
        }
    }
    if (optind < argc) {
        np_err("unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    return check_options(opt);
}

/* ---- reading ------------------------------------------------------------------ */

/* The trace is read on its own thread while the main thread reads the CPU file. */
struct gpu_job {
    const char *path;
    struct np_merge_gpu *gpu;
    int err;
};

static void *gpu_job_run(void *arg) {
    struct gpu_job *job = arg;
    job->err = np_merge_gpu_read(job->path, job->gpu);
    return NULL;
}

static int read_inputs(const struct merge_options *opt, struct np_merge_cpu *cpu,
                       struct np_merge_gpu *gpu) {
    struct gpu_job job = {.path = opt->gpu_path, .gpu = gpu};
    pthread_t thread;
    bool threaded = pthread_create(&thread, NULL, gpu_job_run, &job) == 0;

    if (!threaded)
        gpu_job_run(&job);
    int cpu_err = np_merge_cpu_read(opt->cpu_path, cpu);
    if (threaded)
        pthread_join(thread, NULL);
    return cpu_err ? cpu_err : job.err;
}

/* ---- output ------------------------------------------------------------------ */

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
        np_str_append(&text, ";" NP_MERGE_KERNEL_FRAME);
        np_str_append(&text, np_strtab_text(&gpu->kernel_names, m->kernel_slot - 1));
    } else {
        np_str_append(&text, ";" PENDING_FRAME);
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
static int write_outputs(const struct merge_options *opt, const struct output_line *lines,
                         size_t n) {
    const char *paths[2] = {opt->out_path, opt->gpu_ns_path};
    char *tmps[2] = {NULL, NULL};
    size_t count = opt->gpu_ns_path ? 2 : 1, written = 0;
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

/* ---- summary ------------------------------------------------------------------ */

struct kernel_row {
    const char *name;
    struct np_kernel_stats stats;
};

static int compare_kernel_rows(const void *a, const void *b) {
    const struct kernel_row *x = a, *y = b;
    if (x->stats.gpu_ns != y->stats.gpu_ns)
        return x->stats.gpu_ns > y->stats.gpu_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int print_kernel_table(const struct np_merge_gpu *gpu,
                              const struct np_merge_result *result) {
    size_t n = 0;
    struct kernel_row *rows = calloc(gpu->kernel_names.count + 1, sizeof(*rows));
    if (!rows)
        return -ENOMEM;
    for (uint32_t id = 0; id < gpu->kernel_names.count; id++) {
        if (result->per_kernel[id].count > 0)
            rows[n++] =
                (struct kernel_row){np_strtab_text(&gpu->kernel_names, id), result->per_kernel[id]};
    }
    qsort(rows, n, sizeof(*rows), compare_kernel_rows);
    printf("%10s %14s %12s  %s\n", "count", "total_gpu_ms", "mean_us", "kernel");
    for (size_t i = 0; i < n; i++)
        printf("%10llu %14.3f %12.3f  %s\n", (unsigned long long)rows[i].stats.count,
               (double)rows[i].stats.gpu_ns / 1e6,
               (double)rows[i].stats.gpu_ns / 1e3 / (double)rows[i].stats.count, rows[i].name);
    free(rows);
    return 0;
}

static int print_summary(const struct np_merge_cpu *cpu, const struct np_merge_gpu *gpu,
                         const struct np_merge_result *result) {
    int err = print_kernel_table(gpu, result);
    if (err)
        return err;
    size_t pending = result->pending_no_event + result->pending_no_kernel;
    printf("\nCPU launches: %zu (matched %zu, pending %zu: %zu without a runtime event, "
           "%zu without a kernel)\n",
           cpu->count, result->matched, pending, result->pending_no_event,
           result->pending_no_kernel);
    printf("runtime launch events: %zu (used %zu, unused %zu; %zu replaced by a later event "
           "with the same correlationId)\n",
           gpu->nlaunches, result->launches_used, gpu->nlaunches - result->launches_used,
           gpu->duplicate_launches);
    printf("kernels: %zu (used %zu, unused %zu)\n", gpu->nkernels, result->kernels_used,
           gpu->nkernels - result->kernels_used);
    printf("skipped: %zu malformed CPU lines, %zu CPU lines with no frames left, %zu malformed "
           "trace events, %zu launch/kernel events with ts, dur or correlationId <= 0\n",
           cpu->malformed.count, cpu->no_frames, gpu->malformed.count, gpu->invalid_values);
    printf("other trace events: %zu GPU_Memcpy, %zu GPU_Memset, %zu metadata, %zu other\n",
           gpu->memcpy_events, gpu->memset_events, gpu->metadata_events, gpu->other_events);
    return fflush(stdout) == 0 ? 0 : -EIO;
}

static void print_closing_counts(const struct np_merge_cpu *cpu, const struct np_merge_gpu *gpu,
                                 const struct np_merge_result *result) {
    np_info("merged %zu CPU launches: %zu matched, %zu pending; %zu malformed CPU lines and %zu "
            "malformed trace events skipped",
            cpu->count, result->matched, result->pending_no_event + result->pending_no_kernel,
            cpu->malformed.count, gpu->malformed.count);
}

/* ---- the command ----------------------------------------------------------------- */

/* One folded file as a flame graph, PATH.svg. */
static int write_svg(const char *folded, const char *title, enum np_flame_unit unit) {
    char svg[4200];
    snprintf(svg, sizeof(svg), "%s.svg", folded);
    struct np_flame_opts o = {.title = title, .unit = unit};
    return np_flamegraph_file(folded, svg, &o);
}

/* --format: the pictures and the pprof profile of the merged files. */
static int write_formats(const struct merge_options *opt) {
    int err = 0;
    if (opt->formats & NP_FORMAT_SVG) {
        err = write_svg(opt->out_path, "ncclprobe merge: launches by stack", NP_FLAME_COUNT);
        if (!err && opt->gpu_ns_path)
            err = write_svg(opt->gpu_ns_path, "ncclprobe merge: GPU time by stack", NP_FLAME_NS);
    }
    if (!err && (opt->formats & NP_FORMAT_PPROF)) {
        char pb[4200];
        snprintf(pb, sizeof(pb), "%s.pb.gz", opt->out_path);
        err = np_write_pprof_folded(opt->out_path, opt->gpu_ns_path, pb);
    }
    return err;
}

static int run_merge(const struct merge_options *opt, struct np_merge_cpu *cpu,
                     struct np_merge_gpu *gpu, struct np_merge_result *result) {
    struct output_line *lines = NULL;
    size_t nlines = 0;

    int err = read_inputs(opt, cpu, gpu);
    if (err)
        return err;
    np_malformed_report(&cpu->malformed);
    np_malformed_report(&gpu->malformed);
    err = np_merge_correlate(cpu, gpu, opt->tolerance_ns, result);
    if (!err)
        err = build_lines(result, cpu, gpu, &lines, &nlines);
    if (err) {
        np_err("merge: %s", strerror(-err));
        return err;
    }
    err = write_outputs(opt, lines, nlines);
    free_lines(lines, nlines);
    if (!err)
        err = write_formats(opt);
    if (!err && opt->summary)
        err = print_summary(cpu, gpu, result);
    if (!err)
        print_closing_counts(cpu, gpu, result);
    return err;
}

int np_cmd_merge(int argc, char **argv) {
    struct merge_options opt = {0};
    struct np_merge_cpu cpu;
    struct np_merge_gpu gpu;
    struct np_merge_result result;

    int parsed = parse_options(argc, argv, &opt);
    if (parsed != 0) {
        if (parsed < 0)
            usage(stderr);
        return parsed < 0 ? 2 : 0;
    }
    if (opt.quiet)
        np_log_set_level(NP_LOG_ERROR);
    np_merge_cpu_init(&cpu, opt.cpu_path);
    np_merge_gpu_init(&gpu, opt.gpu_path);
    np_merge_result_init(&result);
    int err = run_merge(&opt, &cpu, &gpu, &result);
    np_merge_result_free(&result);
    np_merge_gpu_free(&gpu);
    np_merge_cpu_free(&cpu);
    return err ? 1 : 0;
}
