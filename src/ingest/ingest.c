/* ingest.c - record validation and routing (see ingest.h). */
#define _GNU_SOURCE
#include "ingest/ingest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "attach/target.h"
#include "correlate/kernels.h"
#include "ingest/launch.h"
#include "lib/hashmap.h"
#include "lib/util.h"
#include "ncclprobe/events.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "writers/output.h"

void np_ingest_free(struct np_ingest *in) {
    np_str_free(&in->stack.folded);
    np_str_free(&in->stack.detailed);
    free(in->stats.per_probe);
    in->stats.per_probe = NULL;
    in->stats.per_probe_len = 0;
}

static void count_probe(struct np_ingest *in, uint32_t id) {
    if (id >= in->stats.per_probe_len) {
        size_t len = in->stats.per_probe_len ? in->stats.per_probe_len : 64;
        while (len <= id)
            len *= 2;
        uint64_t *p = realloc(in->stats.per_probe, len * sizeof(*p));
        if (!p)
            return;
        memset(p + in->stats.per_probe_len, 0, (len - in->stats.per_probe_len) * sizeof(*p));
        in->stats.per_probe = p;
        in->stats.per_probe_len = len;
    }
    in->stats.per_probe[id]++;
}

/* Appends one frame, root-first order being built leaf-last by the caller. */
static void append_frame(struct np_str *out, const char *name) {
    if (out->len)
        np_str_append(out, ";");
    np_str_append(out, name);
}

/* Writes a stack root first - the marker of an incomplete stack, then the
 * callers (return addresses), then the probed function (exact address) -
 * twice: the detailed text always names the functions inlined at a frame
 * (marked "[inlined]", where debug info exists), the folded text only with
 * --inline, so that stacks aggregate the same with or without debug info. */
static void write_stack(struct np_target *t, const uint64_t *pcs, uint32_t n,
                        const char *root_marker, const char *entry_name, bool inline_folded,
                        struct np_stack_texts *out) {
    np_str_reset(&out->folded);
    np_str_reset(&out->detailed);
    if (root_marker) {
        append_frame(&out->folded, root_marker);
        append_frame(&out->detailed, root_marker);
    }
    for (uint32_t i = n; i-- > 0;) {
        const char *name;
        const struct np_frame *f = NULL;
        char raw[32];
        if (i == 0 && entry_name) {
            name = entry_name;
        } else if (!t->sym) { /* the process was gone before its mappings could be read */
            snprintf(raw, sizeof(raw), "[0x%" PRIx64 "]", pcs[i]);
            name = raw;
        } else if (!pcs[i]) {
            continue;
        } else {
            f = np_symbolize(t->sym, pcs[i], i > 0);
            name = f->name;
        }
        append_frame(&out->folded, name);
        append_frame(&out->detailed, name);
        if (f && f->inlined && i > 0) {
            append_frame(&out->detailed, f->inlined);
            if (inline_folded)
                append_frame(&out->folded, f->inlined);
        }
    }
}

/* A PC sequence already written once: its texts, reused. Stacks repeat (a
 * serving loop launches the same few hundred call paths); this skips
 * symbolizing and joining the frames again. Bounded: past
 * STACK_CACHE_MAX entries the cache starts over. */
#define STACK_CACHE_MAX 65536

struct cached_stack { /* one allocation: the PCs, then the two texts */
    const char *marker, *entry;
    uint32_t n;
    const char *folded, *detailed;
    uint64_t pcs[];
};

static uint64_t stack_key(const uint64_t *pcs, uint32_t n, const char *marker, const char *entry) {
    return np_hash_bytes(pcs, n * sizeof(*pcs)) ^ ((uintptr_t)marker * 31) ^
           ((uintptr_t)entry * 131);
}

static void remember_stack(struct np_target *t, uint64_t key, const uint64_t *pcs, uint32_t n,
                           const char *marker, const char *entry,
                           const struct np_stack_texts *texts) {
    if (t->stack_texts.count >= STACK_CACHE_MAX)
        np_target_forget_stacks(t);
    size_t flen = texts->folded.len + 1, dlen = texts->detailed.len + 1;
    struct cached_stack *c = malloc(sizeof(*c) + n * sizeof(*pcs) + flen + dlen);
    if (!c)
        return;
    char *folded = (char *)(c->pcs + n), *detailed = folded + flen;
    memcpy(folded, np_str_cstr(&texts->folded), flen);
    memcpy(detailed, np_str_cstr(&texts->detailed), dlen);
    *c = (struct cached_stack){marker, entry, n, folded, detailed};
    memcpy(c->pcs, pcs, n * sizeof(*pcs));
    free(np_map_get_u64(&t->stack_texts, key)); /* a hash collision: the newer wins */
    if (np_map_put_u64(&t->stack_texts, key, c) < 0)
        free(c);
}

static void write_stack_cached(struct np_ingest *in, struct np_target *t, const uint64_t *pcs,
                               uint32_t n, const char *marker, const char *entry,
                               struct np_stack_texts *out) {
    if (!t->sym) { /* raw addresses: symbols may still come */
        write_stack(t, pcs, n, marker, entry, in->inline_folded, out);
        return;
    }
    uint64_t key = stack_key(pcs, n, marker, entry);
    struct cached_stack *c = np_map_get_u64(&t->stack_texts, key);
    if (c && c->n == n && c->marker == marker && c->entry == entry &&
        memcmp(c->pcs, pcs, n * sizeof(*pcs)) == 0) {
        np_str_reset(&out->folded);
        np_str_append(&out->folded, c->folded);
        np_str_reset(&out->detailed);
        np_str_append(&out->detailed, c->detailed);
        return;
    }
    write_stack(t, pcs, n, marker, entry, in->inline_folded, out);
    if (!out->folded.failed && !out->detailed.failed)
        remember_stack(t, key, pcs, n, marker, entry, out);
}

/* Frame-pointer stacks: the kernel's chain, with the caller inserted when
 * the kernel (before Linux 6.12) left it out at a function entry. */
static void fp_stack(struct np_ingest *in, struct np_target *t, const struct np_launch_event *e,
                     const char *entry_name, struct np_stack_texts *out) {
    const __u64 *ips = np_launch_ips(e);
    uint32_t n = e->n_ips > NP_MAX_STACK ? NP_MAX_STACK : e->n_ips;
    uint64_t pcs[NP_MAX_STACK + 1];
    uint32_t m = 0;

    if (n > 0)
        pcs[m++] = ips[0];
    if (e->ret_addr && (n < 2 || ips[1] != e->ret_addr))
        pcs[m++] = e->ret_addr;
    for (uint32_t i = 1; i < n; i++)
        pcs[m++] = ips[i];
    write_stack_cached(in, t, pcs, m, n == NP_MAX_STACK ? "[truncated]" : NULL, entry_name, out);
}

static void count_unwind(struct np_unwind_stats *st, const struct np_unwind_result *r) {
    if (r->end == NP_UNWIND_COMPLETE)
        st->complete++;
    else if (r->end == NP_UNWIND_TRUNCATED)
        st->truncated++;
    else
        st->unknown++;
    st->fp_fallback_frames += r->fp_fallbacks;
    if (r->end != NP_UNWIND_COMPLETE)
        return;
    int bucket = 0;
    while (bucket + 1 < NP_UNWIND_BUCKETS && r->bytes_used > (256u << bucket))
        bucket++;
    st->bytes_needed[bucket]++;
    if (r->bytes_used > st->max_bytes_needed)
        st->max_bytes_needed = r->bytes_used;
}

void np_ingest_build_stack(struct np_ingest *in, struct np_target *t,
                           const struct np_launch_event *e, const char *entry_name,
                           struct np_stack_texts *out) {
    if (!(e->flags & NP_LF_STACK_COPY)) {
        fp_stack(in, t, e, entry_name, out);
        return;
    }
    static struct np_unwind_result r; /* big; the daemon ingests on one thread */
    if (e->stack_len == 0 || !t->unwinder) {
        const uint64_t entry = np_launch_ips(e)[0];
        write_stack(t, &entry, 1, "[unknown]", entry_name, in->inline_folded, out);
        in->unwind.unknown++;
        return;
    }
    np_unwind(t->unwinder, e, in->fp_fallback, &r);
    count_unwind(&in->unwind, &r);
    const char *marker = r.end == NP_UNWIND_COMPLETE    ? NULL
                         : r.end == NP_UNWIND_TRUNCATED ? "[truncated]"
                                                        : "[unknown]";
    write_stack_cached(in, t, r.pcs, r.n, marker, entry_name, out);
}

/* The name of the kernel a launch runs, or a bracketed placeholder. */
static const char *kernel_name(struct np_target *t, const struct np_launch *l, char *buf,
                               size_t size) {
    const char *name = NULL;

    switch (l->def->layout) {
    case NP_LAYOUT_RT_LAUNCH:
    case NP_LAYOUT_RT_LAUNCH_EXC:
        /* cudaLaunchKernel also accepts a cudaKernel_t since CUDA 12 */
        name = np_kernel_names_lookup(t->kernels, l->func);
        if (!name)
            name = np_kernel_name_from_stub(t->sym, l->func);
        break;
    case NP_LAYOUT_RT_LAUNCH_HANDLE:
    case NP_LAYOUT_DRV_LAUNCH:
    case NP_LAYOUT_DRV_LAUNCH_EX:
        name = np_kernel_names_lookup(t->kernels, l->func);
        break;
    case NP_LAYOUT_GRAPH:
        snprintf(buf, size, "<graph %s>", l->def->api);
        return buf;
    case NP_LAYOUT_NCCL_LAUNCH:
        return "<nccl kernel>";
    default:
        break;
    }
    if (name)
        return name;
    snprintf(buf, size, "<unnamed 0x%" PRIx64 ">", l->func);
    return buf;
}

/* nvcc's launch stub is named __device_stub__<mangled kernel>: when the
 * handle's origin was not seen, the stack still names the kernel. */
static const char *kernel_from_stub_frame(const char *stack, char *buf, size_t size) {
    static const char marker[] = "__device_stub__";
    const char *p = strstr(stack, marker);
    if (!p)
        return NULL;
    p += sizeof(marker) - 1;
    size_t n = strcspn(p, ";");
    char mangled[512];
    if (n + 2 >= sizeof(mangled))
        return NULL;
    /* "__device_stub__Z6kernelPf" carries the mangled name minus its '_' */
    snprintf(mangled, sizeof(mangled), "%s%.*s", p[0] == 'Z' ? "_" : "", (int)n, p);
    char *demangled = np_demangle_short(mangled);
    if (!demangled)
        return NULL;
    snprintf(buf, size, "%s", demangled);
    free(demangled);
    return buf;
}

/* BPF flags a launch as nested when an earlier launch's activation still
 * looks live on the stack; that is necessary, not sufficient (a caller's
 * stack slots can outlive a call). It really is nested when it was called
 * from inside the outer probe's library: libcudart or libnccl calling the
 * driver on the user's behalf. */
static bool really_nested(struct np_ingest *in, struct np_target *t,
                          const struct np_launch_event *e) {
    const struct np_probe_site *outer = np_attacher_site(in->attacher, e->outer_probe);
    if (!(e->flags & NP_LF_NESTED) || !outer || outer->pid != t->pid ||
        outer->lib_index >= t->nlibs || !e->ret_addr || !t->sym)
        return false;
    const struct np_frame *caller = np_symbolize(t->sym, e->ret_addr, true);
    return strcmp(caller->module_path, t->libs[outer->lib_index].path) == 0;
}

static void handle_launch(struct np_ingest *in, const struct np_launch_event *e, size_t size) {
    if (size < NP_LAUNCH_FIXED_SIZE || e->n_ips > NP_MAX_STACK ||
        e->stack_len > NP_MAX_STACK_BYTES || ((e->flags & NP_LF_STACK_COPY) && e->n_ips < 1) ||
        size < NP_LAUNCH_FIXED_SIZE + (size_t)e->n_ips * 8 + e->stack_len) {
        in->stats.malformed++;
        return;
    }
    struct np_target *t = in->find_target(in->ctx, (pid_t)e->hdr.pid);
    if (t && !t->sym && in->on_new_mapping) /* first record of a process we started */
        in->on_new_mapping(in->ctx, t, e->hdr.ts_ns);
    /* Looked up only now: attaching (above) can grow the site array. */
    const struct np_probe_site *site = np_attacher_site(in->attacher, e->probe_id);
    const struct np_probe_site *called = np_attacher_site(in->attacher, e->called_as);
    if (!site || !called || !t) {
        in->stats.unknown_source++;
        return;
    }
    /* Without a symbolizer (the process exited before we could read its
     * mappings) the launch is still written, with raw addresses. */
    if (!t->sym)
        in->stats.unsymbolized++;
    in->stats.launch_events++;
    count_probe(in, e->called_as);

    struct np_launch l;
    np_launch_decode(e, called->def, &l);
    l.nested = really_nested(in, t, e);

    struct np_stack_texts *stack = &in->stack;
    /* Via a thunk, ips[0] is the thunk's target: name the function called
     * (also what names the entry when there is no symbolizer). */
    bool name_entry = (e->flags & NP_LF_VIA_THUNK) || !t->sym;
    np_ingest_build_stack(in, t, e, name_entry ? called->def->symbol : NULL, stack);

    if (l.is_nccl_op) {
        t->nccl_ops++;
        np_output_nccl_op(in->out, &l, np_str_cstr(&stack->folded), np_str_cstr(&stack->detailed));
    } else {
        char buf[600], stub_buf[600];
        const char *kernel = kernel_name(t, &l, buf, sizeof(buf));
        if (kernel == buf && l.def->layout == NP_LAYOUT_RT_LAUNCH_HANDLE) {
            const char *from_stack =
                kernel_from_stub_frame(np_str_cstr(&stack->folded), stub_buf, sizeof(stub_buf));
            if (from_stack)
                kernel = from_stack;
        }
        if (l.nested)
            t->nested++;
        else
            t->launches++;
        np_output_launch(in->out, &l, np_str_cstr(&stack->folded), np_str_cstr(&stack->detailed),
                         kernel);
    }
}

static void handle_handle(struct np_ingest *in, const struct np_handle_event *h, size_t size) {
    if (size < sizeof(*h)) {
        in->stats.malformed++;
        return;
    }
    const struct np_probe_site *site = np_attacher_site(in->attacher, h->probe_id);
    struct np_target *t = in->find_target(in->ctx, (pid_t)h->hdr.pid);
    if (!site || !t || !t->kernels) {
        in->stats.unknown_source++;
        return;
    }
    in->stats.handle_events++;
    int err = np_kernel_names_on_handle(t->kernels, t->sym, site->def, h);
    if (err)
        np_warn("pid %d: cannot record kernel handle: %s", t->pid, strerror(-err));
}

static void handle_map(struct np_ingest *in, const struct np_map_event *m, size_t size) {
    if (size < sizeof(*m)) {
        in->stats.malformed++;
        return;
    }
    in->stats.map_events++;
    struct np_target *t = in->find_target(in->ctx, (pid_t)m->hdr.pid);
    if (t && in->on_new_mapping)
        in->on_new_mapping(in->ctx, t, m->hdr.ts_ns);
}

static void dispatch(struct np_ingest *in, void *data, size_t size) {
    const struct np_event_header *h = data;

    if (size < sizeof(*h) || h->version != NP_EVENT_VERSION || h->size > size) {
        in->stats.malformed++;
        return;
    }
    switch (h->type) {
    case NP_EV_LAUNCH:
        handle_launch(in, data, h->size);
        break;
    case NP_EV_HANDLE:
        handle_handle(in, data, h->size);
        break;
    case NP_EV_MAP:
        handle_map(in, data, h->size);
        break;
    default:
        in->stats.malformed++;
        break;
    }
}

int np_ingest_record(void *ctx, void *data, size_t size) {
    struct np_ingest *in = ctx;

    if (in->raw_dump) {
        uint32_t n = (uint32_t)size;
        if (fwrite(&n, sizeof(n), 1, in->raw_dump) != 1 ||
            fwrite(data, 1, size, in->raw_dump) != size) {
            np_warn("--raw-dump: write failed, no more records dumped: %s", strerror(errno));
            fclose(in->raw_dump);
            in->raw_dump = NULL;
        }
    }
    dispatch(in, data, size);
    if (in->budget > 0 && --in->budget == 0)
        return NP_INGEST_YIELD;
    return 0;
}
