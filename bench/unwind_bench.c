/* unwind_bench.c - user-space unwinding + symbolization throughput, warm
 * caches, one core: replays launch records captured with
 * `ncclprobe record --raw-dump FILE` through the same code the daemon runs
 * (np_ingest_build_stack: DWARF unwinding or the frame-pointer chain, then
 * symbolization into a folded stack), against the still-running target.
 *
 *   unwind_bench DUMP PID [SECONDS]
 * Prints: records, mean frames per stack, events/s. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest.h"
#include "lib/util.h"
#include "ncclprobe/events.h"
#include "session/target.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"

static int load_records(const char *path, pid_t pid, char ***out, size_t *count) {
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    uint32_t size;
    size_t n = 0, cap = 0;
    char **recs = NULL;
    while (fread(&size, sizeof(size), 1, f) == 1) {
        char *rec = malloc(size);
        if (!rec || fread(rec, 1, size, f) != size) {
            free(rec);
            break;
        }
        const struct np_event_header *h = (const void *)rec;
        if (size < NP_LAUNCH_FIXED_SIZE || h->type != NP_EV_LAUNCH || h->pid != (uint32_t)pid) {
            free(rec);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            recs = realloc(recs, cap * sizeof(*recs));
        }
        recs[n++] = rec;
    }
    fclose(f);
    *out = recs;
    *count = n;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: unwind_bench DUMP PID [SECONDS]\n");
        return 2;
    }
    pid_t pid = (pid_t)atoi(argv[2]);
    double seconds = argc > 3 ? atof(argv[3]) : 2.0;
    char **recs = NULL;
    size_t nrecs = 0;
    struct np_target *t = NULL;
    if (load_records(argv[1], pid, &recs, &nrecs) < 0 || nrecs == 0) {
        fprintf(stderr, "unwind_bench: no launch records of pid %d in %s\n", pid, argv[1]);
        return 1;
    }
    if (np_target_new(pid, &t) < 0 || np_symbolizer_new(pid, &t->in.sym) < 0 ||
        !(t->in.unwinder = np_unwinder_new(t->in.sym))) {
        fprintf(stderr, "unwind_bench: pid %d must still be running\n", pid);
        return 1;
    }
    struct np_ingest in = {.fp_fallback = true};
    struct np_stack_texts stack;
    np_str_init(&stack.folded);
    np_str_init(&stack.detailed);
    np_str_init(&stack.locations);
    uint64_t frames = 0;
    for (size_t i = 0; i < nrecs; i++) { /* warm the caches */
        np_ingest_build_stack(&in, &t->in, (const void *)recs[i], NULL, &stack);
        for (const char *p = np_str_cstr(&stack.folded); *p; p++)
            frames += *p == ';';
        frames++;
    }
    uint64_t done = 0, start = np_monotonic_ns(), end = start + (uint64_t)(seconds * 1e9);
    while (np_monotonic_ns() < end) {
        for (size_t i = 0; i < nrecs; i++)
            np_ingest_build_stack(&in, &t->in, (const void *)recs[i], NULL, &stack);
        done += nrecs;
    }
    double elapsed = (double)(np_monotonic_ns() - start) / 1e9;
    printf("records=%zu frames_per_stack=%.1f events_per_s=%.0f\n", nrecs,
           (double)frames / (double)nrecs, (double)done / elapsed);
    np_str_free(&stack.folded);
    np_str_free(&stack.detailed);
    np_str_free(&stack.locations);
    np_target_free(t);
    for (size_t i = 0; i < nrecs; i++)
        free(recs[i]);
    free(recs);
    return 0;
}
