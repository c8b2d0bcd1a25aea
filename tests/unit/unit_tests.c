/* unit_tests.c - unit tests for the pieces of ncclprobe that need no BPF:
 * demangling, thunk decoding, /proc/PID/maps parsing, frame and JSON
 * escaping, hash maps, argument decoding, number parsing, Python file
 * names, the recording writer (hostile names included), the launch <-> GPU
 * record join, NCCL layouts and enum names from DWARF, NCCL plan decoding and
 * per-communicator totals. Prints "N passed, N failed" and exits non-zero
 * on any failure. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attach/dwarf_layout.h"
#include "attach/elfscan.h"
#include "attach/nccl_flow_layout.h"
#include "attach/nccl_layout.h"
#include "attach/probes.h"
#include "attach/process.h"
#include "attach/procmaps.h"
#include "check.h"
#include "correlate/gpu.h"
#include "correlate/graphs.h"
#include "correlate/nccl_comms.h"
#include "ingest/backlog.h"
#include "ingest/ingest.h"
#include "ingest/launch.h"
#include "ingest/nccl_plan.h"
#include "ingest/workers.h"
#include "lib/hashmap.h"
#include "lib/json.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "writers/output.h"

static void check_str(const char *got, const char *want, const char *what) {
    if (got && strcmp(got, want) == 0) {
        passed++;
        return;
    }
    failed++;
    fprintf(stderr, "FAIL %s: got '%s', want '%s'\n", what, got ? got : "(null)", want);
}

static void test_demangle(void) {
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"main", "main"},
        {"_Z6vecAddPfS_S_i", "vecAdd"},
        {"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_"
         "11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
         "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
         "std::array<char*, 1ul> >"},
        {"_ZNK3foo3barEv", "foo::bar"},
        {"_ZN12_GLOBAL__N_13bazEi", "(anonymous namespace)::baz"},
        {"_ZN3FoodlEPv", "Foo::operator delete"},
        {"_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan", "ncclLaunchKernel"},
        {"_Znot_a_valid_name", "_Znot_a_valid_name"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *got = np_demangle_short(cases[i].in);
        check_str(got, cases[i].out, cases[i].in);
        free(got);
    }
}

static void test_thunk(void) {
    uint64_t target = 0;
    /* libcudart 13: __cudaLaunchKernel_ptsz at 0x229b0 jumps to 0x4e6b0 */
    const uint8_t cudart[] = {0x55, 0x48, 0x89, 0xe5, 0x5d, 0xe9, 0xf6, 0xbc, 0x02, 0x00};
    CHECK(np_decode_thunk(cudart, sizeof(cudart), 0x229b0, &target) == 1);
    CHECK(target == 0x4e6b0);
    const uint8_t endbr_jmp[] = {0xf3, 0x0f, 0x1e, 0xfa, 0xeb, 0x10};
    CHECK(np_decode_thunk(endbr_jmp, sizeof(endbr_jmp), 0x1000, &target) == 1);
    CHECK(target == 0x1000 + 6 + 0x10);
    const uint8_t backwards[] = {0xe9, 0xfb, 0xff, 0xff, 0xff}; /* jmp -5: itself */
    CHECK(np_decode_thunk(backwards, sizeof(backwards), 0x2000, &target) == 1);
    CHECK(target == 0x2000);
    const uint8_t real_fn[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10};
    CHECK(np_decode_thunk(real_fn, sizeof(real_fn), 0x3000, &target) == 0);
    const uint8_t truncated[] = {0xe9, 0x01};
    CHECK(np_decode_thunk(truncated, sizeof(truncated), 0x3000, &target) == 0);
}

static void test_maps(void) {
    const char *text =
        "55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1234   /usr/bin/prog\n"
        "55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:01 1234   /usr/bin/prog\n"
        "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n"
        "7f1000000000-7f1000100000 r-xp 00010000 08:02 99 /opt/lib/lib cuda (copy).so\n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]\n"
        "garbage line\n"
        "7ffd10000000-7ffd10002000 r-xp 00000000 00:00 0      [vdso]\n";
    struct np_maps maps;
    CHECK(np_maps_parse(text, &maps) == 0);
    CHECK(maps.count == 3);
    if (maps.count == 3) {
        CHECK(!maps.items[0].exec && maps.items[1].exec);
        CHECK(maps.items[1].start == 0x55d0c0a01000ull && maps.items[1].offset == 0x1000);
        CHECK(maps.items[1].inode == 1234);
        check_str(maps.items[2].path, "/opt/lib/lib cuda (copy).so", "path with spaces");
    }
    np_maps_free(&maps);
}

static void test_sanitize(void) {
    char out[64];
    np_sanitize_frame(out, sizeof(out), "a;b\nc\td e", false);
    check_str(out, "a_b_c_d e", "frame sanitize");
    np_output_safe_comm(out, sizeof(out), "py thon;\n");
    check_str(out, "py_thon__", "comm sanitize");
    np_output_safe_comm(out, sizeof(out), "");
    check_str(out, "?", "empty comm");
    np_sanitize_frame(out, 4, "abcdef", false);
    check_str(out, "abc", "truncation");
    /* cut before a character that does not fit whole, never inside one */
    np_sanitize_frame(out, 4, "a\xc3\xa9\xc3\xa9", false);
    check_str(out, "a\xc3\xa9", "truncation at a UTF-8 boundary");
    np_sanitize_frame(out, 4, "ab\xf0\x9f\x98\x80", false);
    check_str(out, "ab", "truncation before a 4-byte character");
    np_sanitize_frame(out, 5, "\xe2\x82\xac\xe2\x82\xac", false);
    check_str(out, "\xe2\x82\xac", "truncation before a 3-byte character");
}

static void test_json(void) {
    struct np_str s;
    np_str_init(&s);
    np_json_string(&s, "q\"<&>\\\n\x01 caf\xc3\xa9 bad\xff\xfe end");
    check_str(np_str_cstr(&s), "\"q\\\"<&>\\\\\\n\\u0001 caf\xc3\xa9 bad\\ufffd\\ufffd end\"",
              "json escape");
    np_str_free(&s);
    char *clean = np_utf8_clean("ok\xc0\xaf\xed\xa0\x80z");
    check_str(clean, "ok\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz",
              "overlong/surrogate replaced");
    free(clean);
}

/* The writers' number formatting without printf, and borrowed strings. */
static void test_str(void) {
    static const uint64_t vals[] = {0,
                                    1,
                                    9,
                                    10,
                                    15,
                                    16,
                                    255,
                                    4096,
                                    123456789,
                                    0x7fffffffffffffffull,
                                    0x8000000000000000ull,
                                    UINT64_MAX};
    int ok = 1;
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        char want[100];
        struct np_str s;
        np_str_init(&s);
        np_str_append(&s, "x");
        np_str_append_u64(&s, vals[i]);
        np_str_append_n(&s, "|", 1);
        np_str_append_hex(&s, vals[i]);
        np_str_append_n(&s, "|", 1);
        np_str_append_i64(&s, (int64_t)vals[i]);
        np_str_append_n(&s, "|", 1);
        np_str_append_i64(&s, -(int64_t)(vals[i] & 0xffff));
        snprintf(want, sizeof(want), "x%" PRIu64 "|%" PRIx64 "|%" PRId64 "|%" PRId64, vals[i],
                 vals[i], (int64_t)vals[i], -(int64_t)(vals[i] & 0xffff));
        ok &= strcmp(np_str_cstr(&s), want) == 0 && s.len == strlen(want);
        np_str_free(&s);
    }
    CHECK(ok);

    /* borrowed: read in place; copied at the first change; never written or freed */
    static const char text[] = "main;f;g";
    struct np_str b;
    np_str_init(&b);
    np_str_append(&b, "own buffer, freed by the borrow");
    np_str_borrow(&b, text, strlen(text));
    CHECK(np_str_cstr(&b) == text && b.len == strlen(text));
    np_str_append(&b, ";h");
    check_str(np_str_cstr(&b), "main;f;g;h", "borrowed, then appended");
    check_str(text, "main;f;g", "the borrowed text is untouched");
    np_str_borrow(&b, text, strlen(text));
    np_str_appendf(&b, ";%d", 7);
    check_str(np_str_cstr(&b), "main;f;g;7", "borrowed, then appendf");
    np_str_borrow(&b, text, strlen(text));
    np_str_reset(&b);
    CHECK(b.len == 0 && np_str_cstr(&b)[0] == '\0');
    check_str(text, "main;f;g", "a reset does not write the borrowed text");
    np_str_append(&b, "new");
    check_str(np_str_cstr(&b), "new", "a reset borrowed string takes new text");
    np_str_borrow(&b, text, strlen(text));
    np_str_free(&b); /* does not free text */
    CHECK(b.buf == NULL);

    /* a stack's hash: known once computed, recomputed after a frame is appended */
    struct np_stack_texts t = {0};
    np_str_append(&t.detailed, "a;b");
    t.detailed_hash = np_hash_str("a;b");
    t.hashed_len = t.detailed.len + 1;
    CHECK(np_stack_texts_hash(&t) == np_hash_str("a;b"));
    np_str_append(&t.detailed, ";c");
    CHECK(np_stack_texts_hash(&t) == np_hash_str("a;b;c"));
    np_str_free(&t.detailed);
}

static void test_hashmap(void) {
    struct np_map m;
    np_map_init(&m);
    int ok = 1;
    for (uintptr_t i = 1; i <= 5000; i++)
        ok &= np_map_put_u64(&m, i * 7919, (void *)i) == 0;
    for (uintptr_t i = 1; i <= 5000; i++)
        ok &= np_map_get_u64(&m, i * 7919) == (void *)i;
    CHECK(ok); /* survives many resizes */
    CHECK(np_map_get_u64(&m, 3) == NULL);
    CHECK(np_map_put_str(&m, "k", (void *)42) == 0);
    CHECK(np_map_get_str(&m, "k") == (void *)42);
    CHECK(np_map_get_str_hashed(&m, "k", np_hash_str("k")) == (void *)42);
    CHECK(np_map_put_str_hashed(&m, "long key", np_hash_str("long key"), (void *)43) == 0);
    CHECK(np_map_get_str(&m, "long key") == (void *)43);
    void **slot = np_map_slot_str_hashed(&m, "new", np_hash_str("new"));
    CHECK(slot && *slot == NULL);
    *slot = (void *)44;
    CHECK(np_map_get_str(&m, "new") == (void *)44);
    slot = np_map_slot_str_hashed(&m, "k", np_hash_str("k"));
    CHECK(slot && *slot == (void *)42);
    CHECK(np_map_get_u64(&m, 0) == NULL);
    np_map_free(&m, NULL);
}

static void test_decode(void) {
    static struct np_launch_event e;
    struct np_launch l;
    memset(&e, 0, sizeof(e));
    /* cudaLaunchKernel(f, {2,3,4}, {32,1,1}, args, 128, 0x5000) */
    e.args[0] = 0x401000;
    e.args[1] = 2ull | (3ull << 32);
    e.args[2] = 4;
    e.args[3] = 32ull | (1ull << 32);
    e.args[4] = 1;
    e.stack_args[0] = 128;
    e.stack_args[1] = 0x5000;
    np_launch_decode(&e, np_probe_def_by_symbol("cudaLaunchKernel"), &l);
    CHECK(l.func == 0x401000 && l.grid[0] == 2 && l.grid[1] == 3 && l.grid[2] == 4);
    CHECK(l.block[0] == 32 && l.block[1] == 1 && l.block[2] == 1);
    CHECK(l.shmem == 128 && l.stream == 0x5000 && l.has_dims && !l.is_nccl_op);

    /* cuLaunchKernelEx(&cfg, f, ...): cfg copied into deref */
    uint32_t cfg[8] = {10, 1, 1, 32, 2, 1, 64, 0};
    uint64_t stream = 0x5005;
    memcpy(e.deref, cfg, sizeof(cfg));
    memcpy(e.deref + 32, &stream, sizeof(stream));
    e.args[0] = 0x7fff0000;
    e.args[1] = 0x7001;
    np_launch_decode(&e, np_probe_def_by_symbol("cuLaunchKernelEx"), &l);
    CHECK(l.func == 0x7001 && l.grid[0] == 10 && l.block[1] == 2 && l.shmem == 64);
    CHECK(l.stream == 0x5005);

    /* ncclReduce(send, recv, count, dtype, op, root, comm@s0, stream@s1) */
    uint64_t args[6] = {0x1000, 0x2000, 99, 7, 2, 3};
    memcpy(e.args, args, sizeof(args));
    e.stack_args[0] = 0xc0;
    e.stack_args[1] = 0x5;
    np_launch_decode(&e, np_probe_def_by_symbol("ncclReduce"), &l);
    CHECK(l.is_nccl_op && l.count == 99 && l.datatype == 7 && l.redop == 2 && l.root == 3);
    CHECK(l.comm == 0xc0 && l.stream == 0x5 && l.peer == -1);
    /* without a library's names: the built-in table */
    check_str(np_nccl_name(NULL, NP_NCCL_DATATYPE, 9), "bfloat16", "datatype name");
    check_str(np_nccl_name(NULL, NP_NCCL_REDOP, 7), "custom", "user redop");
    CHECK(np_nccl_datatype_bytes(NULL, 6) == 2 && np_nccl_datatype_bytes(NULL, 42) == 0);
}

/* Names as a library's DWARF gives them: prefixes dropped, the first name
 * of a value kept, counts left out, sizes from the names; what DWARF did
 * not name comes from the built-in table, and says so. */
static void test_nccl_names(void) {
    static struct np_nccl_names n;
    np_nccl_names_clear(&n);
    static const struct {
        enum np_nccl_enum e;
        const char *name;
        int64_t value;
    } seen[] = {
        {NP_NCCL_FUNC, "ncclFuncBroadcast", 0},   {NP_NCCL_FUNC, "ncclFuncAllGatherV", 11},
        {NP_NCCL_FUNC, "ncclFuncWaitSignal", 14}, {NP_NCCL_FUNC, "ncclNumFuncs", 15},
        {NP_NCCL_DATATYPE, "ncclInt8", 0},        {NP_NCCL_DATATYPE, "ncclChar", 0},
        {NP_NCCL_DATATYPE, "ncclBfloat16", 9},    {NP_NCCL_DATATYPE, "ncclFloat8e4m3", 10},
        {NP_NCCL_DATATYPE, "ncclNumTypes", 12},
    };
    for (size_t i = 0; i < sizeof(seen) / sizeof(seen[0]); i++)
        np_nccl_names_add(&n, seen[i].e, seen[i].name, seen[i].value);
    np_nccl_names_fill_builtin(&n);
    check_str(np_nccl_name(&n, NP_NCCL_FUNC, 11), "AllGatherV", "func 11");
    check_str(np_nccl_name(&n, NP_NCCL_FUNC, 14), "WaitSignal", "func 14");
    check_str(np_nccl_name(&n, NP_NCCL_FUNC, 4), "?", "func gap"); /* DWARF named no 4 here */
    check_str(np_nccl_name(&n, NP_NCCL_FUNC, 15), "?", "the count is no name");
    check_str(np_nccl_name(&n, NP_NCCL_DATATYPE, 0), "int8", "first name of a value");
    check_str(np_nccl_name(&n, NP_NCCL_DATATYPE, 9), "bfloat16", "lower-case");
    CHECK(np_nccl_datatype_bytes(&n, 9) == 2 && np_nccl_datatype_bytes(&n, 10) == 1 &&
          np_nccl_datatype_bytes(&n, 0) == 1 && np_nccl_datatype_bytes(&n, 5) == 0);
    CHECK(n.from_dwarf[NP_NCCL_FUNC] && n.from_dwarf[NP_NCCL_DATATYPE] &&
          !n.from_dwarf[NP_NCCL_REDOP]);
    check_str(np_nccl_name(&n, NP_NCCL_REDOP, 4), "avg", "built-in redop");
    static const char *const reductions[] = {"AllReduce", NULL};
    CHECK(np_nccl_func_is(&n, 0, (const char *const[]){"Broadcast", NULL}) &&
          !np_nccl_func_is(&n, 11, reductions));
}

static char *slurp(const char *dir, const char *name) {
    char path[512], *text = NULL;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (np_read_file(path, &text, NULL) < 0)
        return NULL;
    return text;
}

static void test_writers(void) {
    char dir[] = "/tmp/ncclprobe-unit-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char out_dir[600];
    snprintf(out_dir, sizeof(out_dir), "%s/a/b", dir); /* parents are created */
    struct np_output *o = NULL;
    CHECK(np_output_open(out_dir, &o) == 0);
    if (!o)
        return;

    static struct np_launch_event e;
    memset(&e, 0, sizeof(e));
    e.hdr.ts_ns = 123;
    e.hdr.pid = 7;
    e.hdr.tid = 8;
    e.cpu = 1;
    memcpy(e.comm, "we;ird\ncomm x", 14);
    struct np_launch l;
    np_launch_decode(&e, np_probe_def_by_symbol("cudaLaunchKernel"), &l);
    struct np_stack_texts stack = {0};
    np_str_init(&stack.folded);
    np_str_init(&stack.detailed);
    np_str_init(&stack.locations);
    np_str_append(&stack.folded, "main;fn<\"&'>;caf\xc3\xa9\xff");
    np_str_append(&stack.detailed, np_str_cstr(&stack.folded));
    np_str_append(&stack.locations, "{},{\"line\":3},{}");
    for (int i = 0; i < 3; i++)
        np_output_launch(o, &l, &stack, "k;er\nnel", NULL);
    np_launch_decode(&e, np_probe_def_by_symbol("cuLaunchKernel"), &l);
    l.nested = true;
    np_output_launch(o, &l, &stack, "inner", NULL);
    np_str_free(&stack.folded);
    np_str_free(&stack.detailed);
    np_str_free(&stack.locations);
    CHECK(np_output_totals(o)->launches == 3 && np_output_totals(o)->nested == 1);
    CHECK(np_output_close(o) == 0);

    char *ext = slurp(out_dir, "stacks.ext.folded");
    char *folded = slurp(out_dir, "launches.folded");
    char *jsonl = slurp(out_dir, "launches.jsonl");
    char *stacks = slurp(out_dir, "stacks.jsonl");
    CHECK(ext &&
          strstr(ext,
                 "123 we_ird_comm_x 7 8 1 main;fn<\"&'>;caf\xc3\xa9\xff;[GPU_Kernel]k_er_nel\n"));
    CHECK(folded && strcmp(folded, "main;fn<\"&'>;caf\xc3\xa9\xff;[GPU_Kernel]k_er_nel 3\n") == 0);
    CHECK(jsonl && strstr(jsonl, "\"comm\":\"we;ird\\ncomm x\"") &&
          strstr(jsonl, "\"nested\":true"));
    CHECK(stacks && strstr(stacks, "\"frames\":[\"main\",\"fn<\\\"&'>\",\"caf\xc3\xa9\\ufffd\"],"
                                   "\"locations\":[{},{\"line\":3},{}]}"));
    free(ext);
    free(folded);
    free(jsonl);
    free(stacks);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);

    /* An output directory under a regular file cannot be created. */
    CHECK(np_output_open("/dev/null/x", &o) == -ENOTDIR);
}

static void test_parse(void) {
    double d;
    long v;
    CHECK(np_parse_seconds("2.5", &d) == 0 && d == 2.5);
    CHECK(np_parse_seconds("abc", &d) == -EINVAL);
    CHECK(np_parse_seconds("-1", &d) == -EINVAL);
    CHECK(np_parse_seconds("", &d) == -EINVAL);
    CHECK(np_parse_seconds("nan", &d) == -EINVAL);
    CHECK(np_parse_long("42", 1, 100, &v) == 0 && v == 42);
    CHECK(np_parse_long("420", 1, 100, &v) == -ERANGE);
    CHECK(np_parse_long("4x", 1, 100, &v) == -EINVAL);
    uint64_t u = 0;
    CHECK(np_parse_u64("18446744073709551615", 0, UINT64_MAX, &u) == 0 && u == UINT64_MAX);
    CHECK(np_parse_u64("18446744073709551616", 0, UINT64_MAX, &u) == -ERANGE);
    CHECK(np_parse_u64("-5", 0, UINT64_MAX, &u) == -EINVAL);
    CHECK(np_parse_u64(" 5", 0, UINT64_MAX, &u) == -EINVAL);
    CHECK(np_parse_u64("0", 1, 9, &u) == -ERANGE);
}

/* Folded stacks show the path below site-packages, dist-packages or
 * lib/pythonX.Y, else the base name (pycode.h). */
static void test_py_short_filename(void) {
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"/usr/lib/python3/dist-packages/torch/nn/modules/module.py", "torch/nn/modules/module.py"},
        {"/root/.pyenv/versions/3.12.1/lib/python3.12/threading.py", "threading.py"},
        {"/usr/lib/python3.11/asyncio/events.py", "asyncio/events.py"},
        {"/root/.pyenv/versions/3.12.1/lib/python3.12/site-packages/numpy/core/numeric.py",
         "numpy/core/numeric.py"},
        {"/tmp/x/server.py", "server.py"},
        {"server.py", "server.py"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_str(np_py_short_filename(cases[i].in), cases[i].out, cases[i].in);
}

/* Deleting keys keeps every other key reachable (backward shift). */
static void test_hashmap_delete(void) {
    struct np_map m;
    np_map_init(&m);
    enum { N = 5000 };
    for (uint64_t k = 1; k <= N; k++)
        CHECK(np_map_put_u64(&m, k * 7919, (void *)(uintptr_t)k) == 0);
    for (uint64_t k = 1; k <= N; k += 2)
        CHECK(np_map_del_u64(&m, k * 7919) == (void *)(uintptr_t)k);
    CHECK(np_map_del_u64(&m, 3 * 7919) == NULL);
    CHECK(m.count == N / 2);
    int ok = 1;
    for (uint64_t k = 1; k <= N; k++) {
        void *v = np_map_get_u64(&m, k * 7919);
        ok &= (k % 2) ? v == NULL : v == (void *)(uintptr_t)k;
    }
    CHECK(ok);
    np_map_free(&m, NULL);
}

/* What the GPU join hands on, recorded for the checks below. */
struct joined {
    int n;
    uint64_t stack[16];
    int status[16], nrecords[16];
    uint32_t unmatched;
};

static void on_retire(void *ctx, const struct np_gpu_launch *l, enum np_gpu_status status) {
    struct joined *j = ctx;
    if (j->n < 16) {
        j->stack[j->n] = l->stack_id;
        j->status[j->n] = status;
        j->nrecords[j->n] = (int)l->nrecords;
    }
    j->n++;
}

static void on_unmatched(void *ctx, uint32_t pid, const struct np_gpu_record *r) {
    (void)pid, (void)r;
    ((struct joined *)ctx)->unmatched++;
}

static struct np_gpu_record kernel_record(uint32_t id) {
    struct np_gpu_record r;
    memset(&r, 0, sizeof(r));
    r.size = (uint16_t)np_gpu_record_size(0);
    r.kind = NP_GPU_KERNEL;
    r.correlation_id = id;
    r.start_ns = 100, r.end_ns = 250;
    return r;
}

static void test_gpu_join(void) {
    struct joined got = {0};
    struct np_gpu_ops ops = {.ctx = &got, .retire = on_retire, .unmatched = on_unmatched};
    const uint64_t ms = 1000000;
    struct np_gpu_join *j = np_gpu_join_new(&ops, 10 * ms, 100 * ms, 3);
    CHECK(j != NULL);
    if (!j)
        return;
    struct np_gpu_record r;
    /* thread 1: a runtime launch; its runtime and driver ids both join it */
    CHECK(np_gpu_join_launch(
              j, 7, 1,
              &(struct np_gpu_held){
                  .stack_id = 11, .json = "{", .cpu_kernel = "k", .tag = 0, .owner = NULL},
              true, 0) == 0);
    np_gpu_join_marker(j, 7, 1, 5, 2, 0);
    np_gpu_join_marker(j, 7, 1, 6, 1, 0);
    /* a second runtime id on that thread: another launch, not probed */
    np_gpu_join_marker(j, 7, 1, 9, 2, 0);
    /* thread 2: a driver launch takes no runtime id */
    CHECK(np_gpu_join_launch(
              j, 7, 2,
              &(struct np_gpu_held){
                  .stack_id = 22, .json = "{", .cpu_kernel = "k", .tag = 0, .owner = NULL},
              false, 0) == 0);
    np_gpu_join_marker(j, 7, 2, 8, 2, 0);
    np_gpu_join_marker(j, 7, 2, 10, 1, 0);
    CHECK(np_gpu_join_counters(j)->markers_unpaired == 2);
    /* a graph: five records on one id; one record arrives before its id is claimed */
    for (int i = 0; i < 5; i++) {
        r = kernel_record(10);
        np_gpu_join_record(j, 7, &r, 1 * ms);
    }
    r = kernel_record(6);
    np_gpu_join_record(j, 7, &r, 1 * ms);
    r = kernel_record(12); /* thread 3's, before its launch */
    np_gpu_join_record(j, 7, &r, 1 * ms);
    CHECK(np_gpu_join_launch(
              j, 7, 3,
              &(struct np_gpu_held){
                  .stack_id = 33, .json = "{", .cpu_kernel = "k", .tag = 0, .owner = NULL},
              true, 1 * ms) == 0);
    np_gpu_join_marker(j, 7, 3, 12, 2, 1 * ms);
    np_gpu_join_tick(j, 5 * ms); /* within the linger: nothing retires */
    CHECK(got.n == 0);
    np_gpu_join_tick(j, 20 * ms);
    CHECK(got.n == 3);
    CHECK(got.stack[0] == 11 && got.status[0] == NP_GPU_MATCHED && got.nrecords[0] == 1);
    CHECK(got.stack[1] == 22 && got.nrecords[1] == 5);
    CHECK(got.stack[2] == 33 && got.nrecords[2] == 1);
    /* no records: pending after the timeout; unclaimed records expire too */
    CHECK(np_gpu_join_launch(
              j, 7, 1,
              &(struct np_gpu_held){
                  .stack_id = 44, .json = "{", .cpu_kernel = "k", .tag = 0, .owner = NULL},
              true, 30 * ms) == 0);
    r = kernel_record(99);
    np_gpu_join_record(j, 7, &r, 30 * ms);
    np_gpu_join_tick(j, 100 * ms);
    CHECK(got.n == 3 && got.unmatched == 0);
    np_gpu_join_tick(j, 131 * ms);
    CHECK(got.n == 4 && got.stack[3] == 44 && got.status[3] == NP_GPU_PENDING);
    CHECK(got.unmatched == 1);
    /* bounded: a fourth waiting launch retires the oldest at once */
    for (uint32_t t = 0; t < 4; t++)
        CHECK(np_gpu_join_launch(
                  j, 8, t,
                  &(struct np_gpu_held){
                      .stack_id = 50 + t, .json = "{", .cpu_kernel = "k", .tag = 0, .owner = NULL},
                  true, 200 * ms) == 0);
    CHECK(got.n == 5 && got.stack[4] == 50 && np_gpu_join_waiting(j) == 3);
    CHECK(np_gpu_join_counters(j)->launches_evicted == 1);
    /* the process's library left: its launches retire now */
    np_gpu_join_finish_pid(j, 8, NP_GPU_NONE);
    CHECK(got.n == 8 && got.status[7] == NP_GPU_NONE && np_gpu_join_waiting(j) == 0);
    np_gpu_join_free(j);
}

/* A library brought in live started at 300 ms: a launch made before then
 * had no CUPTI and retires as NONE, one made after it and given no record
 * is PENDING - by the launch's time, whether it was read before the HELLO
 * or after it (the ring is read behind the socket). */
static void test_gpu_join_library_started(void) {
    struct joined got = {0};
    struct np_gpu_ops ops = {.ctx = &got, .retire = on_retire, .unmatched = on_unmatched};
    const uint64_t ms = 1000000;
    struct np_gpu_join *j = np_gpu_join_new(&ops, 10 * ms, 100 * ms, 16);
    CHECK(j != NULL);
    if (!j)
        return;
    struct np_gpu_held held = {.json = "{", .cpu_kernel = "k"};
    /* read before the HELLO: one made before the library started, one after */
    held.stack_id = 1;
    CHECK(np_gpu_join_launch(j, 7, 1, &held, true, 290 * ms) == 0);
    held.stack_id = 2;
    CHECK(np_gpu_join_launch(j, 7, 2, &held, true, 305 * ms) == 0);
    held.stack_id = 9; /* another process's is not touched */
    CHECK(np_gpu_join_launch(j, 8, 1, &held, true, 290 * ms) == 0);
    np_gpu_join_library_started(j, 7, 300 * ms);
    /* read after it, made before it: the caller says so */
    held.stack_id = 3, held.before_start = true;
    CHECK(np_gpu_join_launch(j, 7, 3, &held, true, 299 * ms) == 0);
    held.stack_id = 4, held.before_start = false;
    CHECK(np_gpu_join_launch(j, 7, 4, &held, true, 310 * ms) == 0);
    np_gpu_join_tick(j, 1000 * ms);
    CHECK(got.n == 5);
    for (int i = 0; i < got.n && i < 5; i++) {
        bool before = got.stack[i] == 1 || got.stack[i] == 3;
        CHECK(got.status[i] == (before ? NP_GPU_NONE : NP_GPU_PENDING));
    }
    np_gpu_join_free(j);
}

/* Offsets read from the DWARF of the toolkit's real libnccl.so.2 (2.28.9)
 * equal those in ../shared/notes/nccl.md, found there with gdb/pahole and
 * the disassembly - an independent source. Skipped without that library. */
static void test_nccl_dwarf_layout(void) {
    static const char *const paths[] = {"/usr/local/cuda/lib64/libnccl.so.2",
                                        "/usr/local/cuda/lib/libnccl.so.2"};
    const char *lib = NULL;
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && !lib; i++)
        if (access(paths[i], R_OK) == 0)
            lib = paths[i];
    if (!lib) {
        printf("skipped: no toolkit libnccl.so.2\n");
        return;
    }
    static const struct {
        struct np_field_query q;
        int64_t offset;
        uint8_t bit_size;
    } want[] = {
        {{"ncclComm", "commHash"}, 0x1044c8, 0},
        {{"ncclComm", "rank"}, 0x1044d0, 0},
        {{"ncclComm", "nRanks"}, 0x1044d4, 0},
        {{"ncclComm", "cudaDev"}, 0x1044d8, 0},
        {{"ncclComm", "cudaArch"}, 0x104578, 0},
        {{"ncclComm", "planner.streams"}, 0x1054a0, 0},
        {{"ncclComm", "config.blocking"}, 0x106998, 0},
        {{"ncclKernelPlan", "comm"}, 16, 0},
        {{"ncclKernelPlan", "isSymColl"}, 34, 0},
        {{"ncclKernelPlan", "isCeColl"}, 35, 0},
        {{"ncclKernelPlan", "kernelFn"}, 40, 0},
        {{"ncclKernelPlan", "channelMask"}, 64, 0},
        {{"ncclKernelPlan", "threadPerBlock"}, 76, 0},
        {{"ncclKernelPlan", "p2pTaskQueue.head"}, 136, 0},
        {{"ncclKernelPlan", "collTaskQueue.head"}, 152, 0},
        {{"ncclTaskColl", "next"}, 0, 0},
        {{"ncclTaskColl", "func"}, 8, 0},
        {{"ncclTaskColl", "count"}, 32, 0},
        {{"ncclTaskColl", "root"}, 40, 0},
        {{"ncclTaskColl", "datatype"}, 44, 0},
        {{"ncclTaskColl", "opHost"}, 48, 0},
        {{"ncclTaskColl", "algorithm"}, 98, 8},
        {{"ncclTaskColl", "protocol"}, 99, 8},
        {{"ncclTaskColl", "nChannels"}, 232, 0},
        {{"ncclTaskP2p", "func"}, 8, 0},
        {{"ncclTaskP2p", "buff"}, 16, 0},
        {{"ncclTaskP2p", "count"}, 24, 0},
        {{"ncclTaskP2p", "datatype"}, 32, 0},
        {{"ncclTaskP2p", "root"}, 36, 0},
        {{"ncclTaskP2p", "nChannels"}, 80, 0},
        {{"ncclKernelPlan", "noSuchField"}, -1, 0},
    };
    enum { N = sizeof(want) / sizeof(want[0]) };
    struct np_field_query q[N];
    struct np_field got[N];
    for (size_t i = 0; i < N; i++)
        q[i] = want[i].q;
    CHECK(np_dwarf_fields(lib, q, N, got) == 0);
    for (size_t i = 0; i < N; i++) {
        if (got[i].offset == want[i].offset && got[i].bit_size == want[i].bit_size &&
            got[i].bit_shift == 0) {
            passed++;
            continue;
        }
        failed++;
        fprintf(stderr, "FAIL nccl layout %s.%s: got %lld (bits %u<<%u), want %lld\n", q[i].type,
                q[i].path, (long long)got[i].offset, got[i].bit_size, got[i].bit_shift,
                (long long)want[i].offset);
    }
    CHECK(got[2].size == 4 && got[0].size == 8); /* nRanks int, commHash u64 */
    struct np_field none[1];
    const struct np_field_query self = {"np_field", "offset"};
    CHECK(np_dwarf_fields("/proc/self/exe", &self, 1, none) == 0 && none[0].offset == 0);
    CHECK(np_dwarf_fields("/nonexistent", &self, 1, none) == -ENOENT);
    /* Debian's binaries are stripped: no debug info is its own answer */
    if (access("/usr/bin/true", R_OK) == 0)
        CHECK(np_dwarf_fields("/usr/bin/true", &self, 1, none) == -ENODATA);
}

/* The flow layout (--nccl-flows) of the toolkit's real libnccl.so.2 (2.28.9):
 * every offset against the notes' gdb/pahole/disassembly reading (shared
 * notes nccl.md section 4), the SaveProxy IPA-SRA clone and ncclProxySaveOp
 * at their nm addresses, and ncclPattern_t's names from its DWARF. */
static void test_nccl_flow_layout(void) {
    const char *lib = "/usr/local/cuda/lib64/libnccl.so.2";
    if (access(lib, R_OK) != 0) {
        printf("skipped: no toolkit libnccl.so.2\n");
        return;
    }
    static struct np_flow_layout l;
    static const struct {
        enum np_flow_field f;
        int64_t offset;
        uint32_t size; /* 0: not checked */
    } want[] = {
        {NPFF_OP_NBYTES, 8, 8},
        {NPFF_OP_OPCOUNT, 16, 8},
        {NPFF_OP_ROOT, 24, 4},
        {NPFF_OP_NSTEPS, 32, 4},
        {NPFF_OP_CHUNKSIZE, 40, 8},
        {NPFF_OP_SLICESTEPS, 80, 1},
        {NPFF_OP_CHUNKSTEPS, 81, 1},
        {NPFF_OP_CHANNEL, 82, 1},
        {NPFF_OP_COLL, 85, 1},
        {NPFF_OP_PATTERN, 87, 1},
        {NPFF_OP_PROTOCOL, 88, 1},
        {NPFF_OP_ALGORITHM, 89, 1},
        {NPFF_OP_NCHANNELS, 160, 4},
        {NPFF_CH_SIZE, 0, 408},
        {NPFF_CH_PEERS, 0, 8},
        {NPFF_CH_RING_PREV, 24, 4},
        {NPFF_CH_RING_NEXT, 28, 4},
        {NPFF_CH_RING_USER_RANKS, 32, 8},
        {NPFF_CH_TREE_UP, 60, 4},
        {NPFF_CH_TREE_DOWN, 64, 12},
        {NPFF_CH_COLLNET_CHAIN_UP, 80, 4},
        {NPFF_CH_COLLNET_DIRECT_OUT, 100, 4},
        {NPFF_CH_NVLS_OUT, 204, 4},
        {NPFF_CH_ID, 364, 4},
        {NPFF_PEER_SEND, 0, 464},
        {NPFF_PEER_RECV, 464, 464},
        {NPFF_CONN_SIZE, 0, 232},
        {NPFF_CONN_PROXY_PROGRESS, 48, 8},
        {NPFF_COMM_CHANNELS, 0xa0, 64 * 408},
        {NPFF_COMM_NCHANNELS, 0x104600, 4},
    };
    np_flow_layout_load(lib, &l);
    CHECK(l.status == 0);
    CHECK(l.missing[0] == '\0');
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct np_field *f = &l.f[want[i].f];
        if (f->offset == want[i].offset && (!want[i].size || f->size == want[i].size)) {
            passed++;
            continue;
        }
        failed++;
        fprintf(stderr, "FAIL flow layout %s: got %lld (%u bytes), want %lld (%u)\n",
                np_flow_field_name(want[i].f), (long long)f->offset, f->size,
                (long long)want[i].offset, want[i].size);
    }
    CHECK(l.sym_vaddr[NP_FLOW_SYM_SAVE_PROXY] == 0x96af0);
    CHECK(l.save_proxy_clone);
    CHECK(l.sym_vaddr[NP_FLOW_SYM_SAVE_OP] == 0x9ce70);
    CHECK(l.sym_vaddr[NP_FLOW_SYM_UPLOAD] == 0x69c80); /* uploadProxyOps, nm */
    CHECK(l.sym_vaddr[NP_FLOW_SYM_LAUNCH] == 0x705e0); /* ncclLaunchKernel, nm */
    /* .isra.11's parameters on entry (llvm-dwarfdump): channel split, the rest in place */
    static const char *const args[NP_FLOW_ARGS] = {"rdi", "none",  "rcx",  "r8",
                                                   "r9",  "cfa+0", "cfa+8"};
    for (int i = 0; i < NP_FLOW_ARGS; i++) {
        char where[24];
        np_param_loc_name(&l.save_proxy_args[i], where, sizeof(where));
        CHECK(strcmp(where, args[i]) == 0);
    }
    CHECK(l.patterns_from_dwarf);
    CHECK(strcmp(l.pattern[0], "RING") == 0 && strcmp(l.pattern[1], "RING_TWICE") == 0 &&
          strcmp(l.pattern[6], "TREE_UP_DOWN") == 0 && strcmp(l.pattern[14], "RECV") == 0 &&
          strcmp(l.pattern[2], "PIPELINE_FROM") == 0 && strcmp(l.pattern[11], "PAT_UP") == 0);
    char name[24];
    np_flow_pattern_name("ncclPatternNvlsTree", name, sizeof(name));
    CHECK(strcmp(name, "NVLS_TREE") == 0);
    /* no DWARF: flows absent, said so */
    if (access("/usr/bin/true", R_OK) == 0) {
        np_flow_layout_load("/usr/bin/true", &l);
        CHECK(l.status == -ENODATA && strstr(l.missing, "no debug info") != NULL);
    }
}

static void put_bytes(uint8_t *buf, size_t at, uint64_t v, size_t n) {
    memcpy(buf + at, &v, n); /* little-endian */
}

/* The BPF configuration from the real libnccl's DWARF, and a plan record
 * built by hand at the offsets of the notes (gdb/pahole, not our reader),
 * decoded back: communicator, kernel, grid, block, the tasks of both
 * lists, bit-fields, signed -1s. */
static void test_nccl_plan_decode(void) {
    const char *lib = "/usr/local/cuda/lib64/libnccl.so.2";
    if (access(lib, R_OK) != 0) {
        printf("skipped: no toolkit libnccl.so.2\n");
        return;
    }
    static struct np_nccl_layout l;
    np_nccl_layout_load(lib, &l);
    CHECK(l.status == 0 && l.comm_ok && l.plan_ok && l.missing[0] == '\0');
    CHECK(strcmp(l.version, "2.28.9") == 0 && l.version_code == 22809 && l.has_symtab &&
          l.dwarf_version == 4 && l.support == NP_NCCL_FULL && l.note[0] == '\0');
    CHECK(l.names.from_dwarf[NP_NCCL_FUNC] && l.names.count[NP_NCCL_FUNC] == 11);
    check_str(np_nccl_name(&l.names, NP_NCCL_FUNC, 10), "Gather", "2.28 func 10");
    const struct np_nccl_cfg *c = &l.cfg;
    CHECK(c->comm_lo == 0x1044c8 && c->comm_len == 20); /* commHash .. cudaDev */
    CHECK(c->comm_streams == 0x1054a0 && c->stream_off == 8);
    CHECK(c->plan_lo == 34 && c->plan_len == 76 + 4 - 34); /* isSymColl .. threadPerBlock */
    CHECK(c->lists[0].head == 152 && c->lists[0].next == 0 && c->lists[0].lo == 8 &&
          c->lists[0].len == 233 - 8);
    CHECK(c->lists[1].head == 136 && c->lists[1].next == 0 && c->lists[1].lo == 8 &&
          c->lists[1].len == 81 - 8);
    CHECK(c->plan_aux == 48 && c->aux_len == 24); /* ncclCeCollArgs func .. eltSize */
    /* the bcast and RMA lists came in 2.29 */
    CHECK(c->lists[2].head == NP_NCCL_NO_FIELD && c->lists[3].head == NP_NCCL_NO_FIELD &&
          c->lists[4].head == NP_NCCL_NO_FIELD);

    static struct np_nccl_plan_event e;
    memset(&e, 0, sizeof(e));
    e.hdr.type = NP_EV_NCCL_PLAN;
    e.comm = 0x7f0000001000;
    e.plan = 0x7f0000002000;
    e.stream = 0xabc0;
    put_bytes(e.comm_bytes, 0, 0xfedcba9876543210ull, 8); /* commHash @0x1044c8 */
    put_bytes(e.comm_bytes, 8, 3, 4);                     /* rank */
    put_bytes(e.comm_bytes, 12, 8, 4);                    /* nRanks */
    put_bytes(e.comm_bytes, 16, 5, 4);                    /* cudaDev */
    put_bytes(e.plan_bytes, 40 - 34, 0x7f00deadbeef, 8);  /* kernelFn */
    put_bytes(e.plan_bytes, 64 - 34, 0xf0f, 8);           /* channelMask: 8 channels */
    put_bytes(e.plan_bytes, 76 - 34, 640, 4);             /* threadPerBlock */
    e.n_tasks[0] = 2, e.total[0] = 2;
    e.n_tasks[1] = 1, e.total[1] = 5; /* more on the list than copied */
    /* coll 0: AllReduce 1000 bf16 max, RING SIMPLE, 4 channels */
    uint8_t *t = e.tasks[0];
    put_bytes(t, 8 - 8, 4, 4), put_bytes(t, 32 - 8, 1000, 8), put_bytes(t, 40 - 8, 0, 4);
    put_bytes(t, 44 - 8, 9, 4), put_bytes(t, 48 - 8, 2, 4);
    t[98 - 8] = 1, t[99 - 8] = 2, t[232 - 8] = 4;
    /* coll 1: Broadcast root 2 of 10 int8, algorithm undefined (-1) */
    t = e.tasks[1];
    put_bytes(t, 8 - 8, 0, 4), put_bytes(t, 32 - 8, 10, 8), put_bytes(t, 40 - 8, 2, 4);
    put_bytes(t, 44 - 8, 0, 4), t[98 - 8] = 0xff, t[99 - 8] = 0, t[232 - 8] = 1;
    /* p2p: Recv of 7 float64 from peer 6 */
    t = e.tasks[2];
    put_bytes(t, 8 - 8, 7, 4), put_bytes(t, 24 - 8, 7, 8), put_bytes(t, 32 - 8, 8, 4);
    put_bytes(t, 36 - 8, 6, 4), t[80 - 8] = 2;

    static struct np_nccl_plan p;
    size_t size = NP_NCCL_PLAN_FIXED_SIZE + 3 * NP_NCCL_TASK_BYTES;
    CHECK(np_nccl_plan_decode(&l, &e, size, &p) == 0);
    CHECK(p.id.known && p.id.hash == 0xfedcba9876543210ull && p.id.rank == 3 && p.id.nranks == 8 &&
          p.id.cuda_dev == 5);
    CHECK(p.has_stream && p.stream == 0xabc0);
    CHECK(p.has_kernel_fn && p.kernel_fn == 0x7f00deadbeef && p.grid == 8 && p.block == 640);
    CHECK(!p.symmetric && !p.copy_engine && p.nops == 3 && p.total_ops == 7);
    CHECK(p.ops[0].func == 4 && p.ops[0].count == 1000 && p.ops[0].datatype == 9 &&
          p.ops[0].redop == 2 && p.ops[0].root == -1 && p.ops[0].bytes == 2000 &&
          p.ops[0].algorithm == 1 && p.ops[0].protocol == 2 && p.ops[0].nchannels == 4);
    CHECK(p.ops[1].func == 0 && p.ops[1].root == 2 && p.ops[1].redop == -1 &&
          p.ops[1].algorithm == -1 && p.ops[1].bytes == 10);
    CHECK(p.ops[2].func == 7 && p.ops[2].peer == 6 && p.ops[2].count == 7 && p.ops[2].bytes == 56 &&
          p.ops[2].nchannels == 2 && p.ops[2].algorithm == -1);
    char types[64];
    np_nccl_plan_op_types(&p, "ncclDevKernel_Generic", types, sizeof(types));
    CHECK(strcmp(types, "AllReduce+Broadcast+Recv") == 0);
    struct np_nccl_plan none = {0};
    np_nccl_plan_op_types(&none, "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16", types,
                          sizeof(types));
    CHECK(strcmp(types, "AllReduce") == 0);
    np_nccl_plan_op_types(&none, "ncclDevKernel_Generic", types, sizeof(types));
    CHECK(types[0] == '\0');
    /* a record shorter than its task count says is refused */
    CHECK(np_nccl_plan_decode(&l, &e, size - 1, &p) == -EINVAL);
    /* errors: the communicator unread means no identity */
    e.flags = NP_NF_COMM_ERR | NP_NF_STREAM_ERR;
    CHECK(np_nccl_plan_decode(&l, &e, size, &p) == 0 && !p.id.known && !p.has_stream);
    /* a copy-engine plan: its one operation from ncclCeCollArgs */
    e.flags = 0;
    e.n_tasks[0] = e.n_tasks[1] = 0, e.total[0] = e.total[1] = 0;
    e.plan_bytes[35 - 34] = 1;          /* isCeColl */
    put_bytes(e.aux_bytes, 0, 2, 4);    /* func AllGather */
    put_bytes(e.aux_bytes, 8, 4096, 8); /* nElts */
    put_bytes(e.aux_bytes, 16, 2, 8);   /* eltSize */
    CHECK(np_nccl_plan_decode(&l, &e, NP_NCCL_PLAN_FIXED_SIZE, &p) == 0 && p.copy_engine &&
          p.nops == 1 && p.ops[0].func == 2 && p.ops[0].count == 4096 && p.ops[0].bytes == 8192);
    /* no per-task channel count (as before 2.27): a plan's only operation
     * gets the plan's, several get none */
    static struct np_nccl_layout old;
    old = l;
    old.f[NPF_COLL_NCHANNELS].offset = old.f[NPF_P2P_NCHANNELS].offset = -1;
    old.nchannels_from_plan = true;
    memset(&e, 0, sizeof(e));
    e.plan = 0x7f0000002000;
    put_bytes(e.plan_bytes, 64 - 34, 0x3, 8); /* channelMask: 2 channels */
    e.n_tasks[0] = e.total[0] = 1;
    put_bytes(e.tasks[0], 8 - 8, 3, 4), put_bytes(e.tasks[0], 32 - 8, 64, 8);
    CHECK(np_nccl_plan_decode(&old, &e, NP_NCCL_PLAN_FIXED_SIZE + NP_NCCL_TASK_BYTES, &p) == 0 &&
          p.nops == 1 && p.ops[0].nchannels == 2);
    e.n_tasks[1] = e.total[1] = 1; /* and a second operation */
    CHECK(np_nccl_plan_decode(&old, &e, NP_NCCL_PLAN_FIXED_SIZE + 2 * NP_NCCL_TASK_BYTES, &p) ==
              0 &&
          p.nops == 2 && p.ops[0].nchannels == -1 && p.ops[1].nchannels == -1);
    /* a stripped library: nothing to read, said so */
    struct np_nccl_layout stripped;
    np_nccl_layout_load("/usr/bin/true", &stripped);
    CHECK(stripped.status == -ENODATA && !stripped.comm_ok && !stripped.plan_ok &&
          strstr(stripped.missing, "stripped") && stripped.cfg.comm_len == 0 &&
          stripped.cfg.lists[0].head == NP_NCCL_NO_FIELD);
    CHECK(stripped.support == NP_NCCL_DEGRADED && !stripped.names.from_dwarf[NP_NCCL_FUNC]);
    check_str(np_nccl_name(&stripped.names, NP_NCCL_FUNC, 4), "AllReduce", "built-in func");
}

/* The libnccl of a runtime matrix entry (tools/fetch-runtimes.sh), NULL
 * when the cache does not have it. */
static const char *runtime_nccl(const char *version, char *path, size_t size) {
    const char *dir = getenv("NCCLPROBE_RUNTIMES_DIR"), *home = getenv("HOME");
    if (dir)
        snprintf(path, size, "%s/nccl-%s/lib/libnccl.so.2", dir, version);
    else if (getenv("XDG_CACHE_HOME"))
        snprintf(path, size, "%s/ncclprobe/runtimes/nccl-%s/lib/libnccl.so.2",
                 getenv("XDG_CACHE_HOME"), version);
    else
        snprintf(path, size, "%s/.cache/ncclprobe/runtimes/nccl-%s/lib/libnccl.so.2",
                 home ? home : "/root", version);
    return access(path, R_OK) == 0 ? path : NULL;
}

/* Other NCCL versions, when the runtime cache has them (the notes'
 * gdb offsets, docs/nccl.md): 2.29's AllGatherV is func 11 by its own
 * DWARF; 2.21 launches on ncclComm.tasks.streams and has no task lists. */
static void test_nccl_plan_versions(void) {
    static struct np_nccl_layout l;
    static struct np_nccl_plan_event e;
    static struct np_nccl_plan p;
    char path[512], types[64];
    if (runtime_nccl("2.29.7", path, sizeof(path))) {
        np_nccl_layout_load(path, &l);
        CHECK(l.support == NP_NCCL_FULL && strcmp(l.version, "2.29.7") == 0);
        CHECK(l.cfg.lists[0].head == 216 && l.cfg.lists[2].head == 168 &&
              l.cfg.lists[3].head == 184 && l.cfg.plan_aux == 56);
        memset(&e, 0, sizeof(e));
        e.plan = 0x7f0000002000;
        e.n_tasks[0] = e.total[0] = 1;
        put_bytes(e.tasks[0], 8 - 8, 11, 4), put_bytes(e.tasks[0], 32 - 8, 5, 8);
        CHECK(np_nccl_plan_decode(&l, &e, NP_NCCL_PLAN_FIXED_SIZE + NP_NCCL_TASK_BYTES, &p) == 0);
        np_nccl_plan_op_types(&p, "ncclDevKernel_Generic", types, sizeof(types));
        check_str(types, "AllGatherV", "2.29 func 11");
    } else {
        printf("skipped: no nccl-2.29.7 in the runtime cache\n");
    }
    if (runtime_nccl("2.21.5", path, sizeof(path))) {
        np_nccl_layout_load(path, &l);
        CHECK(l.support == NP_NCCL_DEGRADED && l.comm_ok && l.plan_ok);
        CHECK(l.cfg.comm_streams == 0x3cc8 && l.cfg.stream_off == 8); /* tasks.streams */
        CHECK(l.missing_field[NPF_COLL_HEAD] && !l.missing_field[NPF_COMM_STREAMS] &&
              strstr(l.missing, "before 2.23"));
    }
}

/* Communicators by (process, pointer); a pointer reused by a communicator
 * with another identity is a new entry, and an API call naming it later
 * counts there. */
static void test_nccl_comms(void) {
    struct np_nccl_comms c;
    np_nccl_comms_init(&c);
    struct np_nccl_comm_id a = {.known = true, .hash = 1, .rank = 0, .nranks = 2};
    struct np_nccl_comm_id b = {.known = true, .hash = 2, .rank = 1, .nranks = 4};
    struct np_nccl_comm_stats *s1 = np_nccl_comms_get(&c, 10, 0x1000, NULL);
    CHECK(s1 && !s1->id.known);
    s1->launches++;
    CHECK(np_nccl_comms_get(&c, 10, 0x1000, &a) == &c.items[0] && c.items[0].id.hash == 1);
    CHECK(np_nccl_comms_get(&c, 11, 0x1000, &a) == &c.items[1]); /* another process */
    struct np_nccl_comm_stats *s3 = np_nccl_comms_get(&c, 10, 0x1000, &b);
    CHECK(c.count == 3 && s3 == &c.items[2] && s3->id.hash == 2 && s3->launches == 0);
    CHECK(np_nccl_comms_get(&c, 10, 0x1000, NULL) == &c.items[2]);
    /* totals by API operation, whatever ncclFunc_t says: ncclAllReduceConfig is an AllReduce */
    int slot = np_nccl_api_slot("AllReduce");
    CHECK(slot >= 0 && strcmp(np_nccl_api_slot_name(slot), "AllReduce") == 0);
    CHECK(np_nccl_api_slot(np_probe_def_by_symbol("ncclAllReduceConfig")->api) == slot);
    CHECK(np_nccl_api_slot("GroupEnd") == -1 && np_nccl_api_slot("Nothing") == -1);
    CHECK(np_nccl_api_slot("Scatter") >= 0 && np_nccl_api_slot_name(NP_NCCL_API_SLOTS) == NULL);
    np_nccl_comms_free(&c);
}

/* ---- CUDA graphs (correlate/graphs.c) ------------------------------------------- */

static struct np_graph_event graph_call(enum np_graph_op op, uint64_t a0, uint64_t a1, uint64_t out,
                                        int64_t ret) {
    struct np_graph_event e = {.op = op, .out = out, .ret = ret};
    e.hdr.tid = 7;
    e.args[0] = a0, e.args[1] = a1;
    return e;
}

static const struct np_probe_def *graph_def(const char *symbol) {
    const struct np_probe_def *d = np_probe_def_by_symbol(symbol);
    CHECK(d != NULL);
    return d;
}

static void capture_two(struct np_graphs *g, uint64_t stream, uint64_t graph, const char *k1,
                        const char *k2) {
    const struct np_probe_def *begin = graph_def("cuStreamBeginCapture_v2");
    const struct np_probe_def *end = graph_def("cuStreamEndCapture");
    const struct np_probe_def *launch = graph_def("cuLaunchKernel");
    struct np_graph_event e = graph_call(NP_GOP_BEGIN, stream, 0, 0, 0);
    np_graphs_on_call(g, begin, &e);
    struct np_stack_texts t = {0};
    np_str_init(&t.folded), np_str_init(&t.detailed), np_str_init(&t.locations);
    np_str_append(&t.folded, "main;capture;cuLaunchKernel");
    np_str_append(&t.detailed, "main;capture;cuLaunchKernel");
    np_str_append(&t.locations, "{},{},{}");
    uint64_t c = np_graphs_capture_of(g, stream, 7, launch);
    CHECK(c != 0);
    CHECK(np_graphs_add_node(g, c, k1, &t) == 0);
    CHECK(np_graphs_add_node(g, c, k2, &t) == 0);
    np_str_free(&t.folded), np_str_free(&t.detailed), np_str_free(&t.locations);
    e = graph_call(NP_GOP_END, stream, 0, graph, 0);
    np_graphs_on_call(g, end, &e);
    CHECK(np_graphs_capture_of(g, stream, 7, launch) == 0);
}

static void test_graphs(void) {
    struct np_graphs g;
    np_graphs_init(&g);
    const struct np_probe_def *rt_inst = graph_def("cudaGraphInstantiate");
    const struct np_probe_def *drv_inst = graph_def("cuGraphInstantiateWithFlags");
    const struct np_probe_def *destroy = graph_def("cuGraphDestroy");
    const struct np_probe_def *exec_destroy = graph_def("cuGraphExecDestroy");
    const struct np_probe_def *update = graph_def("cuGraphExecUpdate_v2");
    /* capture, then the runtime's instantiate calling the driver's (both
     * probed), destroy: nothing stays, three times over */
    for (int round = 0; round < 3; round++) {
        capture_two(&g, 0x100, 0xa0, "k1", "k2");
        struct np_graph_event e = graph_call(NP_GOP_INSTANTIATE, 0, 0xa0, 0xe0, 0);
        np_graphs_on_call(&g, drv_inst, &e);
        np_graphs_on_call(&g, rt_inst, &e);
        e = graph_call(NP_GOP_EXEC_UPDATE, 0xe0, 0xa0, 0, 0);
        np_graphs_on_call(&g, update, &e); /* the driver's and the runtime's */
        np_graphs_on_call(&g, update, &e);
        const char *why = NULL;
        struct np_graph_nodes *n = np_graphs_replay(&g, 0xe0, &why);
        CHECK(n && n->n == 2 && strcmp(n->v[1].kernel, "k2") == 0);
        np_graph_nodes_put(n);
        e = graph_call(NP_GOP_GRAPH_DESTROY, 0xa0, 0, 0, 0);
        np_graphs_on_call(&g, destroy, &e);
        e = graph_call(NP_GOP_EXEC_DESTROY, 0xe0, 0, 0, 0);
        np_graphs_on_call(&g, exec_destroy, &e);
        CHECK(g.nodes_live == 0 && g.lists.count == 0 && g.stack_bytes == 0);
    }
    /* a new graph at a destroyed one's handle value: only its own nodes */
    capture_two(&g, 0x100, 0xa0, "new1", "new2");
    struct np_graph_event e = graph_call(NP_GOP_INSTANTIATE, 0, 0xa0, 0xe0, 0);
    np_graphs_on_call(&g, drv_inst, &e);
    const char *why = NULL;
    struct np_graph_nodes *n = np_graphs_replay(&g, 0xe0, &why);
    CHECK(n && n->n == 2 && strcmp(n->v[0].kernel, "new1") == 0);
    /* a list an output still holds outlives the process's tables */
    np_graphs_free(&g);
    CHECK(strcmp(n->v[0].stack->folded, "main;capture;cuLaunchKernel") == 0);
    np_graph_nodes_put(n);
    /* an end that failed otherwise (wrong thread) ends nothing; an
     * invalidated capture ends, its graph not kept */
    np_graphs_init(&g);
    const struct np_probe_def *begin = graph_def("cuStreamBeginCapture_v2");
    const struct np_probe_def *end = graph_def("cuStreamEndCapture");
    const struct np_probe_def *launch = graph_def("cuLaunchKernel");
    e = graph_call(NP_GOP_BEGIN, 0x200, 0, 0, 0);
    np_graphs_on_call(&g, begin, &e);
    e = graph_call(NP_GOP_END, 0x200, 0, 0, 904 /* cudaErrorStreamCaptureWrongThread */);
    np_graphs_on_call(&g, end, &e);
    CHECK(np_graphs_capture_of(&g, 0x200, 7, launch) != 0);
    e = graph_call(NP_GOP_END, 0x200, 0, 0xb0, 901);
    np_graphs_on_call(&g, end, &e);
    CHECK(np_graphs_capture_of(&g, 0x200, 7, launch) == 0 && g.graphs.count == 0);
    CHECK(g.stats.captures_failed == 1);
    np_graphs_free(&g);
}

/* A kernel record of a graph replay, as the CUPTI library sends it. */
static struct np_gpu_record *replay_record(const char *name, uint64_t node_id, uint64_t start) {
    uint32_t len = (uint32_t)strlen(name);
    struct np_gpu_record *r = calloc(1, np_gpu_record_size(len));
    CHECK(r != NULL);
    r->size = (uint16_t)np_gpu_record_size(len);
    r->kind = NP_GPU_KERNEL;
    r->graph_id = 2;
    r->graph_node_id = node_id;
    r->start_ns = start, r->end_ns = start + 5;
    r->name_len = (uint16_t)len;
    memcpy(r->name, name, len);
    return r;
}

static void set_texts(struct np_stack_texts *t, const char *folded) {
    np_str_reset(&t->folded), np_str_reset(&t->detailed), np_str_reset(&t->locations);
    np_str_append(&t->folded, folded);
    np_str_append(&t->detailed, folded);
    np_str_append(&t->locations, "{},{},{}");
}

static struct np_wire_graph_node cupti_node(uint32_t event, uint64_t id, uint64_t original,
                                            uint32_t corr) {
    struct np_wire_graph_node e = {.node_id = id,
                                   .original_node_id = original,
                                   .correlation_id = corr,
                                   .graph_id = 1,
                                   .event = event};
    return e;
}

/* CUPTI's node identity: captured launches' markers, nodes created and
 * cloned, replayed records tied by node id, else by kernel order. */
static void test_graph_identity(void) {
    struct np_graphs g;
    np_graphs_init(&g);
    const struct np_probe_def *begin = graph_def("cuStreamBeginCapture_v2");
    const struct np_probe_def *end = graph_def("cuStreamEndCapture");
    const struct np_probe_def *launch = graph_def("cuLaunchKernel");
    const struct np_probe_def *inst = graph_def("cuGraphInstantiateWithFlags");
    struct np_stack_texts t = {0};
    np_str_init(&t.folded), np_str_init(&t.detailed), np_str_init(&t.locations);
    struct np_graph_event e = graph_call(NP_GOP_BEGIN, 0x100, 0, 0, 0);
    np_graphs_on_call(&g, begin, &e);
    uint64_t c = np_graphs_capture_of(&g, 0x100, 7, launch);
    /* two gemm nodes from two lines: a runtime call around a driver call, then a driver call */
    set_texts(&t, "main;capture_mlp;cudaLaunchKernel");
    np_graphs_thread_launch(&g, 7, 0);
    CHECK(np_graphs_add_node(&g, c, "gemm", &t) == 0);
    np_graphs_thread_launch(&g, 7, c);
    CHECK(np_graphs_marker(&g, 7, 11, 2) && np_graphs_marker(&g, 7, 12, 1));
    CHECK(!np_graphs_marker(&g, 7, 13, 1)); /* a second driver call: not this launch's */
    CHECK(!np_graphs_marker(&g, 8, 14, 1)); /* another thread */
    set_texts(&t, "main;capture_proj;cuLaunchKernel");
    np_graphs_thread_launch(&g, 7, 0);
    CHECK(np_graphs_add_node(&g, c, "gemm", &t) == 0);
    np_graphs_thread_launch(&g, 7, c);
    CHECK(np_graphs_marker(&g, 7, 21, 1));
    set_texts(&t, "main;capture_proj;cuLaunchKernel");
    np_graphs_thread_launch(&g, 7, 0);
    CHECK(np_graphs_add_node(&g, c, "ns::kern", &t) == 0);
    np_graphs_thread_launch(&g, 7, c);
    np_graphs_thread_launch(&g, 7, 0); /* an eager launch: its marker is the join's */
    CHECK(!np_graphs_marker(&g, 7, 31, 1));
    e = graph_call(NP_GOP_END, 0x100, 0, 0xa0, 0);
    np_graphs_on_call(&g, end, &e);
    e = graph_call(NP_GOP_INSTANTIATE, 0, 0xa0, 0xe0, 0);
    np_graphs_on_call(&g, inst, &e);
    struct np_wire_graph_node nodes[] = {
        cupti_node(NP_GRAPH_NODE_CREATED, 101, 0, 12), /* the driver call's id names it */
        cupti_node(NP_GRAPH_NODE_CREATED, 102, 0, 21),
        cupti_node(NP_GRAPH_NODE_CREATED, 103, 0, 0), /* added explicitly: not kept */
        cupti_node(NP_GRAPH_NODE_CLONED, 1001, 101, 0),
        cupti_node(NP_GRAPH_NODE_CLONED, 1002, 102, 0),
        cupti_node(NP_GRAPH_NODE_CLONED, 2001, 1001, 0), /* a clone of a clone */
    };
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
        np_graphs_cupti_node(&g, &nodes[i]);
    CHECK(g.stats.cupti_nodes == 5);
    const struct np_graph_node *a = np_graphs_node_of(&g, 1001), *b = np_graphs_node_of(&g, 1002);
    CHECK(a && strcmp(a->stack->folded, "main;capture_mlp;cudaLaunchKernel") == 0);
    CHECK(b && strcmp(b->stack->folded, "main;capture_proj;cuLaunchKernel") == 0);
    CHECK(np_graphs_node_of(&g, 2001) == a && np_graphs_node_of(&g, 103) == NULL &&
          np_graphs_node_of(&g, 999) == NULL);

    const char *why = NULL;
    struct np_graph_nodes *list = np_graphs_replay(&g, 0xe0, &why);
    set_texts(&t, "main;replay_step;cuGraphLaunch");
    struct np_graph_replay *r = np_graph_replay_new(list, &t);
    np_graph_nodes_put(list);
    CHECK(r != NULL);
    /* proj's gemm ran first; a record of a node never announced; the
     * mangled name of ns::kern */
    struct np_gpu_record *recs[] = {
        replay_record("gemm", 1002, 10), replay_record("gemm", 1001, 20),
        replay_record("_ZN2ns4kernEv", 1003, 30), replay_record("other", 1004, 40)};
    const struct np_graph_node *node[4];
    const char *by[4];
    np_graphs_attribute(&g, r, recs, 4, node, by);
    CHECK(node[0] == b && node[1] == a && strcmp(by[0], NP_CAPTURE_BY_NODE) == 0);
    CHECK(node[2] && strcmp(node[2]->kernel, "ns::kern") == 0 &&
          strcmp(by[2], NP_CAPTURE_BY_ORDER) == 0);
    CHECK(node[3] == NULL && by[3] == NULL);
    CHECK(g.stats.records_by_node == 2 && g.stats.records_by_order == 1 &&
          g.stats.records_unattributed == 1);
    /* one tied by id, one not: the other gemm is the only one left for it */
    struct np_gpu_record *mixed[] = {replay_record("gemm", 1001, 5),
                                     replay_record("gemm", 4242, 1)};
    np_graphs_attribute(&g, r, mixed, 2, node, by);
    CHECK(node[0] == a && node[1] == b && strcmp(by[1], NP_CAPTURE_BY_ORDER) == 0);
    free(mixed[0]), free(mixed[1]);
    /* without node ids (the process gone): kernel order, as they started */
    np_graphs_attribute(NULL, r, recs, 4, node, by);
    CHECK(node[0] == &r->nodes->v[0] && node[1] == &r->nodes->v[1] &&
          strcmp(by[1], NP_CAPTURE_BY_ORDER) == 0 && node[3] == NULL);
    for (size_t i = 0; i < 4; i++)
        free(recs[i]);
    /* destroyed: the ids no longer name anything */
    np_graph_replay_free(r);
    e = graph_call(NP_GOP_GRAPH_DESTROY, 0xa0, 0, 0, 0);
    np_graphs_on_call(&g, graph_def("cuGraphDestroy"), &e);
    e = graph_call(NP_GOP_EXEC_DESTROY, 0xe0, 0, 0, 0);
    np_graphs_on_call(&g, graph_def("cuGraphExecDestroy"), &e);
    CHECK(np_graphs_node_of(&g, 1001) == NULL && g.lists.count == 0);
    np_str_free(&t.folded), np_str_free(&t.detailed), np_str_free(&t.locations);
    np_graphs_free(&g);
}

/* The reader's backlog: records come out in order and whole, each scanned
 * once before it can be popped, across chunks; past the budget a record is
 * refused (a forced one kept), and chunks are given back as it empties. */
static void test_backlog(void) {
    struct np_backlog b;
    np_backlog_init(&b, 12u << 20); /* three 4 MiB chunks, less their headers */
    static uint8_t rec[70000];
    size_t size;
    uint32_t *flags, f;
    CHECK(np_backlog_peek(&b, &size, &f) == NULL && np_backlog_scan(&b, &size, &flags) == NULL);
    /* sizes that are not multiples of 8, one bigger than a page */
    int pushed = 0, refused = 0;
    for (int i = 0; i < 4000 && !refused; i++) {
        size_t n = 1 + (size_t)(i * 7919) % 6000;
        memset(rec, i & 0xff, n);
        memcpy(rec, &i, sizeof(i));
        int err = np_backlog_push(&b, rec, n < sizeof(i) ? sizeof(i) : n, false);
        if (err == 0) {
            pushed++;
        } else {
            CHECK(err == -ENOBUFS);
            refused++;
        }
    }
    CHECK(pushed > 2000 && refused > 0 && np_backlog_waiting(&b) == (uint64_t)pushed);
    CHECK(b.bytes <= 12u << 20 && b.peak_records == (uint64_t)pushed);
    CHECK(np_backlog_push(&b, rec, 100, true) == 0); /* forced: kept over the budget */
    /* nothing is popped before it is scanned */
    CHECK(np_backlog_peek(&b, &size, &f) == NULL);
    int scanned = 0;
    void *r;
    while ((r = np_backlog_scan(&b, &size, &flags))) {
        if (scanned % 2)
            *flags |= NP_BACKLOG_DONE;
        scanned++;
    }
    CHECK(scanned == pushed + 1);
    bool in_order = true, whole = true, flagged = true;
    for (int i = 0; i < pushed; i++) {
        const uint8_t *p = np_backlog_peek(&b, &size, &f);
        int id;
        if (!p) {
            in_order = false;
            break;
        }
        memcpy(&id, p, sizeof(id));
        in_order &= id == i;
        whole &=
            size == (1 + (size_t)(i * 7919) % 6000 < sizeof(id) ? sizeof(id)
                                                                : 1 + (size_t)(i * 7919) % 6000) &&
            (size <= sizeof(id) || p[size - 1] == (i & 0xff));
        flagged &= ((f & NP_BACKLOG_DONE) != 0) == (i % 2 == 1);
        np_backlog_pop(&b);
    }
    CHECK(in_order && whole && flagged);
    CHECK(np_backlog_peek(&b, &size, &f) != NULL && size == 100);
    np_backlog_pop(&b);
    CHECK(np_backlog_waiting(&b) == 0 && np_backlog_peek(&b, &size, &f) == NULL);
    CHECK(b.bytes <= (5u << 20));           /* emptied chunks went back: the tail one stays */
    CHECK(b.nspare > 0 && b.unmapped == 0); /* kept for the next burst */
    /* refill after emptying: still in order */
    for (int i = 0; i < 3; i++)
        CHECK(np_backlog_push(&b, &i, sizeof(i), false) == 0);
    for (int i = 0; i < 3; i++) {
        CHECK(np_backlog_scan(&b, &size, &flags) != NULL);
    }
    for (int i = 0; i < 3; i++) {
        const int *p = np_backlog_peek(&b, &size, &f);
        CHECK(p && *p == i);
        np_backlog_pop(&b);
    }
    /* the same burst again maps nothing new: the spares take it */
    uint64_t mapped = b.mapped;
    pushed = 0;
    while (np_backlog_push(&b, rec, 5000, false) == 0)
        pushed++;
    CHECK(pushed > 1500 && b.mapped == mapped && b.nspare == 0);
    while (np_backlog_scan(&b, &size, &flags)) {
    }
    while (np_backlog_peek(&b, &size, &f))
        np_backlog_pop(&b);
    np_backlog_count_drop(&b, true, 5);
    np_backlog_count_drop(&b, false, 0);
    CHECK(b.dropped_launches == 1 && b.dropped_other == 1 && b.dropped_by_probe_len > 5 &&
          b.dropped_by_probe[5] == 1);
    np_backlog_free(&b);
}

/* A record scanned and taken back (a barrier): nothing after it can be
 * popped, it comes again at the next scan, the records after it follow -
 * also when it is the first of a chunk. */
static void test_backlog_unscan(void) {
    struct np_backlog b;
    np_backlog_init(&b, 0);
    static uint8_t rec[1u << 20];
    size_t size;
    uint32_t *flags, f;
    int n = 0;
    for (; n < 12; n++) { /* a megabyte each: the fifth starts the second 4 MiB chunk */
        memcpy(rec, &n, sizeof(n));
        CHECK(np_backlog_push(&b, rec, sizeof(rec) - 64, false) == 0);
    }
    for (int barrier = 2; barrier <= 4; barrier += 2) { /* inside a chunk, then at its start */
        int *r;
        while ((r = np_backlog_scan(&b, &size, &flags)) && *r != barrier) {
        }
        CHECK(r && *r == barrier && np_backlog_scanned_waiting(&b) > 1);
        np_backlog_unscan(&b, size);
        int popped = 0;
        for (const int *p; (p = np_backlog_peek(&b, &size, &f)); popped++)
            np_backlog_pop(&b);
        CHECK(popped == (barrier == 2 ? 2 : 1) && np_backlog_scanned_waiting(&b) == 0);
        r = np_backlog_scan(&b, &size, &flags);
        CHECK(r && *r == barrier);
        const int *p = np_backlog_peek(&b, &size, &f);
        CHECK(p && *p == barrier);
        np_backlog_pop(&b);
    }
    int next = 5, in_order = 1;
    for (int *r; (r = np_backlog_scan(&b, &size, &flags)); next++)
        in_order &= *r == next;
    CHECK(in_order && next == n);
    np_backlog_free(&b);
}

/* Spare chunks: a burst's are kept while the last few seconds needed them,
 * then all but a few are given back (the window moved by hand here). */
static void test_backlog_spares(void) {
    struct np_backlog b;
    np_backlog_init(&b, 64u << 20); /* 4 MiB chunks */
    static uint8_t rec[4096];
    size_t size;
    uint32_t *flags, f;
    while (np_backlog_push(&b, rec, sizeof(rec), false) == 0) {
    }
    uint64_t burst = b.nchunks;
    CHECK(burst >= 14 && b.mapped == burst);
    while (np_backlog_scan(&b, &size, &flags)) {
    }
    while (np_backlog_peek(&b, &size, &f))
        np_backlog_pop(&b);
    CHECK(b.nchunks == 1 && b.nspare == burst - 1 && b.unmapped == 0);
    np_backlog_trim(&b); /* within the window: nothing goes */
    CHECK(b.nspare == burst - 1);
    b.window_ns -= 6000000000ull; /* the burst's window ended: it may come again */
    np_backlog_trim(&b);
    CHECK(b.nspare == burst - 1 && b.unmapped == 0);
    b.window_ns -= 6000000000ull; /* a quiet window: all but 2 go */
    np_backlog_trim(&b);
    CHECK(b.nspare == 2 && b.unmapped == burst - 1 - 2);
    np_backlog_free(&b);
}

/* The backlog with its producer on another thread, as the drain thread is:
 * every record comes out once, in order and whole, while the producer
 * copies without the lock and moves from chunk to chunk, and waits for
 * room when the budget is spent. */
#define BACKLOG_THREADED_RECORDS 200000
#define BACKLOG_THREADED_MAX 5000

/* Record i's size: 8 bytes to BACKLOG_THREADED_MAX, scattered. */
static size_t threaded_record_size(uint32_t i) {
    return 8 + (size_t)(i * 2654435761u) % (BACKLOG_THREADED_MAX - 8);
}

static void *backlog_producer(void *arg) {
    struct np_backlog *b = arg;
    static uint8_t rec[BACKLOG_THREADED_MAX];
    for (uint32_t i = 0; i < BACKLOG_THREADED_RECORDS; i++) {
        size_t n = threaded_record_size(i);
        memset(rec, (int)(i & 0xff), n);
        memcpy(rec, &i, sizeof(i));
        while (np_backlog_push(b, rec, n, false) == -ENOBUFS) /* full: the consumer works */
            sched_yield();
    }
    return NULL;
}

static void test_backlog_threaded(void) {
    struct np_backlog b;
    np_backlog_init(&b, 16u << 20);
    pthread_t producer;
    CHECK(pthread_create(&producer, NULL, backlog_producer, &b) == 0);
    uint32_t next = 0;
    bool in_order = true, whole = true;
    time_t give_up = time(NULL) + 60; /* a record that never comes fails, not hangs */
    while (next < BACKLOG_THREADED_RECORDS && in_order && whole && time(NULL) < give_up) {
        size_t size;
        uint32_t *flags, f;
        while (np_backlog_scan(&b, &size, &flags)) {
        }
        const uint8_t *p;
        while ((p = np_backlog_peek(&b, &size, &f))) {
            uint32_t id;
            memcpy(&id, p, sizeof(id));
            size_t n = threaded_record_size(next);
            in_order &= id == next;
            whole &= size == n && p[n - 1] == (uint8_t)(next & 0xff);
            np_backlog_pop(&b);
            next++;
        }
    }
    CHECK(in_order && whole && next == BACKLOG_THREADED_RECORDS);
    if (next < BACKLOG_THREADED_RECORDS) { /* the producer may wait for room forever */
        fprintf(stderr, "test_backlog_threaded: record %u never came\n", next);
        exit(1);
    }
    pthread_join(producer, NULL);
    CHECK(np_backlog_waiting(&b) == 0 && b.dropped_launches == 0);
    np_backlog_free(&b);
}

/* Looking ahead of the head: every record scanned and not popped, in order,
 * across chunks, and nothing past the scan. */
static void test_backlog_ahead(void) {
    struct np_backlog b;
    np_backlog_init(&b, 1u << 20); /* 128 KiB chunks */
    static uint8_t rec[3000];
    size_t size;
    uint32_t *flags, f;
    for (uint32_t i = 0; i < 500; i++) { /* ~1.5 MiB: many chunks */
        memcpy(rec, &i, sizeof(i));
        CHECK(np_backlog_push(&b, rec, 1000 + i % 2000, true) == 0);
    }
    for (int i = 0; i < 400; i++) /* the last 100 are not scanned */
        CHECK(np_backlog_scan(&b, &size, &flags) != NULL);
    for (int i = 0; i < 150; i++) {
        np_backlog_peek(&b, &size, &f);
        np_backlog_pop(&b);
    }
    struct np_backlog_cursor cur;
    np_backlog_ahead_start(&b, &cur);
    uint32_t want = 150;
    const uint8_t *p;
    bool in_order = true;
    while ((p = np_backlog_ahead(&b, &cur, &size, &f))) {
        uint32_t id;
        memcpy(&id, p, sizeof(id));
        in_order &= id == want && size == 1000 + want % 2000;
        want++;
    }
    CHECK(in_order && want == 400 && cur.n == 250);
    /* what the cursor saw is what is popped, in the same place */
    np_backlog_ahead_start(&b, &cur);
    const void *ahead = np_backlog_ahead(&b, &cur, &size, &f);
    CHECK(ahead == np_backlog_peek(&b, &size, &f));
    np_backlog_free(&b);
}

/* Worker threads: a key's jobs run one after another on one thread, in the
 * order given; waiting for a job sees its effect. */
#define WORKER_KEYS 7
#define WORKER_JOBS 6000

struct test_job {
    struct np_job job;
    uint32_t key, seq;
    uint32_t *last_seq; /* per key: the seq of the key's last job that ran */
    pthread_t *thread;  /* per key: the thread that ran it */
    bool *ok;           /* per key */
    uint32_t result;
};

static void run_test_job(struct np_job *job) {
    struct test_job *t = np_container_of(job, struct test_job, job);
    uint32_t k = t->key;
    if (t->last_seq[k] != UINT32_MAX &&
        (t->last_seq[k] >= t->seq || !pthread_equal(t->thread[k], pthread_self())))
        t->ok[k] = false;
    t->thread[k] = pthread_self();
    t->last_seq[k] = t->seq;
    t->result = t->seq * 3 + 1;
}

static void test_workers(void) {
    struct np_workers *w;
    CHECK(np_workers_start(0, &w) == -EINVAL &&
          np_workers_start(NP_WORKERS_MAX + 1, &w) == -EINVAL);
    CHECK(np_workers_start(3, &w) == 0 && np_workers_count(w) == 3);
    static struct test_job jobs[WORKER_JOBS];
    uint32_t last_seq[WORKER_KEYS];
    pthread_t thread[WORKER_KEYS];
    bool ok[WORKER_KEYS];
    for (int k = 0; k < WORKER_KEYS; k++)
        last_seq[k] = UINT32_MAX, ok[k] = true;
    bool seen = true;
    for (uint32_t i = 0; i < WORKER_JOBS; i++) {
        jobs[i] = (struct test_job){.job.run = run_test_job,
                                    .key = (i * 2654435761u) % WORKER_KEYS,
                                    .seq = i,
                                    .last_seq = last_seq,
                                    .thread = thread,
                                    .ok = ok};
        np_workers_submit(w, jobs[i].key, &jobs[i].job);
        if (i % 7 == 3) { /* now and then wait for one given a little earlier */
            struct test_job *j = &jobs[i - 3];
            np_workers_wait(w, j->key, &j->job);
            seen &= j->result == j->seq * 3 + 1;
        }
    }
    np_workers_wait_all(w);
    bool all_ran = true, in_order = true;
    uint64_t ran = 0;
    for (uint32_t i = 0; i < WORKER_JOBS; i++)
        all_ran &= jobs[i].job.done && jobs[i].result == i * 3 + 1;
    for (int k = 0; k < WORKER_KEYS; k++)
        in_order &= ok[k];
    for (unsigned i = 0; i < 3; i++)
        ran += np_workers_jobs_run(w, i);
    CHECK(seen && all_ran && in_order && ran == WORKER_JOBS);
    np_workers_stop(w);
}

int main(void) {
    test_demangle();
    test_backlog();
    test_backlog_unscan();
    test_backlog_spares();
    test_backlog_threaded();
    test_backlog_ahead();
    test_workers();
    test_thunk();
    test_maps();
    test_sanitize();
    test_json();
    test_str();
    test_hashmap();
    test_hashmap_delete();
    test_gpu_join();
    test_gpu_join_library_started();
    test_graphs();
    test_graph_identity();
    test_nccl_dwarf_layout();
    test_nccl_flow_layout();
    test_nccl_plan_decode();
    test_nccl_plan_versions();
    test_nccl_names();
    test_nccl_comms();
    test_decode();
    test_writers();
    test_parse();
    test_py_short_filename();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
