/* cpu_input.c - reads stacks.ext.folded for `ncclprobe merge` (cpu_input.h):
 * each line's stack normalized the way the established tool does it, interned
 * (stacks repeat, so most lines are one look-up), and the launch appended. */
#define _GNU_SOURCE
#include "merge/cpu_input.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "ncclprobe/recording.h"
#include "recording/ext_folded.h"

#define WRAPPER_FRAME "cudaLaunchKernel"
/* Distinct stack texts remembered with their normalized stack: stacks repeat,
 * so most lines are one look-up; the bound keeps all-distinct inputs from
 * holding every text twice. */
#define RAW_STACK_CACHE_MAX (1 << 18)

/* ---- normalizing stacks ---------------------------------------------------------- */

/* White space as Python's str.strip() sees it, in ASCII. */
static bool is_strip_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static void trim(const char **start, const char **end) {
    while (*start < *end && is_strip_space(**start))
        (*start)++;
    while (*end > *start && is_strip_space((*end)[-1]))
        (*end)--;
}

static bool frame_is(const char *frame, size_t len, const char *word) {
    return len == strlen(word) && memcmp(frame, word, len) == 0;
}

static bool is_dropped_frame(const char *frame, size_t len) {
    return len == 0 || frame_is(frame, len, "<no-symbol>") || frame_is(frame, len, "_start") ||
           frame_is(frame, len, "__libc_start_main");
}

/* The launch API and the nvcc-generated host stub: one "cudaLaunchKernel". */
static bool is_launch_wrapper(const char *frame, size_t len) {
    return memmem(frame, len, "cudaLaunchKernel", strlen("cudaLaunchKernel")) ||
           memmem(frame, len, "__device_stub__", strlen("__device_stub__"));
}

/* Where the frames to merge end: before the [GPU_Kernel]NAME leaf our own
 * recordings end with (files of other tools have none). */
static const char *frames_end(const char *stack) {
    const char *end = stack + strlen(stack);
    const char *sep = memrchr(stack, ';', (size_t)(end - stack));
    const char *leaf = sep ? sep + 1 : stack, *leaf_end = end;

    trim(&leaf, &leaf_end);
    if (strncmp(leaf, NP_LEAF_KERNEL, strlen(NP_LEAF_KERNEL)) == 0)
        return sep ? sep : stack;
    return end;
}

/* Appends the frame as the established tool keeps it; *wrapper_seen: a
 * launch wrapper frame was kept already. Returns whether it was kept. */
static bool keep_frame(const char *frame, const char *frame_end, bool *wrapper_seen,
                       struct np_str *out) {
    trim(&frame, &frame_end);
    size_t len = (size_t)(frame_end - frame);
    if (is_dropped_frame(frame, len))
        return false;
    if (is_launch_wrapper(frame, len)) {
        if (*wrapper_seen)
            return false;
        *wrapper_seen = true;
        frame = WRAPPER_FRAME;
        len = strlen(WRAPPER_FRAME);
    }
    if (out->len > 0)
        np_str_append_n(out, ";", 1);
    np_str_append_n(out, frame, len);
    return true;
}

/* The stack's frames, trimmed, without empty and startup frames, launch
 * wrappers folded into one, joined by ';' in out. Returns how many. */
static size_t normalize_stack(const char *stack, struct np_str *out) {
    const char *end = frames_end(stack);
    bool wrapper_seen = false;
    size_t kept = 0;

    np_str_reset(out);
    for (const char *p = stack;;) {
        const char *sep = memchr(p, ';', (size_t)(end - p));
        kept += keep_frame(p, sep ? sep : end, &wrapper_seen, out);
        if (!sep)
            return kept;
        p = sep + 1;
    }
}

/* ---- reading ------------------------------------------------------------------- */

/* Room for one more launch in both parallel arrays. */
static int reserve_launch(struct np_merge_cpu *cpu) {
    size_t points_cap = cpu->cap, ids_cap = cpu->cap;
    struct np_match_point *points =
        np_grow_array(cpu->points, &points_cap, cpu->count + 1, sizeof(*points));
    if (!points)
        return -ENOMEM;
    cpu->points = points;
    uint32_t *ids = np_grow_array(cpu->stack_ids, &ids_cap, cpu->count + 1, sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    cpu->stack_ids = ids;
    cpu->cap = ids_cap;
    return 0;
}

/* The id of the normalized stack of a line's stack text: 1, 0 when no
 * frame is left, or -errno. */
static int stack_id_of(struct np_merge_cpu *cpu, const char *text, struct np_str *scratch,
                       uint32_t *id) {
    const struct np_interned *known = np_map_get_str(&cpu->raw_stacks, text);
    if (known) {
        *id = known->id;
        return 1;
    }
    if (normalize_stack(text, scratch) == 0)
        return 0;
    int err = scratch->failed ? -ENOMEM : np_strtab_intern(&cpu->stacks, np_str_cstr(scratch), id);
    if (!err && cpu->raw_stacks.count < RAW_STACK_CACHE_MAX)
        err = np_map_put_str(&cpu->raw_stacks, text, cpu->stacks.items[*id]);
    return err ? err : 1;
}

static int add_launch(struct np_merge_cpu *cpu, const struct np_ext_line *line, uint32_t stack_id) {
    int err = reserve_launch(cpu);
    if (err)
        return err;
    cpu->points[cpu->count] = (struct np_match_point){
        .ts_ns = line->ts_ns,
        .thread = np_match_thread_key(line->pid, line->tid),
    };
    cpu->stack_ids[cpu->count++] = stack_id;
    return 0;
}

static int read_lines(struct np_ext_reader *reader, struct np_merge_cpu *cpu) {
    struct np_ext_line line;
    struct np_str scratch;
    uint32_t stack_id;
    int ret, err = 0;

    np_str_init(&scratch);
    while (!err && (ret = np_ext_next(reader, &line)) > 0) {
        if (line.error) {
            np_malformed_note(&cpu->malformed, line.line_no, line.error);
            continue;
        }
        int found = stack_id_of(cpu, line.stack, &scratch, &stack_id);
        if (found == 0)
            cpu->no_frames++;
        err = found == 1 ? add_launch(cpu, &line, stack_id) : (found < 0 ? found : 0);
    }
    np_str_free(&scratch);
    return err ? err : ret;
}

int np_merge_cpu_read(const char *path, struct np_merge_cpu *cpu) {
    struct np_ext_reader reader;
    int err = np_ext_open(&reader, path);
    if (err) {
        np_err("cannot open %s: %s", path, strerror(-err));
        return err;
    }
    err = read_lines(&reader, cpu);
    if (err)
        np_err("reading %s: %s", path, strerror(-err));
    np_ext_close(&reader);
    return err;
}

void np_merge_cpu_init(struct np_merge_cpu *cpu, const char *path) {
    memset(cpu, 0, sizeof(*cpu));
    np_strtab_init(&cpu->stacks);
    np_map_init(&cpu->raw_stacks);
    np_malformed_init(&cpu->malformed, path, "line");
}

void np_merge_cpu_free(struct np_merge_cpu *cpu) {
    np_strtab_free(&cpu->stacks);
    np_map_free(&cpu->raw_stacks, NULL);
    free(cpu->points);
    free(cpu->stack_ids);
    np_malformed_free(&cpu->malformed);
}
