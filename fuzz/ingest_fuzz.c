/* ingest_fuzz.c - ring-buffer records (include/ncclprobe/events.h) as the
 * reader decodes them: np_ingest_record (src/ingest/ingest.c), handled at
 * once or queued in the backlog and worked off by np_ingest_work.
 *
 * The records are this process's own: the attacher has no BPF, only its
 * site table (one site per probe definition of attach/probes.c, all serving
 * our pid), and the one traced process is the harness, with a real
 * symbolizer and unwinder (libdw over our own mappings) and a CPython
 * code-object reader. So a launch's stack is unwound with the CFI of real
 * code: a stack copy of the harness itself, taken once (the template),
 * below a function named like CPython's eval loop, is what a launch record
 * carries when the input asks - XORed with the input's bytes, registers too.
 * Python frames name code objects at IMAGE_BASE + small offsets (a few
 * hostile ones built below) or anywhere else (EFAULT).
 *
 * Input: data[0..2] the session's switches (MODE_*, the backlog budget,
 * MORE_*), then records, each: u8 fix, u16 length, its bytes. fix & 3 == 0
 * feeds the bytes raw; otherwise the header is made plausible (version,
 * our pid, a type, size consistent with the counts, probe ids modulo the
 * site count + 1, small tids and times so that plans meet their launches)
 * and each record kind is built from the bytes (FIX_*): every record is
 * copied into a heap buffer of exactly its size, so ASan sees any read
 * outside it (handled at once; the backlog keeps its own copy).
 *
 * Contract: no crash or sanitizer report; every record is counted exactly
 * once:
 *   records handled = malformed + unknown_source + not_recorded
 *       + launch_events + fast_doubles + handle_events + map_events
 *       + graph_events + nccl_plan_events
 *       + (marker_events - fast_doubles - fast_launches)
 * (a launch taken at the CUPTI marker also counts as its marker; a fast
 * double is only that marker), where records handled is the records fed,
 * or with the backlog those queued (fed = queued + dropped); the ops are
 * called as often as counted, per_probe sums to launch_events, plans
 * add up (decoded = claimed by a launch + unclaimed, when all is
 * recorded); and each stack the launch op gets is valid UTF-8 without
 * newlines, one location per detailed frame, with no more frames than the
 * record carried (native and Python) plus the synthetic markers.
 * INGEST_FUZZ_PRINT=1 prints each stack (to see what a seed reaches). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attach/attach.h"
#include "attach/process.h"
#include "attach/python.h"
#include "fuzz.h"
#include "ingest/ingest.h"
#include "ingest/launch.h"
#include "ingest/nccl_plan.h"
#include "ncclprobe/events.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"

#define MAX_STREAM (1u << 20)
#define IMAGE_BASE 0x5b0000000000ull
#define IMAGE_SIZE (1u << 20)
#define IMAGE_FUZZ 0x10000u    /* the input's own image bytes go here (FIX_IMAGE) */
#define RESET_EVERY (1u << 14) /* inputs between fresh symbolizers: their caches grow */
#define HEAD 3

/* data[0]: the session's switches */
enum {
    MODE_BACKLOG = 1, /* records queue (budget data[1] << 14 | 1) and np_ingest_work handles them */
    MODE_FP_FALLBACK = 2,
    MODE_INLINE = 4,
    MODE_PYTHON_SHIFT = 3, /* 2 bits: enum np_python_mode (3: merge) */
    MODE_BUDGET = 0x20,    /* in->budget: np_ingest_record yields */
    MODE_RAW_DUMP = 0x40,
    MODE_NO_SYM = 0x80, /* the process was gone before its mappings were read */
};
/* data[2]: more of them */
enum {
    MORE_NCCL_SHIFT = 0, /* 2 bits: NCCL sites' layout: full, stripped, old, none */
    MORE_NOT_RECORDING = 4,
    MORE_CAPTURED = 8,
    MORE_HINTS = 0x10, /* stack hints learned (into a map fd that is not one) */
};
/* A record's fix byte. */
enum {
    FIX_PATCH = 3,
    FIX_TEMPLATE = 4,   /* launch: the harness's own stack, XORed with the bytes */
    FIX_RAW_SIZE = 8,   /* keep the input's hdr.size */
    FIX_FOREIGN = 0x10, /* keep the input's pid */
    FIX_WORK = 0x20,    /* backlog: np_ingest_work after this record (0x40: for 1 ns) */
    FIX_IMAGE = 0x40,   /* with FIX_PATCH clear: the bytes go to the code-object image */
    FIX_RAW_IDS = 0x80, /* keep the input's probe ids */
};

static struct np_attacher attacher;
static struct np_process proc;
static struct np_ingest_proc target, target_nosym;
static struct np_python_layout py_layout;
static struct np_nccl_layout nccl_full, nccl_stripped, nccl_old;
static uint8_t *image;
static FILE *dev_null;
static int hints_fd = -1;
static volatile __u32 hints_gen;

/* The template: the harness's stack as BPF would copy it at the entry of
 * take_template (sp at its return address), with its registers. */
static struct {
    uint64_t pc, sp, bp, top;
    uint32_t len;
    uint8_t bytes[NP_MAX_STACK_BYTES];
} tmpl;

static uint64_t anchors[8]; /* code addresses small words are turned into */

/* What the ops saw, per input. */
static struct {
    uint8_t more;
    bool nosym;
    unsigned records;
    uint64_t launch, handle, marker, graph, new_mapping, nccl_launch, nccl_with_plan, nccl_ops,
        nccl_internal;
} seen;

/* ---- the template stack ------------------------------------------------- */

/* Our own stack holds ASan's poisoned redzones: read byte by byte, unchecked. */
__attribute__((no_sanitize("address"))) static void copy_stack(uint8_t *dst, uint64_t src,
                                                               size_t n) {
    const volatile uint8_t *s = (const volatile uint8_t *)(uintptr_t)src;
    for (size_t i = 0; i < n; i++)
        dst[i] = s[i];
}

__attribute__((noinline)) static void take_template(void) {
    uint64_t *fp = __builtin_frame_address(0);
    tmpl.pc = (uint64_t)(uintptr_t)&take_template;
    tmpl.sp = (uint64_t)(uintptr_t)(fp + 1); /* at the entry: sp points at the return address */
    tmpl.bp = fp[0];
    pthread_attr_t attr;
    void *addr;
    size_t size;
    FUZZ_CHECK(pthread_getattr_np(pthread_self(), &attr) == 0);
    FUZZ_CHECK(pthread_attr_getstack(&attr, &addr, &size) == 0);
    pthread_attr_destroy(&attr);
    tmpl.top = (uint64_t)(uintptr_t)addr + size;
    FUZZ_CHECK(tmpl.top > tmpl.sp);
    uint64_t avail = tmpl.top - tmpl.sp;
    tmpl.len = avail < NP_MAX_STACK_BYTES ? (uint32_t)avail : NP_MAX_STACK_BYTES;
    copy_stack(tmpl.bytes, tmpl.sp, tmpl.len);
}

/* A caller named like CPython's eval loop: Python frames merge here. */
__attribute__((noinline)) static void _PyEval_EvalFrameDefault_fuzz(void) {
    take_template();
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays */
}

/* ---- the code-object image (pycode_fuzz's 3.12-shaped layout) ------------ */

static void put_u64(size_t at, uint64_t v) {
    memcpy(image + at, &v, sizeof(v));
}

/* A compact str object at off: kind 1 (ASCII when ascii), 2 or 4. */
static void put_str(size_t off, unsigned kind, bool ascii, const uint32_t *cps, size_t n) {
    put_u64(off + 0x10, n);
    uint32_t state = kind << 2 | 1u << 5 | (ascii ? 1u << 6 : 0);
    memcpy(image + off + 0x20, &state, sizeof(state));
    uint8_t *data = image + off + (ascii ? 0x28 : 0x38);
    for (size_t i = 0; i < n; i++)
        memcpy(data + i * kind, &cps[i], kind); /* little-endian: the low bytes */
}

/* A code object at off named by the str at name_off, in the file file_off. */
static void put_code(size_t off, size_t name_off, size_t file_off, size_t table_off) {
    put_u64(off + 8, 0x1234); /* ob_type */
    int32_t first = 10;
    memcpy(image + off + 0x44, &first, sizeof(first));
    put_u64(off + 0x70, IMAGE_BASE + file_off);
    put_u64(off + 0x78, IMAGE_BASE + name_off);
    put_u64(off + 0x80, IMAGE_BASE + name_off);
    put_u64(off + 0x88, IMAGE_BASE + table_off);
}

/* Code objects at 0 (plain), 0x1000 (a long non-ASCII name and file: cut
 * to fit a frame) and 0x8000 (control characters, ';' and a newline). */
static void build_image(void) {
    void *p = mmap((void *)IMAGE_BASE, IMAGE_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    FUZZ_CHECK(p == (void *)IMAGE_BASE);
    image = p;
    static uint32_t cps[4096];
    const char *file = "/site-packages/torch/nn/x.py", *name = "Model.forward";
    for (size_t i = 0; file[i]; i++)
        cps[i] = (uint8_t)file[i];
    put_str(0x100, 1, true, cps, strlen(file));
    for (size_t i = 0; name[i]; i++)
        cps[i] = (uint8_t)name[i];
    put_str(0x180, 1, true, cps, strlen(name));
    static const uint8_t table[] = {0x80 | (13 << 3) | 3, 0x02, 0x80 | (13 << 3) | 3, 0x04};
    put_u64(0x200 + 0x10, sizeof(table));
    memcpy(image + 0x200 + 0x20, table, sizeof(table));
    put_code(0, 0x180, 0x100, 0x200);

    for (size_t i = 0; i < 1000; i++) /* 'é' x 1000: 2000 bytes of UTF-8 */
        cps[i] = 0xe9;
    put_str(0x1100, 2, false, cps, 1000);
    for (size_t i = 0; i < 4096; i++) /* U+1F600 x 4096 */
        cps[i] = 0x1f600;
    put_str(0x2000, 4, false, cps, 4096);
    put_code(0x1000, 0x1100, 0x2000, 0x200);

    const char *nasty = "a;b\nc\td\x7f"
                        "e";
    for (size_t i = 0; nasty[i]; i++)
        cps[i] = (uint8_t)nasty[i];
    put_str(0x8100, 1, true, cps, strlen(nasty));
    put_code(0x8000, 0x8100, 0x8100, 0x200);
}

/* ---- NCCL layouts: every list (2.29-like), stripped, and before 2.27 ----- */

static void field(struct np_nccl_layout *l, enum np_nccl_field f, int64_t off, uint32_t size) {
    l->f[f] = (struct np_field){.offset = off, .size = size};
}

static void build_nccl_layouts(void) {
    struct np_nccl_layout *l = &nccl_full;
    memset(l, 0, sizeof(*l));
    for (int i = 0; i < NPF_COUNT; i++)
        l->f[i].offset = -1;
    np_nccl_names_clear(&l->names);
    np_nccl_names_fill_builtin(&l->names);
    snprintf(l->version, sizeof(l->version), "2.29.7");
    l->version_code = 22907;
    l->has_symtab = true;
    field(l, NPF_COMM_HASH, 0x1044c8, 8);
    field(l, NPF_RANK, 0x1044d0, 4);
    field(l, NPF_NRANKS, 0x1044d4, 4);
    field(l, NPF_CUDA_DEV, 0x1044d8, 4);
    field(l, NPF_COMM_STREAMS, 0x1054a0, 8);
    field(l, NPF_STREAM, 8, 8);
    field(l, NPF_IS_SYM, 34, 1);
    field(l, NPF_IS_CE, 35, 1);
    field(l, NPF_IS_RMA, 36, 1);
    field(l, NPF_KERNEL_FN, 40, 8);
    field(l, NPF_CE_ARGS, 48, 8);
    field(l, NPF_RMA_ARGS, 48, 8);
    field(l, NPF_CHANNEL_MASK, 64, 8);
    field(l, NPF_THREADS, 76, 4);
    static const int64_t heads[NP_NCCL_LISTS] = {152, 136, 168, 184, 200};
    for (int i = 0; i < NP_NCCL_LISTS; i++)
        field(l, NPF_COLL_HEAD + i, heads[i], 8);
    field(l, NPF_COLL_NEXT, 0, 8);
    field(l, NPF_COLL_FUNC, 8, 4);
    field(l, NPF_COLL_COUNT, 32, 8);
    field(l, NPF_COLL_ROOT, 40, 4);
    field(l, NPF_COLL_DATATYPE, 44, 4);
    field(l, NPF_COLL_OP, 48, 4);
    field(l, NPF_COLL_ALGO, 98, 1);
    field(l, NPF_COLL_PROTO, 99, 1);
    field(l, NPF_COLL_NCHANNELS, 232, 1);
    field(l, NPF_P2P_NEXT, 0, 8);
    field(l, NPF_P2P_FUNC, 8, 4);
    field(l, NPF_P2P_COUNT, 24, 8);
    field(l, NPF_P2P_DATATYPE, 32, 4);
    field(l, NPF_P2P_PEER, 36, 4);
    field(l, NPF_P2P_NCHANNELS, 80, 1);
    field(l, NPF_BCAST_NEXT, 0, 8);
    field(l, NPF_BCAST_FUNC, 8, 4);
    field(l, NPF_BCAST_COUNT, 16, 8);
    field(l, NPF_BCAST_DATATYPE, 24, 4);
    field(l, NPF_BCAST_ROOT, 28, 4);
    field(l, NPF_BCAST_ALGO, 32, 1);
    field(l, NPF_BCAST_PROTO, 33, 1);
    field(l, NPF_BCAST_NCHANNELS, 34, 1);
    field(l, NPF_RMA_NEXT, 0, 8);
    field(l, NPF_RMA_FUNC, 8, 4);
    field(l, NPF_RMA_COUNT, 16, 8);
    field(l, NPF_RMA_DATATYPE, 24, 4);
    field(l, NPF_RMA_BYTES, 32, 8);
    field(l, NPF_RMA_PEER, 40, 4);
    field(l, NPF_RMA_NCHANNELS, 44, 1);
    field(l, NPF_CE_FUNC, 0, 4);
    field(l, NPF_CE_ROOT, 4, 4);
    field(l, NPF_CE_NELTS, 8, 8);
    field(l, NPF_CE_ELTSIZE, 16, 8);
    field(l, NPF_CE_DATATYPE, 24, 4);
    field(l, NPF_RMA_ARGS_FUNC, 0, 4);
    l->comm_ok = l->plan_ok = true;
    struct np_nccl_cfg *c = &l->cfg; /* what build_cfg makes of these fields */
    c->comm_arg = 0, c->plan_arg = 1;
    c->comm_lo = 0x1044c8, c->comm_len = 20;
    c->comm_streams = 0x1054a0, c->stream_off = 8;
    c->plan_lo = 34, c->plan_len = 80 - 34;
    c->plan_aux = 48, c->aux_len = 28;
    static const uint32_t lens[NP_NCCL_LISTS] = {233 - 8, 81 - 8, 35 - 8, 45 - 8, 45 - 8};
    for (int i = 0; i < NP_NCCL_LISTS; i++)
        c->lists[i] =
            (struct np_nccl_list_cfg){.head = (uint32_t)heads[i], .lo = 8, .len = lens[i]};

    nccl_old = nccl_full; /* before 2.27: no per-task channel count */
    nccl_old.f[NPF_COLL_NCHANNELS].offset = nccl_old.f[NPF_P2P_NCHANNELS].offset = -1;
    nccl_old.nchannels_from_plan = true;
    snprintf(nccl_old.missing, sizeof(nccl_old.missing), "no per-operation channel count");

    l = &nccl_stripped;
    memset(l, 0, sizeof(*l));
    for (int i = 0; i < NPF_COUNT; i++)
        l->f[i].offset = -1;
    np_nccl_names_clear(&l->names);
    np_nccl_names_fill_builtin(&l->names);
    l->status = -ENODATA;
    snprintf(l->missing, sizeof(l->missing), "no debug info (stripped library)");
    l->cfg.comm_streams = l->cfg.plan_aux = NP_NCCL_NO_FIELD;
    for (int i = 0; i < NP_NCCL_LISTS; i++)
        l->cfg.lists[i].head = NP_NCCL_NO_FIELD;
}

/* ---- set up once ----------------------------------------------------------- */

static void new_readers(void) {
    FUZZ_CHECK(np_symbolizer_new(getpid(), &target.sym) == 0);
    FUZZ_CHECK((target.unwinder = np_unwinder_new(target.sym)) != NULL);
}

static void free_readers(void) {
    np_ingest_proc_forget_stacks(&target);
    np_ingest_proc_forget_stacks(&target_nosym);
    np_unwinder_free(target.unwinder);
    np_symbolizer_free(target.sym);
}

static void add_library(const char *path) {
    char real[PATH_MAX];
    FUZZ_CHECK(realpath(path, real) && np_process_add_library(&proc, real));
}

static void setup(void) {
    static bool done;
    if (done)
        return;
    done = true;
    _PyEval_EvalFrameDefault_fuzz();
    build_image();
    build_nccl_layouts();
    dev_null = fopen("/dev/null", "we");
    hints_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    FUZZ_CHECK(dev_null && hints_fd >= 0);

    /* the process: the harness (libs[0], also "the interpreter") and libc */
    np_process_init(&proc, getpid());
    add_library("/proc/self/exe");
    Dl_info info;
    FUZZ_CHECK(dladdr((void *)&getpid, &info) && info.dli_fname);
    add_library(info.dli_fname);
    proc.python.found = true;
    fuzz_python_layout(&py_layout);
    snprintf(proc.python.path, sizeof(proc.python.path), "%s", proc.libs[0].path);
    proc.python.layout = py_layout;
    target.process = target_nosym.process = &proc;
    new_readers();

    /* the attacher: a site per probe definition, no BPF; lib_index 0, 1
     * and one past the process's libraries */
    size_t ndefs;
    const struct np_probe_def *defs = np_probe_defs(&ndefs);
    attacher.sites = calloc(ndefs, sizeof(*attacher.sites));
    FUZZ_CHECK(attacher.sites);
    attacher.nsites = attacher.cap = ndefs;
    for (size_t i = 0; i < ndefs; i++) {
        struct np_probe_site *s = &attacher.sites[i];
        s->id = (uint32_t)i + 1;
        s->pid = getpid();
        s->def = &defs[i];
        s->lib_index = i % 3;
        s->offset = 0x1000 + i * 16;
        s->fast = np_fast_def_by_symbol(defs[i].symbol) != NULL;
        s->addr = tmpl.pc;
    }
    anchors[0] = (uint64_t)(uintptr_t)&np_ingest_record;
    anchors[1] = (uint64_t)(uintptr_t)&np_unwind;
    anchors[2] = (uint64_t)(uintptr_t)&np_symbolize;
    anchors[3] = (uint64_t)(uintptr_t)&LLVMFuzzerTestOneInput;
    anchors[4] = (uint64_t)(uintptr_t)&_PyEval_EvalFrameDefault_fuzz;
    anchors[5] = tmpl.pc;
    anchors[6] = (uint64_t)(uintptr_t)&getpid;
    anchors[7] = (uint64_t)(uintptr_t)&pthread_self;
}

/* ---- the ops ----------------------------------------------------------------- */

static volatile uint8_t sink;

static void touch(const void *p, size_t len) {
    const uint8_t *b = p;
    uint8_t x = 0;
    for (size_t i = 0; i < len; i++)
        x ^= b[i];
    sink = x;
}

static bool valid_utf8(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : 3;
        if (*p >= 0x80 && (*p < 0xc2 || *p > 0xf4))
            return false;
        if (end - p <= n)
            return false;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return false;
    }
    return true;
}

/* A text: NUL-terminated at len, valid UTF-8, no newline; its frames. */
static size_t check_text(const struct np_str *s) {
    const char *t = np_str_cstr(s);
    FUZZ_CHECK(strlen(t) == s->len);
    FUZZ_CHECK(valid_utf8(t, s->len));
    FUZZ_CHECK(!memchr(t, '\n', s->len));
    size_t frames = s->len ? 1 : 0;
    for (size_t i = 0; i < s->len; i++)
        frames += t[i] == ';';
    return frames;
}

/* The top-level JSON objects of a locations list. */
static size_t count_locations(const struct np_str *s) {
    const char *t = np_str_cstr(s);
    size_t n = 0;
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < s->len; i++) {
        char c = t[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{') {
            n += depth++ == 0;
        } else if (c == '}') {
            FUZZ_CHECK(--depth >= 0);
        } else {
            FUZZ_CHECK(depth > 0 || c == ',');
        }
    }
    FUZZ_CHECK(depth == 0 && !in_string);
    return n;
}

static struct np_ingest_proc *find(struct np_ingest *in, pid_t pid) {
    (void)in;
    if (pid != getpid())
        return NULL;
    return seen.nosym ? &target_nosym : &target;
}

static bool recording(struct np_ingest *in, struct np_ingest_proc *p) {
    (void)in, (void)p;
    return !(seen.more & MORE_NOT_RECORDING) || seen.records % 3 != 0;
}

static void new_mapping(struct np_ingest *in, struct np_ingest_proc *p, uint64_t ts_ns) {
    (void)in, (void)ts_ns;
    FUZZ_CHECK(p == &target || p == &target_nosym);
    seen.new_mapping++; /* nothing to attach: no BPF */
}

static void on_launch(struct np_ingest *in, struct np_ingest_proc *p, const struct np_launch *l,
                      struct np_stack_texts *stack) {
    FUZZ_CHECK(p == &target || p == &target_nosym);
    FUZZ_CHECK(l->ev && l->def);
    touch(l->ev, NP_LAUNCH_FIXED_SIZE);
    seen.launch++;
    if (l->def->layout == NP_LAYOUT_NCCL_LAUNCH) {
        seen.nccl_launch++;
        seen.nccl_with_plan += l->nccl_plan != NULL;
    }
    if (l->is_nccl_op) {
        seen.nccl_ops++;
        seen.nccl_internal += l->nccl_internal;
    }
    if (l->nccl_plan) {
        const struct np_nccl_plan *plan = l->nccl_plan;
        FUZZ_CHECK(plan->nops <= NP_NCCL_MAX_TASKS && plan->names);
        char types[64];
        np_nccl_plan_op_types(plan, NULL, types, sizeof(types));
        FUZZ_CHECK(strlen(types) < sizeof(types));
    }
    if (l->nccl_missing)
        FUZZ_CHECK(strlen(l->nccl_missing) < 1024);
    if (getenv("INGEST_FUZZ_PRINT")) /* what a seed reaches, when writing one */
        fprintf(stderr, "%s: %s\n", l->def->symbol, np_str_cstr(&stack->detailed));
    size_t folded = check_text(&stack->folded);
    size_t detailed = check_text(&stack->detailed);
    check_text(&stack->locations);
    FUZZ_CHECK(count_locations(&stack->locations) == detailed);
    /* the frames the record carried: native ones (unwound from a stack
     * copy, or the frame-pointer chain with the caller inserted) and
     * Python ones; two markers ([truncated]/[unknown] at the root, one for
     * Python frames cut); inlined frames too with --inline */
    const struct np_launch_event *e = l->ev;
    size_t native = (e->flags & NP_LF_AT_MARKER)    ? NP_UNWIND_MAX_FRAMES
                    : (e->flags & NP_LF_STACK_COPY) ? (e->stack_len ? NP_UNWIND_MAX_FRAMES : 1)
                                                    : e->n_ips + 1;
    size_t python = (e->flags & NP_LF_PY) ? e->n_py : 0;
    if (!in->inline_folded)
        FUZZ_CHECK(folded <= native + python + 2);
    FUZZ_CHECK(folded <= detailed);
}

static void on_handle(struct np_ingest *in, struct np_ingest_proc *p,
                      const struct np_probe_site *site, const struct np_handle_event *h) {
    (void)in;
    FUZZ_CHECK(p == &target || p == &target_nosym);
    FUZZ_CHECK(site && site->pid == getpid());
    touch(h, sizeof(*h));
    seen.handle++;
}

static void on_marker(struct np_ingest *in, const struct np_marker_event *m) {
    (void)in;
    touch(m, sizeof(*m));
    seen.marker++;
}

static void on_graph(struct np_ingest *in, struct np_ingest_proc *p,
                     const struct np_probe_site *site, const struct np_graph_event *g) {
    (void)in;
    FUZZ_CHECK(p == &target || p == &target_nosym);
    FUZZ_CHECK(site && site->def->role == NP_ROLE_GRAPH_CALL);
    touch(g, sizeof(*g));
    seen.graph++;
}

static bool captured(struct np_ingest *in, struct np_ingest_proc *p, const struct np_launch *l) {
    (void)in, (void)p;
    return (seen.more & MORE_CAPTURED) && (l->stream & 1);
}

static const struct np_ingest_ops ops = {
    .find = find,
    .recording = recording,
    .new_mapping = new_mapping,
    .launch = on_launch,
    .handle = on_handle,
    .marker = on_marker,
    .graph = on_graph,
    .captured = captured,
};

/* ---- building records ------------------------------------------------------------- */

/* The input's bytes, read in turn; zeros once they run out. */
struct bytes {
    const uint8_t *p;
    size_t left;
};

static void take(struct bytes *b, void *out, size_t n) {
    size_t k = n < b->left ? n : b->left;
    memcpy(out, b->p, k);
    memset((uint8_t *)out + k, 0, n - k);
    b->p += k, b->left -= k;
}

/* A small nonzero word becomes an address in code we have CFI and
 * symbols for; anything else stays. */
static uint64_t relocate(uint64_t w) {
    if (!w || w >> 32)
        return w;
    return anchors[w % 8] + ((w >> 8) & 0xff);
}

static uint32_t probe_id(uint8_t fix, uint32_t id) {
    return (fix & FIX_RAW_IDS) ? id : id % (uint32_t)(attacher.nsites + 1);
}

static void patch_header(uint8_t fix, struct np_event_header *h, enum np_event_type type) {
    h->type = (uint16_t)type;
    h->version = NP_EVENT_VERSION;
    if (!(fix & FIX_FOREIGN))
        h->pid = (uint32_t)getpid();
    h->tid %= 4;
    h->ts_ns &= 0xff;
}

static uint8_t *build_launch(uint8_t fix, struct bytes *in, size_t *size) {
    static struct np_launch_event e; /* the fixed part */
    take(in, &e, NP_LAUNCH_FIXED_SIZE);
    patch_header(fix, &e.hdr, NP_EV_LAUNCH);
    e.probe_id = probe_id(fix, e.probe_id);
    e.called_as = probe_id(fix, e.called_as);
    e.outer_probe = probe_id(fix, e.outer_probe);
    bool template = fix & FIX_TEMPLATE;
    if (template) {
        e.n_ips = 1;
        e.flags |= NP_LF_STACK_COPY;
        e.stack_len = e.stack_len && e.stack_len < tmpl.len ? e.stack_len : tmpl.len;
        e.sp ^= tmpl.sp, e.bp ^= tmpl.bp, e.stack_top ^= tmpl.top;
    } else {
        e.n_ips %= NP_MAX_STACK + 1;
        if ((e.flags & NP_LF_STACK_COPY) && !e.n_ips)
            e.n_ips = 1;
        e.stack_len %= NP_MAX_STACK_BYTES + 1;
        e.ret_addr = relocate(e.ret_addr);
    }
    e.n_py %= NP_PY_MAX_FRAMES + 1;
    size_t py_at = NP_LAUNCH_FIXED_SIZE + (size_t)np_launch_py_index(e.n_ips, e.stack_len) * 8;
    *size = py_at + (size_t)e.n_py * sizeof(struct np_py_frame);
    uint8_t *rec = calloc(1, *size);
    FUZZ_CHECK(rec);
    e.hdr.size = (uint32_t)*size;
    memcpy(rec, &e, NP_LAUNCH_FIXED_SIZE);
    /* Python frames first (their place does not depend on the stack's length) */
    for (uint32_t i = 0; i < e.n_py; i++) {
        struct np_py_frame f;
        take(in, &f, sizeof(f));
        if (f.code < IMAGE_SIZE)
            f.code += IMAGE_BASE;
        memcpy(rec + py_at + i * sizeof(f), &f, sizeof(f));
    }
    uint8_t *ips = rec + NP_LAUNCH_FIXED_SIZE;
    for (uint32_t i = 0; i < e.n_ips; i++) {
        uint64_t w;
        take(in, &w, sizeof(w));
        w = template ? w ^ tmpl.pc : relocate(w);
        memcpy(ips + i * 8, &w, sizeof(w));
    }
    uint8_t *stack = ips + (size_t)e.n_ips * 8;
    take(in, stack, e.stack_len);
    if (template)
        for (uint32_t i = 0; i < e.stack_len; i++)
            stack[i] ^= tmpl.bytes[i];
    return rec;
}

static uint8_t *build_plan(uint8_t fix, struct bytes *in, size_t *size) {
    static struct np_nccl_plan_event e;
    take(in, &e, NP_NCCL_PLAN_FIXED_SIZE);
    patch_header(fix, &e.hdr, NP_EV_NCCL_PLAN);
    e.probe_id = probe_id(fix, e.probe_id);
    size_t ntasks = 0;
    for (int i = 0; i < NP_NCCL_LISTS; i++) {
        e.n_tasks[i] %= 17; /* up to 80: over NP_NCCL_MAX_TASKS at times */
        ntasks += e.n_tasks[i];
    }
    if (ntasks > NP_NCCL_MAX_TASKS)
        ntasks = NP_NCCL_MAX_TASKS;
    *size = NP_NCCL_PLAN_FIXED_SIZE + ntasks * NP_NCCL_TASK_BYTES;
    uint8_t *rec = malloc(*size);
    FUZZ_CHECK(rec);
    e.hdr.size = (uint32_t)*size;
    memcpy(rec, &e, NP_NCCL_PLAN_FIXED_SIZE);
    take(in, rec + NP_NCCL_PLAN_FIXED_SIZE, *size - NP_NCCL_PLAN_FIXED_SIZE);
    return rec;
}

/* The fixed-size records: handle, map, marker, graph. */
static uint8_t *build_small(uint8_t fix, struct bytes *in, enum np_event_type type, size_t *size) {
    static const size_t sizes[] = {[NP_EV_HANDLE] = sizeof(struct np_handle_event),
                                   [NP_EV_MAP] = sizeof(struct np_map_event),
                                   [NP_EV_MARKER] = sizeof(struct np_marker_event),
                                   [NP_EV_GRAPH] = sizeof(struct np_graph_event)};
    *size = sizes[type];
    uint8_t *rec = malloc(*size);
    FUZZ_CHECK(rec);
    take(in, rec, *size);
    struct np_event_header h;
    memcpy(&h, rec, sizeof(h));
    patch_header(fix, &h, type);
    h.size = (uint32_t)*size;
    memcpy(rec, &h, sizeof(h));
    if (type == NP_EV_HANDLE || type == NP_EV_GRAPH) { /* probe_id follows the header */
        uint32_t id;
        memcpy(&id, rec + sizeof(h), sizeof(id));
        id = probe_id(fix, id);
        memcpy(rec + sizeof(h), &id, sizeof(id));
    }
    return rec;
}

/* One record from the bytes, in a heap buffer of exactly *size bytes. */
static uint8_t *build(uint8_t fix, const uint8_t *p, size_t len, size_t *size) {
    if (!(fix & FIX_PATCH)) {
        uint8_t *rec = malloc(len);
        FUZZ_CHECK(rec || !len);
        memcpy(rec, p, len);
        *size = len;
        return rec;
    }
    struct bytes in = {p, len};
    uint16_t raw_type = 0;
    uint32_t raw_size = 0;
    if (len >= 8) {
        memcpy(&raw_type, p, sizeof(raw_type));
        memcpy(&raw_size, p + 4, sizeof(raw_size));
    }
    enum np_event_type type = (enum np_event_type)(
        raw_type >= NP_EV_LAUNCH && raw_type <= NP_EV_GRAPH ? raw_type : 1 + raw_type % 6);
    uint8_t *rec = type == NP_EV_LAUNCH      ? build_launch(fix, &in, size)
                   : type == NP_EV_NCCL_PLAN ? build_plan(fix, &in, size)
                                             : build_small(fix, &in, type, size);
    if (fix & FIX_RAW_SIZE)
        memcpy(rec + 4, &raw_size, sizeof(raw_size));
    return rec;
}

/* ---- one input ---------------------------------------------------------------------- */

static void check_stats(const struct np_ingest *in, bool queue, uint64_t fed, bool nosym) {
    const struct np_ingest_stats *st = &in->stats;
    uint64_t handled = fed;
    if (queue) {
        const struct np_backlog *b = &in->backlog;
        FUZZ_CHECK(fed == b->queued + b->dropped_launches + b->dropped_other);
        FUZZ_CHECK(b->queued == b->popped && b->scanned == b->queued);
        handled = b->queued;
    }
    FUZZ_CHECK(st->marker_events >= st->fast_doubles + st->fast_launches);
    uint64_t markers = st->marker_events - st->fast_doubles - st->fast_launches;
    FUZZ_CHECK(handled == st->malformed + st->unknown_source + st->not_recorded +
                              st->launch_events + st->fast_doubles + st->handle_events +
                              st->map_events + st->graph_events + st->nccl_plan_events + markers);
    FUZZ_CHECK(seen.launch == st->launch_events && seen.handle == st->handle_events &&
               seen.graph == st->graph_events && seen.marker == st->marker_events);
    FUZZ_CHECK(st->fast_launches <= st->launch_events);
    uint64_t per_probe = 0;
    for (size_t i = 0; i < st->per_probe_len; i++)
        per_probe += st->per_probe[i];
    FUZZ_CHECK(per_probe == st->launch_events);
    FUZZ_CHECK(st->nccl_plans <= st->nccl_plan_events);
    FUZZ_CHECK(st->nccl_launches_without_plan == seen.nccl_launch - seen.nccl_with_plan);
    FUZZ_CHECK(st->nccl_internal_calls == seen.nccl_internal &&
               seen.nccl_internal <= seen.nccl_ops);
    FUZZ_CHECK(st->unsymbolized == (nosym ? st->launch_events : 0));
    if (!nosym)
        FUZZ_CHECK(seen.new_mapping <= st->map_events);
    FUZZ_CHECK(in->unwind.hint_short <= in->unwind.hinted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static unsigned inputs;
    setup();
    if (size < HEAD || size > MAX_STREAM)
        return 0;
    if (++inputs % RESET_EVERY == 0) { /* symbolizer and unwinder caches only grow */
        free_readers();
        new_readers();
    }
    uint8_t mode = data[0], more = data[2];
    memset(&seen, 0, sizeof(seen));
    seen.more = more;
    seen.nosym = mode & MODE_NO_SYM;
    bool queue = mode & MODE_BACKLOG;

    static const struct np_nccl_layout *layouts[4] = {&nccl_full, &nccl_stripped, &nccl_old, NULL};
    const struct np_nccl_layout *layout = layouts[(more >> MORE_NCCL_SHIFT) & 3];
    for (size_t i = 0; i < attacher.nsites; i++)
        attacher.sites[i].nccl = attacher.sites[i].def->family == NP_FAMILY_NCCL ? layout : NULL;
    np_ingest_proc_forget_stacks(&target); /* each input from scratch: stacks, code objects */
    np_ingest_proc_forget_stacks(&target_nosym);
    target.pycode = target_nosym.pycode = np_pycode_new(getpid(), &py_layout);
    FUZZ_CHECK(target.pycode);
    static size_t image_used;
    memset(image + IMAGE_FUZZ, 0, image_used);
    image_used = 0;

    struct np_ingest in;
    memset(&in, 0, sizeof(in));
    in.attacher = &attacher;
    in.ops = &ops;
    in.fp_fallback = mode & MODE_FP_FALLBACK;
    in.inline_folded = mode & MODE_INLINE;
    in.python_mode = (enum np_python_mode)(((mode >> MODE_PYTHON_SHIFT) & 3) % 3);
    in.budget = (mode & MODE_BUDGET) ? 3 : 0;
    in.raw_dump = (mode & MODE_RAW_DUMP) ? dev_null : NULL;
    np_ingest_set_backlog(&in, queue ? ((uint64_t)data[1] << 14 | 1) : 0);
    np_stack_hints_init(&in.hints);
    if (more & MORE_HINTS) {
        in.hints.fd = hints_fd;
        in.hints.gen = &hints_gen;
    }

    uint64_t fed = 0, yields = 0;
    for (size_t off = HEAD; off < size;) {
        uint8_t fix = data[off++];
        size_t len = 0;
        if (size - off >= 2) {
            len = (size_t)data[off] | (size_t)data[off + 1] << 8;
            off += 2;
        }
        if (len > size - off)
            len = size - off;
        if (!(fix & FIX_PATCH) && (fix & FIX_IMAGE)) { /* code objects of the input's own */
            size_t n = len < IMAGE_SIZE - IMAGE_FUZZ ? len : IMAGE_SIZE - IMAGE_FUZZ;
            memcpy(image + IMAGE_FUZZ, data + off, n);
            image_used = n > image_used ? n : image_used;
            off += len;
            continue;
        }
        size_t rec_size;
        uint8_t *rec = build(fix, data + off, len, &rec_size);
        off += len;
        seen.records++;
        fed++;
        int ret = np_ingest_record(&in, rec, rec_size);
        FUZZ_CHECK(ret == 0 || ret == NP_INGEST_YIELD);
        yields += ret == NP_INGEST_YIELD;
        free(rec); /* libbpf's record is gone once the callback returns */
        if (queue && (fix & FIX_WORK))
            np_ingest_work(&in, (fix & FIX_IMAGE) ? 1 : 0);
    }
    if (queue)
        FUZZ_CHECK(np_ingest_work(&in, 0) == 0);
    FUZZ_CHECK(yields == (!in.queue && (mode & MODE_BUDGET) && fed >= 3 ? 1u : 0u));
    check_stats(&in, in.queue, fed, seen.nosym);

    np_ingest_settle(&in);
    const struct np_ingest_stats *st = &in.stats;
    /* every plan decoded met its launch or is unclaimed (a launch not
     * recorded takes its plan too) */
    uint64_t met = seen.nccl_with_plan + st->nccl_plans_unclaimed;
    if (more & MORE_NOT_RECORDING)
        FUZZ_CHECK(st->nccl_plans >= met);
    else
        FUZZ_CHECK(st->nccl_plans == met);
    np_ingest_free(&in);
    np_pycode_free(target.pycode);
    return 0;
}
