/* stack.c - a launch's stack as text (see np_ingest_build_stack in
 * ingest.h): native frames from the frame-pointer chain or from DWARF
 * unwinding, symbolized; Python frames from the BPF walker, named by their
 * code objects and merged in where the interpreter ran them.
 *
 * Merging (--python=merge, the default): each C activation of the eval loop
 * (_PyEval_EvalFrameDefault) ran one block of Python frames - one frame on
 * 3.10, several on 3.11+ (BPF marks the last frame of each block). Walking
 * the native stack from the leaf, the k-th eval-loop frame is replaced by
 * the k-th block, and the interpreter's own call machinery between them
 * (frames of the module that holds _PyRuntime) is dropped; what lies below
 * the outermost Python frame (main, thread start) stays. --python=raw keeps
 * every native frame and puts each block just above its eval-loop frame.
 * Blocks left over (native unwinding stopped early) go at the root end. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/process.h"
#include "ingest/ingest.h"
#include "lib/hashmap.h"
#include "lib/json.h"
#include "lib/util.h"
#include "ncclprobe/events.h"
#include "ncclprobe/recording.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"

/* What a stack is made of, before it becomes text. */
struct stack_input {
    const uint64_t *pcs; /* native, leaf first: pcs[0] is the probed function */
    uint32_t n;
    const char *root_marker;      /* "[truncated]" / "[unknown]" or NULL */
    const char *entry_name;       /* replaces the probed function's name, or NULL */
    const struct np_py_frame *py; /* leaf first */
    uint32_t n_py;
    bool py_truncated;
};

/* One frame of the output, leaf first. */
enum item_kind { ITEM_NATIVE, ITEM_PYTHON, ITEM_MARKER };

struct item {
    enum item_kind kind;
    uint32_t index;     /* into pcs[] or py[] */
    const char *marker; /* ITEM_MARKER */
};

#define MAX_ITEMS (NP_UNWIND_MAX_FRAMES + NP_PY_MAX_FRAMES + 4)

struct plan {
    struct item items[MAX_ITEMS];
    uint32_t n;
};

static void add_item(struct plan *p, enum item_kind kind, uint32_t index, const char *marker) {
    if (p->n < MAX_ITEMS)
        p->items[p->n++] = (struct item){kind, index, marker};
}

/* The next block of Python frames, from py index *next up to and including
 * the next frame marked NP_PYF_ENTRY. When that was the last frame of a
 * walk cut at --python-depth, the marker follows: the frames it stands for
 * are the callers of this block. */
static void add_py_block(struct plan *p, const struct stack_input *in, uint32_t *next) {
    while (*next < in->n_py) {
        uint32_t i = (*next)++;
        add_item(p, ITEM_PYTHON, i, NULL);
        if (in->py[i].flags & NP_PYF_ENTRY)
            break;
    }
    if (*next == in->n_py && in->py_truncated)
        add_item(p, ITEM_MARKER, 0, NP_FRAME_PY_TRUNCATED);
}

static bool is_eval_loop(const struct np_frame *f) {
    return strncmp(f->name, "_PyEval_EvalFrameDefault", 24) == 0;
}

static void plan_stack(struct np_ingest_proc *t, const struct stack_input *in,
                       enum np_python_mode mode, struct plan *p) {
    p->n = 0;
    bool python = in->n_py > 0 && mode != NP_PYTHON_OFF && t->sym;
    int last_eval = -1;
    if (python)
        for (uint32_t i = 1; i < in->n; i++)
            if (in->pcs[i] && is_eval_loop(np_symbolize(t->sym, in->pcs[i], true)))
                last_eval = (int)i;

    uint32_t next_py = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        if (!python || i == 0 || !in->pcs[i]) {
            add_item(p, ITEM_NATIVE, i, NULL);
            continue;
        }
        const struct np_frame *f = np_symbolize(t->sym, in->pcs[i], true);
        if (is_eval_loop(f)) {
            bool have_block = next_py < in->n_py;
            if (have_block)
                add_py_block(p, in, &next_py);
            /* merged, a block stands for its eval-loop frame, and so does the
             * marker for those of the frames beyond the depth limit */
            if (mode == NP_PYTHON_RAW || (!have_block && !in->py_truncated))
                add_item(p, ITEM_NATIVE, i, NULL);
            continue;
        }
        if (mode == NP_PYTHON_MERGE && (int)i < last_eval &&
            strcmp(f->module_path, t->process->python.path) == 0)
            continue; /* the interpreter's call machinery between Python frames */
        add_item(p, ITEM_NATIVE, i, NULL);
    }
    if (in->root_marker)
        add_item(p, ITEM_MARKER, 0, in->root_marker);
    while (python && next_py < in->n_py)
        add_py_block(p, in, &next_py);
}

static void append_frame(struct np_str *out, const char *name) {
    if (out->len)
        np_str_append(out, ";");
    np_str_append(out, name);
}

uint64_t np_stack_texts_hash(const struct np_stack_texts *texts) {
    if (texts->hashed_len == texts->detailed.len + 1)
        return texts->detailed_hash;
    return np_hash_str(np_str_cstr(&texts->detailed));
}

uint64_t np_stack_texts_serial(const struct np_stack_texts *texts) {
    return texts->hashed_len == texts->detailed.len + 1 ? texts->serial : 0;
}

/* The locations list: one JSON object per detailed frame. */
void np_ingest_append_location(struct np_str *locations) {
    np_str_append(locations, locations->len ? ",{}" : "{}");
}

static void open_location(struct np_str *out) {
    np_str_append(out, out->len ? ",{" : "{");
}

static void add_location_file(struct np_str *out, const char *file, int line, bool first) {
    np_str_append(out, first ? "\"" NP_KEY_FILE "\":" : ",\"" NP_KEY_FILE "\":");
    np_json_string(out, file);
    if (line > 0)
        np_str_appendf(out, ",\"" NP_KEY_LINE "\":%d", line);
}

/* A native frame's (or one inlined at it) location: its module, where in
 * it, and its source position. */
static void native_location(struct np_str *out, const struct np_frame *f,
                            const struct np_src_pos *src) {
    open_location(out);
    if (f && f->module_path[0]) {
        np_str_append(out, "\"" NP_KEY_MODULE "\":");
        np_json_string(out, f->module_path);
        np_str_appendf(out,
                       ",\"" NP_KEY_BUILD_ID "\":\"%s\",\"" NP_KEY_OFFSET "\":\"0x%" PRIx64 "\"",
                       f->build_id, f->module_offset);
        if (src && src->file)
            add_location_file(out, src->file, src->line, false);
    }
    np_str_append(out, "}");
}

/* A Python frame's texts, kept per process by (code object, instruction):
 * a new stack mostly repeats frames of stacks before it, and formatting a
 * frame (its line from the line table, the short file name, escaping) is
 * most of what a new Python stack costs. One allocation: the three texts
 * follow. Bounded: past PY_FRAME_CACHE_MAX entries the cache starts over;
 * forgotten with the stack texts (np_ingest_proc_forget_stacks), e.g. when
 * a code object's address holds another one. */
#define PY_FRAME_CACHE_MAX 65536

struct py_frame_text {
    uint64_t code;
    int32_t instr;
    uint32_t size; /* of the whole allocation */
    const char *folded, *detailed;
    char location[]; /* its locations entry ("{...}"), then folded, then detailed */
};

static uint64_t py_frame_key(uint64_t code, int32_t instr) {
    return (code ^ (uint64_t)(uint32_t)instr * 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
}

static void forget_py_frames(struct np_ingest_proc *p) {
    np_map_free(&p->py_frame_texts, free);
    p->py_frame_text_bytes = 0;
}

/* "qualname (file.py:LINE)": the short file name in the folded text, the
 * full path in the detailed one. NULL: its code object is unreadable (or
 * no memory). */
static struct py_frame_text *format_python(struct np_ingest_proc *t, const struct np_py_frame *f) {
    struct np_py_location loc;
    char name[1024], file[4096], text[2][5200];
    int err = t->pycode ? np_pycode_locate(t->pycode, f->code, f->instr, &loc) : -ENOENT;
    if (err || !loc.name) {
        np_debug("pid %d: Python code object 0x%" PRIx64 ": %s", t->process->pid, (uint64_t)f->code,
                 err ? strerror(-err) : "no name");
        return NULL;
    }
    np_sanitize_frame(name, sizeof(name), loc.name, false);
    const char *path = loc.filename ? loc.filename : "?";
    for (int detailed = 0; detailed < 2; detailed++) {
        np_sanitize_frame(file, sizeof(file), detailed ? path : np_py_short_filename(path), false);
        if (loc.line >= 0)
            snprintf(text[detailed], sizeof(text[0]), "%s (%s:%d)", name, file, loc.line);
        else
            snprintf(text[detailed], sizeof(text[0]), "%s (%s)", name, file);
    }
    struct np_str location = {0};
    open_location(&location);
    add_location_file(&location, path, loc.line, true);
    np_str_append(&location, "}");
    size_t llen = location.len + 1, flen = strlen(text[0]) + 1, dlen = strlen(text[1]) + 1;
    struct py_frame_text *p = location.failed ? NULL : malloc(sizeof(*p) + llen + flen + dlen);
    if (p) {
        *p = (struct py_frame_text){.code = f->code,
                                    .instr = f->instr,
                                    .size = (uint32_t)(sizeof(*p) + llen + flen + dlen)};
        memcpy(p->location, np_str_cstr(&location), llen);
        p->folded = memcpy(p->location + llen, text[0], flen);
        p->detailed = memcpy(p->location + llen + flen, text[1], dlen);
    }
    np_str_free(&location);
    return p;
}

/* The frame's texts from the process's cache, or formatted and kept; when
 * they could not be kept (no memory), *unkept: the caller frees them. */
static struct py_frame_text *python_texts(struct np_ingest_proc *t, const struct np_py_frame *f,
                                          bool *unkept) {
    *unkept = false;
    if (t->py_frame_texts.count >= PY_FRAME_CACHE_MAX)
        forget_py_frames(t);
    uint64_t key = py_frame_key(f->code, f->instr);
    struct py_frame_text *p = np_map_get_u64(&t->py_frame_texts, key);
    if (p && p->code == f->code && p->instr == f->instr)
        return p;
    struct py_frame_text *fresh = format_python(t, f);
    if (!fresh)
        return NULL;
    if (np_map_put_u64(&t->py_frame_texts, key, fresh) < 0) {
        *unkept = true;
        return fresh;
    }
    if (p) /* another frame with the same key: replaced */
        t->py_frame_text_bytes -= p->size;
    free(p);
    t->py_frame_text_bytes += fresh->size;
    return fresh;
}

static void append_python(struct np_ingest_proc *t, const struct np_py_frame *f,
                          struct np_stack_texts *out) {
    bool unkept;
    struct py_frame_text *p = python_texts(t, f, &unkept);
    if (!p) {
        char text[64];
        snprintf(text, sizeof(text), NP_FRAME_PY_CODE_PREFIX "%" PRIx64 "]", (uint64_t)f->code);
        append_frame(&out->folded, text);
        append_frame(&out->detailed, text);
        np_ingest_append_location(&out->locations);
        return;
    }
    if (out->locations.len)
        np_str_append(&out->locations, ",");
    np_str_append(&out->locations, p->location);
    append_frame(&out->folded, p->folded);
    append_frame(&out->detailed, p->detailed);
    if (unkept)
        free(p);
}

static void append_native(struct np_ingest_proc *t, const struct stack_input *in, uint32_t i,
                          bool inline_folded, struct np_stack_texts *out) {
    const struct np_frame *f = NULL;
    const char *name;
    char raw[32];
    if (i == 0 && in->entry_name) {
        name = in->entry_name;
    } else if (!t->sym) { /* the process was gone before its mappings could be read */
        snprintf(raw, sizeof(raw), "[0x%" PRIx64 "]", in->pcs[i]);
        name = raw;
    } else if (!in->pcs[i]) {
        return;
    } else {
        f = np_symbolize(t->sym, in->pcs[i], i > 0);
        name = f->name;
    }
    append_frame(&out->folded, name);
    append_frame(&out->detailed, name);
    native_location(&out->locations, f, f ? &f->src : NULL);
    if (f && f->inlined && i > 0) {
        append_frame(&out->detailed, f->inlined);
        if (inline_folded)
            append_frame(&out->folded, f->inlined);
        int k = 0; /* one location per inlined frame */
        for (const char *p = f->inlined; p; p = strchr(p + 1, ';'), k++)
            native_location(&out->locations, f, k < f->n_inlined ? &f->inlined_src[k] : NULL);
    }
}

/* Writes the stack root first, twice: the detailed text always names the
 * functions inlined at a frame (marked "[inlined]", where debug info
 * exists), the folded text only with --inline, so that stacks aggregate the
 * same with or without debug info. */
static void write_stack(struct np_ingest *ing, struct np_ingest_proc *t,
                        const struct stack_input *in, struct np_stack_texts *out) {
    static _Thread_local struct plan plan; /* big: one per thread that builds stacks */
    plan_stack(t, in, ing->python_mode, &plan);
    np_str_reset(&out->folded);
    np_str_reset(&out->detailed);
    np_str_reset(&out->locations);
    for (uint32_t k = plan.n; k-- > 0;) {
        const struct item *it = &plan.items[k];
        if (it->kind == ITEM_MARKER) {
            append_frame(&out->folded, it->marker);
            append_frame(&out->detailed, it->marker);
            np_ingest_append_location(&out->locations);
        } else if (it->kind == ITEM_PYTHON) {
            append_python(t, &in->py[it->index], out);
        } else {
            append_native(t, in, it->index, ing->inline_folded, out);
        }
    }
}

/* A stack already written once: its texts, reused. Stacks repeat (a
 * serving loop launches the same few hundred call paths); this skips
 * symbolizing and joining the frames again. The key is everything the text
 * depends on: PCs, Python frames, markers. Bounded: past STACK_CACHE_MAX
 * entries or STACK_CACHE_MAX_BYTES of texts the cache starts over (65536
 * deep Python stacks hold ~650 MiB). */
#define STACK_CACHE_MAX 65536
#define STACK_CACHE_MAX_BYTES (128ull << 20)

struct cached_stack { /* one allocation: the key, then the three texts */
    size_t key_len;
    const char *folded, *detailed, *locations;
    size_t flen, dlen, llen; /* their lengths */
    uint64_t detailed_hash;  /* np_hash_str(detailed) */
    uint64_t serial;         /* np_stack_texts.serial */
    uint8_t key[];
};

/* Serializes in into buf (sized for the largest stack); returns its length. */
static size_t stack_key(const struct stack_input *in, uint8_t *buf) {
    size_t n = 0;
    uintptr_t head[5] = {in->n, in->n_py, in->py_truncated, (uintptr_t)in->root_marker,
                         (uintptr_t)in->entry_name};
    memcpy(buf, head, sizeof(head));
    n += sizeof(head);
    memcpy(buf + n, in->pcs, in->n * sizeof(*in->pcs));
    n += in->n * sizeof(*in->pcs);
    if (in->n_py) {
        memcpy(buf + n, in->py, in->n_py * sizeof(*in->py));
        n += in->n_py * sizeof(*in->py);
    }
    return n;
}

/* The hash of a stack key: four independent lanes of 8 bytes, so that the
 * ~1 KiB key of a deep Python stack is not one long chain of multiplies
 * (np_hash_bytes's) at every launch. Only for the cache's own map: the key
 * is compared whole on a hit. */
static uint64_t hash_key(const uint8_t *key, size_t len) {
    const uint64_t m1 = 0x87c37b91114253d5ull, m2 = 0x4cf5ad432745937full;
    uint64_t h0 = 0x9e3779b97f4a7c15ull ^ len, h1 = 0xc2b2ae3d27d4eb4full,
             h2 = 0x165667b19e3779f9ull, h3 = 0x27d4eb2f165667c5ull;
#define LANE(h, at)                                                                                \
    do {                                                                                           \
        uint64_t w;                                                                                \
        memcpy(&w, key + (at), 8);                                                                 \
        w *= m1;                                                                                   \
        h = (h ^ ((w << 31) | (w >> 33))) * m2;                                                    \
    } while (0)
    size_t i = 0;
    for (; i + 32 <= len; i += 32) {
        LANE(h0, i);
        LANE(h1, i + 8);
        LANE(h2, i + 16);
        LANE(h3, i + 24);
    }
#undef LANE
    uint64_t h[4] = {h0, h1, h2, h3}, tail[4] = {0};
    memcpy(tail, key + i, len - i);
    uint64_t out = 0;
    for (int j = 0; j < 4; j++) {
        uint64_t x = (h[j] ^ tail[j] * m1) * m2;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 29;
        out = (out ^ x) * 0xc4ceb9fe1a85ec53ull;
    }
    return out ^ (out >> 32);
}

#define MAX_KEY_BYTES                                                                              \
    (5 * sizeof(uintptr_t) + NP_UNWIND_MAX_FRAMES * 8 +                                            \
     NP_PY_MAX_FRAMES * sizeof(struct np_py_frame))

static void forget_stack_texts(struct np_ingest_proc *p) {
    p->stack_text_bytes = 0;
    np_map_free(&p->stack_texts, free);
}

void np_ingest_proc_forget_stacks(struct np_ingest_proc *p) {
    forget_stack_texts(p);
    forget_py_frames(p);
}

/* Remembers texts under key; returns the entry's serial number (0: not
 * remembered). Numbers count up for every process: never reused. Pinned
 * (texts handed out earlier may still be read: worker threads), no entry is
 * freed: a full cache or a hash collision remembers nothing. */
static uint64_t remember_stack(struct np_ingest_proc *t, uint64_t hash, const uint8_t *key,
                               size_t key_len, const struct np_stack_texts *texts, bool pinned) {
    static uint64_t last_serial;
    if (t->stack_texts.count >= STACK_CACHE_MAX || t->stack_text_bytes >= STACK_CACHE_MAX_BYTES) {
        if (pinned)
            return 0;
        forget_stack_texts(t); /* its Python frames' texts stay: new stacks repeat them */
    }
    struct cached_stack *old = np_map_get_u64(&t->stack_texts, hash);
    if (old && pinned)
        return 0;
    size_t flen = texts->folded.len + 1, dlen = texts->detailed.len + 1,
           llen = texts->locations.len + 1;
    struct cached_stack *c = malloc(sizeof(*c) + key_len + flen + dlen + llen);
    if (!c)
        return 0;
    char *folded = (char *)c->key + key_len, *detailed = folded + flen,
         *locations = detailed + dlen;
    memcpy(folded, np_str_cstr(&texts->folded), flen);
    memcpy(detailed, np_str_cstr(&texts->detailed), dlen);
    memcpy(locations, np_str_cstr(&texts->locations), llen);
    c->key_len = key_len;
    c->flen = flen - 1;
    c->dlen = dlen - 1;
    c->llen = llen - 1;
    c->detailed_hash = texts->detailed_hash;
    c->serial = __atomic_add_fetch(&last_serial, 1, __ATOMIC_RELAXED);
    c->folded = folded;
    c->detailed = detailed;
    c->locations = locations;
    memcpy(c->key, key, key_len);
    if (old) /* a hash collision: the newer wins */
        t->stack_text_bytes -= sizeof(*old) + old->key_len + old->flen + old->dlen + old->llen + 3;
    free(old);
    if (np_map_put_u64(&t->stack_texts, hash, c) < 0) {
        free(c);
        return 0;
    }
    t->stack_text_bytes += sizeof(*c) + key_len + flen + dlen + llen;
    return c->serial;
}

static void write_stack_cached(struct np_ingest *ing, struct np_ingest_proc *t,
                               const struct stack_input *in, bool pinned,
                               struct np_stack_texts *out) {
    static _Thread_local uint8_t key[MAX_KEY_BYTES];
    if (!t->sym) { /* raw addresses: symbols may still come */
        write_stack(ing, t, in, out);
        return;
    }
    size_t key_len = stack_key(in, key);
    uint64_t hash = hash_key(key, key_len);
    struct cached_stack *c = np_map_get_u64(&t->stack_texts, hash);
    if (c && c->key_len == key_len && memcmp(c->key, key, key_len) == 0) {
        /* read in place, not copied: the launch is handed on and done with
         * before an entry can be freed (a later record unpinned, a library
         * load) */
        np_str_borrow(&out->folded, c->folded, c->flen);
        np_str_borrow(&out->detailed, c->detailed, c->dlen);
        np_str_borrow(&out->locations, c->locations, c->llen);
        out->detailed_hash = c->detailed_hash;
        out->hashed_len = c->dlen + 1;
        out->serial = c->serial;
        return;
    }
    write_stack(ing, t, in, out);
    if (!out->folded.failed && !out->detailed.failed && !out->locations.failed) {
        out->detailed_hash = np_hash_bytes(out->detailed.buf, out->detailed.len);
        out->hashed_len = out->detailed.len + 1;
        out->serial = remember_stack(t, hash, key, key_len, out, pinned);
    }
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

/* The most user frames bpf_get_stack returns: kernel.perf_event_max_stack,
 * which a host may have lowered below our own cap. A stack of that many
 * frames was cut. */
static uint32_t fp_frame_limit(void) {
    static uint32_t limit; /* worked out once; threads racing to it write the same */
    uint32_t l = __atomic_load_n(&limit, __ATOMIC_RELAXED);
    if (!l) {
        long v = np_perf_event_max_stack();
        l = v > 0 && v < NP_MAX_STACK ? (uint32_t)v : NP_MAX_STACK;
        __atomic_store_n(&limit, l, __ATOMIC_RELAXED);
    }
    return l;
}

/* Unwinds e's stack copy into *r, counting how it ended and teaching the
 * stack-size hints what it needed (under learn_lock: worker threads unwind
 * at once). */
static void unwind_counted(struct np_ingest *ing, struct np_ingest_proc *t,
                           const struct np_launch_event *e, struct np_unwind_result *r) {
    np_unwind(t->unwinder, e, ing->fp_fallback, r);
    pthread_mutex_lock(&ing->learn_lock);
    count_unwind(&ing->unwind, r);
    if (e->flags & NP_LF_STACK_HINTED) {
        ing->unwind.hinted++;
        ing->unwind.hint_short += r->end != NP_UNWIND_COMPLETE;
    }
    np_stack_hints_learn(&ing->hints, e, r);
    pthread_mutex_unlock(&ing->learn_lock);
}

static void count_unknown(struct np_ingest *ing) {
    pthread_mutex_lock(&ing->learn_lock);
    ing->unwind.unknown++;
    pthread_mutex_unlock(&ing->learn_lock);
}

/* ---- The agent's fast path: a launch taken at the CUPTI marker ----------
 *
 * Its stack was copied at ncclprobe_cupti_marker, inside CUPTI's callback:
 * leaf first, the marker, our callback, CUPTI's and the CUDA libraries'
 * frames, then the launch API's caller. What the int3 probe records is the
 * API function's entry, then that caller on: so the frames of our library,
 * of a libcupti and of the CUDA libraries (and of the launch function's
 * own library) are dropped from the leaf, and the function's entry put in
 * their place. */
static _Thread_local struct {        /* one per thread that builds stacks */
    const struct np_launch_event *e; /* the record these pcs are of */
    uint64_t pcs[NP_UNWIND_MAX_FRAMES + 1];
    uint32_t n;
    enum np_unwind_end end;
} at_marker;

static bool callback_frame(const char *module_path, const char *launch_lib) {
    const char *base = strrchr(module_path, '/');
    base = base ? base + 1 : module_path;
    return strstr(base, "ncclprobe_cupti") || strncmp(base, "libcupti", 8) == 0 ||
           strncmp(base, "libcuda", 7) == 0 || (launch_lib && strcmp(module_path, launch_lib) == 0);
}

uint64_t np_ingest_unwind_at_marker(struct np_ingest *ing, struct np_ingest_proc *t,
                                    const struct np_launch_event *e, uint64_t entry_pc,
                                    const char *launch_lib) {
    static _Thread_local struct np_unwind_result r;
    at_marker.e = e;
    at_marker.pcs[0] = entry_pc;
    at_marker.n = 1;
    at_marker.end = NP_UNWIND_UNKNOWN;
    if (!(e->flags & NP_LF_STACK_COPY) || e->stack_len == 0 || !t->unwinder || !t->sym) {
        count_unknown(ing);
        return 0;
    }
    unwind_counted(ing, t, e, &r);
    uint32_t cut = 0;
    while (cut < r.n &&
           callback_frame(np_symbolize(t->sym, r.pcs[cut], cut > 0)->module_path, launch_lib))
        cut++;
    if (cut == 0) /* not even the marker's frame: the record is not what it says */
        return 0;
    for (uint32_t i = cut; i < r.n; i++)
        at_marker.pcs[at_marker.n++] = r.pcs[i];
    at_marker.end = r.end;
    return at_marker.n > 1 ? at_marker.pcs[1] : 0;
}

void np_ingest_build_stack(struct np_ingest *ing, struct np_ingest_proc *t,
                           const struct np_launch_event *e, const char *entry_name,
                           bool cache_pinned, struct np_stack_texts *out) {
    struct stack_input in = {.entry_name = entry_name};
    out->hashed_len = 0; /* not known until a text is written */
    out->serial = 0;
    if (e->flags & NP_LF_PY) {
        in.py = np_launch_py(e);
        in.n_py = e->n_py;
        in.py_truncated = (e->flags & NP_LF_PY_TRUNCATED) != 0;
    }
    const uint64_t *ips = (const uint64_t *)np_launch_ips(e);

    if ((e->flags & NP_LF_AT_MARKER) && at_marker.e == e) { /* unwound and cut already */
        in.pcs = at_marker.pcs;
        in.n = at_marker.n;
        if (!at_marker.pcs[0] && !entry_name)
            in.entry_name = "[launch]";
        in.root_marker = at_marker.end == NP_UNWIND_COMPLETE    ? NULL
                         : at_marker.end == NP_UNWIND_TRUNCATED ? NP_FRAME_TRUNCATED
                                                                : NP_FRAME_UNKNOWN;
        at_marker.e = NULL;
        write_stack_cached(ing, t, &in, cache_pinned, out);
        return;
    }

    if (!(e->flags & NP_LF_STACK_COPY)) {
        /* frame pointers: the kernel's chain, with the caller inserted when
         * the kernel (before Linux 6.12) left it out at a function entry */
        static _Thread_local uint64_t pcs[NP_MAX_STACK + 1];
        uint32_t n = e->n_ips > NP_MAX_STACK ? NP_MAX_STACK : e->n_ips, m = 0;
        if (n > 0)
            pcs[m++] = ips[0];
        if (e->ret_addr && (n < 2 || ips[1] != e->ret_addr))
            pcs[m++] = e->ret_addr;
        for (uint32_t i = 1; i < n; i++)
            pcs[m++] = ips[i];
        in.pcs = pcs;
        in.n = m;
        in.root_marker = n >= fp_frame_limit() ? NP_FRAME_TRUNCATED : NULL;
        write_stack_cached(ing, t, &in, cache_pinned, out);
        return;
    }
    static _Thread_local struct np_unwind_result r; /* big: one per thread */
    if (e->stack_len == 0 || !t->unwinder) {
        in.pcs = ips;
        in.n = 1;
        in.root_marker = NP_FRAME_UNKNOWN;
        write_stack(ing, t, &in, out);
        count_unknown(ing);
        return;
    }
    unwind_counted(ing, t, e, &r);
    in.pcs = r.pcs;
    in.n = r.n;
    in.root_marker = r.end == NP_UNWIND_COMPLETE    ? NULL
                     : r.end == NP_UNWIND_TRUNCATED ? NP_FRAME_TRUNCATED
                                                    : NP_FRAME_UNKNOWN;
    write_stack_cached(ing, t, &in, cache_pinned, out);
}
