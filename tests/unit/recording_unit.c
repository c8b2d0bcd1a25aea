/* recording_unit.c - unit tests for the recording reader (src/recording/)
 * on small directories written here: exact integers, well-formed and
 * malformed lines read strictly and leniently, stacks by id with their
 * locations, GPU leaves, graph replays' capture keys, nccl.jsonl,
 * summary.json / window.json, folded lines and frame texts. Prints "recording_unit: N passed, N
 * failed" and exits non-zero on any failure. The malformed lines it feeds are said on stderr:
 * expected. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ncclprobe/recording.h"
#include "recording/folded.h"
#include "recording/frames.h"
#include "recording/recording.h"

static char dir[] = "/tmp/recording_unit.XXXXXX";

static void write_file(const char *name, const char *text) {
    char *path = np_rec_path(dir, name);
    FILE *f = path ? fopen(path, "w") : NULL;
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    free(path);
}

static void remove_file(const char *name) {
    char *path = np_rec_path(dir, name);
    if (path)
        unlink(path);
    free(path);
}

#define STACKS                                                                                     \
    "{\"stack_id\":1,\"frames\":[\"main\",\"step (a.py:3)\",\"cudaLaunchKernel\"],"                \
    "\"locations\":[{\"module\":\"/bin/x\",\"build_id\":\"ab\",\"offset\":\"0x1f\","               \
    "\"file\":\"x.c\",\"line\":7},{},{\"module\":5}]}\n"                                           \
    "\n"                                                                                           \
    "{\"stack_id\":2,\"frames\":[\"main\",\"ncclLaunchKernel\",\"[NCCL]Send+Recv\"]}\n"

#define LAUNCH_OK                                                                                  \
    "{\"ts_ns\":18446744073709551615,\"pid\":7,\"tid\":8,\"comm\":\"c\",\"kernel\":\"k\","         \
    "\"stack_id\":1,\"gpu_status\":\"matched\",\"gpu\":[{\"type\":\"kernel\",\"name\":\"g\","      \
    "\"start_ns\":10,\"end_ns\":4,\"stream\":3},{\"type\":\"memcpy\",\"copy_kind\":\"HtoD\","      \
    "\"start_ns\":20,\"end_ns\":25}]}\n"
#define LAUNCH_NCCL                                                                                \
    "{\"ts_ns\":2,\"pid\":7,\"tid\":8,\"kernel\":\"n\",\"stack_id\":2,\"nested\":false,"           \
    "\"nccl\":{\"comm_hash\":null,\"ops\":[{\"op\":\"Send\"},{\"count\":1},{\"op\":\"Recv\"}]}}\n"
#define LAUNCH_BAD "{\"ts_ns\":3,\"pid\":7,\"tid\":8,\"kernel\":\"k\",\"stack_id\":1,\"gpu\":{}}\n"

static void test_exact_integers(void) {
    const char *text = "{\"a\":9007199254740993,\"b\":1.5,\"c\":\"x\",\"d\":null,\"e\":-1}";
    cJSON *o = np_json_parse_exact(text, strlen(text));
    uint64_t v = 0;
    const char *digits = NULL, *s = NULL;
    CHECK(o != NULL);
    CHECK(np_json_u64(o, "a", &v) == 0 && v == 9007199254740993ull);
    CHECK(np_json_long_integer(cJSON_GetObjectItem(o, "a"), &digits) &&
          strcmp(digits, "9007199254740993") == 0);
    CHECK(np_json_u64(o, "b", &v) == -EINVAL);
    CHECK(np_json_u64(o, "e", &v) == -EINVAL);
    CHECK(np_json_u64(o, "d", &v) == -ENOENT);
    CHECK(np_json_str(o, "a", &s) == -EINVAL); /* a long integer is not a string */
    CHECK(np_json_str(o, "c", &s) == 0 && strcmp(s, "x") == 0);
    cJSON_Delete(o);
}

static void test_stacks(void) {
    struct np_recording rec;
    size_t index = 99;
    CHECK(np_recording_open(&rec, dir, NP_REC_STRICT) == 0);
    CHECK(np_recording_stacks(&rec) == -ENOENT);
    write_file(NP_REC_STACKS_JSONL, STACKS);
    CHECK(np_recording_stacks(&rec) == 0 && rec.nstacks == 2);
    const struct np_rec_stack *s = np_recording_stack(&rec, 1, &index);
    CHECK(s && index == 0 && s->nframes == 3 && !s->nccl_frame);
    CHECK(s && s->locations && strcmp(s->locations[0].module, "/bin/x") == 0 &&
          s->locations[0].offset == 0x1f && s->locations[0].has_offset &&
          s->locations[0].line == 7 && !s->locations[1].module && !s->locations[2].module);
    const struct np_rec_stack *t = np_recording_stack(&rec, 2, NULL);
    CHECK(t && t->nccl_frame && strcmp(t->nccl_frame, "[NCCL]Send+Recv") == 0 && !t->locations);
    CHECK(s && t && s->frames[0] == t->frames[0]); /* interned */
    CHECK(!np_recording_stack(&rec, 3, NULL));
    np_recording_close(&rec);

    CHECK(np_recording_open(&rec, dir, NP_REC_STRICT) == 0);
    write_file(NP_REC_STACKS_JSONL, STACKS "{\"stack_id\":1,\"frames\":[]}\n");
    CHECK(np_recording_stacks(&rec) == -EBADMSG);
    np_recording_close(&rec);
    CHECK(np_recording_open(&rec, dir, NP_REC_LENIENT) == 0);
    CHECK(np_recording_stacks(&rec) == 0 && rec.nstacks == 2 && rec.malformed == 1);
    np_recording_close(&rec);
    write_file(NP_REC_STACKS_JSONL, STACKS);
}

static void check_first_launch(const struct np_rec_launch *l) {
    struct np_str leaf;
    np_str_init(&leaf);
    CHECK(l->ts_ns == UINT64_MAX && l->pid == 7 && l->tid == 8 && l->stack_id == 1);
    CHECK(strcmp(l->comm, "c") == 0 && !l->api && strcmp(l->gpu_status, "matched") == 0);
    CHECK(l->ngpu == 2 && !l->nccl && !l->nested);
    CHECK(l->gpu[0].type == NP_REC_GPU_KERNEL && l->gpu[0].end_ns == 10 && l->gpu[0].stream == 3);
    np_rec_gpu_leaf(&leaf, &l->gpu[0]);
    np_rec_gpu_leaf(&leaf, &l->gpu[1]);
    CHECK(strcmp(np_str_cstr(&leaf), "[GPU_Kernel]g[GPU_Memcpy]HtoD") == 0);
    np_str_free(&leaf);
}

static void check_nccl_launch(const struct np_rec_launch *l) {
    CHECK(l->nccl && !l->comm_hash && l->nops == 2);
    CHECK(l->nops == 2 && strcmp(l->ops[0], "Send") == 0 && strcmp(l->ops[1], "Recv") == 0);
}

static void test_launches(enum np_rec_mode mode) {
    struct np_recording rec;
    struct np_rec_lines it;
    struct np_rec_launch l;
    write_file(NP_REC_LAUNCHES_JSONL, LAUNCH_OK "not json\n" LAUNCH_BAD LAUNCH_NCCL);
    CHECK(np_recording_open(&rec, dir, mode) == 0);
    CHECK(np_rec_lines_open(&rec, NP_REC_LAUNCHES_JSONL, &it) == 0);
    CHECK(np_rec_next_launch(&it, &l) == 1 && l.line == 1);
    check_first_launch(&l);
    if (mode == NP_REC_STRICT) {
        CHECK(np_rec_next_launch(&it, &l) == -EBADMSG);
    } else {
        CHECK(np_rec_next_launch(&it, &l) == 1 && l.line == 4);
        check_nccl_launch(&l);
        CHECK(np_rec_next_launch(&it, &l) == 0 && rec.malformed == 2);
    }
    np_rec_lines_close(&it);
    CHECK(np_rec_lines_open(&rec, "nothing.jsonl", &it) == -ENOENT);
    CHECK(np_rec_next_launch(&it, &l) == 0); /* not opened: no lines */
    np_rec_lines_close(&it);
    np_recording_close(&rec);
}

static void test_gpu_and_nccl_lines(void) {
    struct np_recording rec;
    struct np_rec_lines it;
    struct np_rec_gpu g;
    struct np_rec_nccl_call c;
    write_file(NP_REC_GPU_UNMATCHED_JSONL, "{\"type\":\"memset\",\"start_ns\":5}\n"
                                           "{\"type\":\"kernel\",\"start_ns\":5}\n"
                                           "{\"type\":\"odd\",\"start_ns\":6,\"device\":\"x\"}\n");
    write_file(NP_REC_NCCL_JSONL, "{\"ts_ns\":1,\"pid\":2,\"tid\":3,\"op\":\"AllReduce\"}\n"
                                  "{\"ts_ns\":1,\"pid\":4294967296,\"tid\":3}\n"
                                  "{\"ts_ns\":4,\"pid\":2,\"tid\":3,\"stack_id\":9}\n");
    CHECK(np_recording_open(&rec, dir, NP_REC_LENIENT) == 0);
    CHECK(np_rec_lines_open(&rec, NP_REC_GPU_UNMATCHED_JSONL, &it) == 0);
    CHECK(np_rec_next_gpu(&it, &g) == 1 && g.type == NP_REC_GPU_MEMSET && g.end_ns == 5);
    CHECK(np_rec_next_gpu(&it, &g) == 0 && rec.malformed == 2); /* no name; device not a number */
    np_rec_lines_close(&it);
    CHECK(np_rec_lines_open(&rec, NP_REC_NCCL_JSONL, &it) == 0);
    CHECK(np_rec_next_nccl_call(&it, &c) == 1 && strcmp(c.op, "AllReduce") == 0 && !c.has_stack);
    CHECK(np_rec_next_nccl_call(&it, &c) == 1 && c.has_stack && c.stack_id == 9 && !c.thread);
    CHECK(np_rec_next_nccl_call(&it, &c) == 0 && rec.malformed == 3);
    np_rec_lines_close(&it);
    np_recording_close(&rec);
}

#define GRAPH_LAUNCHES                                                                             \
    "{\"ts_ns\":1,\"pid\":7,\"tid\":8,\"kernel\":\"g\",\"stack_id\":1,\"gpu\":["                   \
    "{\"type\":\"kernel\",\"name\":\"a\",\"start_ns\":2,\"capture_stack_id\":3,"                   \
    "\"capture_by\":\"node\"},{\"type\":\"kernel\",\"name\":\"b\",\"start_ns\":3,"                 \
    "\"capture_stack_id\":null}]}\n"                                                               \
    "{\"ts_ns\":2,\"pid\":7,\"tid\":8,\"kernel\":\"g\",\"stack_id\":1,\"graph_nodes\":\"3\"}\n"    \
    "{\"ts_ns\":3,\"pid\":7,\"tid\":8,\"kernel\":\"g\",\"stack_id\":1,\"gpu\":["                   \
    "{\"type\":\"kernel\",\"name\":\"a\",\"start_ns\":2,\"capture_stack_id\":\"3\"}]}\n"           \
    "{\"ts_ns\":4,\"pid\":7,\"tid\":8,\"kernel\":\"g\",\"stack_id\":1,\"gpu\":["                   \
    "{\"type\":\"kernel\",\"name\":\"a\",\"start_ns\":2,\"capture_by\":1}]}\n"                     \
    "{\"ts_ns\":5,\"pid\":7,\"tid\":8,\"kernel\":\"g\",\"stack_id\":1,\"graph_unknown\":5}\n"      \
    "{\"ts_ns\":6,\"pid\":7,\"tid\":8,\"kernel\":\"g\",\"stack_id\":1,\"graph_nodes\":4}\n"        \
    "{\"ts_ns\":7,\"pid\":7,\"tid\":8,\"kernel\":\"g\",\"stack_id\":1,"                            \
    "\"graph_unknown\":\"not seen\"}\n"

/* Graph launches: the capture keys of their records, graph_nodes and
 * graph_unknown; a member of the wrong type is a malformed line (skipped,
 * the reading goes on, when lenient). */
static void test_graph_launches(void) {
    struct np_recording rec;
    struct np_rec_lines it;
    struct np_rec_launch l;
    write_file(NP_REC_LAUNCHES_JSONL, GRAPH_LAUNCHES);
    CHECK(np_recording_open(&rec, dir, NP_REC_LENIENT) == 0);
    CHECK(np_rec_lines_open(&rec, NP_REC_LAUNCHES_JSONL, &it) == 0);
    CHECK(np_rec_next_launch(&it, &l) == 1 && l.ngpu == 2 && !l.graph_unknown);
    CHECK(l.ngpu == 2 && l.gpu[0].capture_stack_id == 3 &&
          strcmp(l.gpu[0].capture_by, NP_CAPTURE_BY_NODE) == 0);
    CHECK(l.ngpu == 2 && l.gpu[1].capture_stack_id == 0 && !l.gpu[1].capture_by);
    CHECK(np_rec_next_launch(&it, &l) == 1 && l.ts_ns == 6 && l.graph_nodes == 4);
    CHECK(np_rec_next_launch(&it, &l) == 1 && l.ts_ns == 7 && l.graph_unknown &&
          strcmp(l.graph_unknown, "not seen") == 0);
    CHECK(np_rec_next_launch(&it, &l) == 0 && rec.malformed == 4);
    np_rec_lines_close(&it);
    np_recording_close(&rec);
    CHECK(np_recording_open(&rec, dir, NP_REC_STRICT) == 0);
    CHECK(np_rec_lines_open(&rec, NP_REC_LAUNCHES_JSONL, &it) == 0);
    CHECK(np_rec_next_launch(&it, &l) == 1);
    CHECK(np_rec_next_launch(&it, &l) == -EBADMSG); /* graph_nodes "3" */
    np_rec_lines_close(&it);
    np_recording_close(&rec);
}

static void test_meta(void) {
    struct np_recording rec;
    struct np_rec_meta m;
    CHECK(np_recording_open(&rec, dir, NP_REC_LENIENT) == 0);
    CHECK(np_recording_meta(&rec, &m) == 0 && !m.summary && !m.window && !m.files_known);
    np_rec_meta_free(&m);
    write_file(NP_REC_SUMMARY_JSON,
               "{\"start_time_unix_ns\": 1763800000123456789, \"duration_s\": 1.5,\n"
               " \"targets\": [{\"pid\": 7, \"comm\": \"py\"}, 3, {\"comm\": \"x\"}],\n"
               " \"files\": {\"per_launch_complete\": false, \"records_written\": 10,\n"
               "           \"records_cut\": 4, \"cut_reason\": \"No space left on device\"}}\n");
    CHECK(np_recording_meta(&rec, &m) == 0 && m.summary && !m.window);
    CHECK(m.start_unix_ns == 1763800000123456789ull && m.duration_ns == 1500000000ull);
    CHECK(m.ntargets == 2 && m.targets[0].pid == 7 && strcmp(m.targets[0].comm, "py") == 0 &&
          m.targets[1].pid == 0);
    CHECK(m.files_known && !m.per_launch_complete && m.records_cut == 4 &&
          strcmp(m.cut_reason, "No space left on device") == 0);
    np_rec_meta_free(&m);
    write_file(NP_REC_WINDOW_JSON, "{\"window\":{\"start_unix_ns\":100,\"end_unix_ns\":350},"
                                   "\"process\":{\"pid\":9,\"comm\":\"w\"}}");
    CHECK(np_recording_meta(&rec, &m) == 0 && m.summary && m.window);
    CHECK(m.start_unix_ns == 100 && m.duration_ns == 250 && m.process.pid == 9);
    np_rec_meta_free(&m);
    write_file(NP_REC_WINDOW_JSON, "{not json");
    CHECK(np_recording_meta(&rec, &m) == 0 && !m.window && m.start_unix_ns > 100);
    np_rec_meta_free(&m);
    remove_file(NP_REC_WINDOW_JSON);
    remove_file(NP_REC_SUMMARY_JSON);
    np_recording_close(&rec);
}

static void test_folded(void) {
    static const char text[] = "a;b 3\n"
                               "  \n"
                               "a;b;[GPU_Kernel]k x 12  \r\n"
                               "no_weight\n"
                               " 5\n"
                               "a 99999999999999999999\n"
                               "a;;b 1\n";
    FILE *f = fmemopen((void *)text, sizeof(text) - 1, "r");
    struct np_folded r;
    struct np_folded_line line;
    np_folded_attach(&r, f, "text");
    CHECK(np_folded_next(&r, &line) == 1 && strcmp(line.stack, "a;b") == 0 && line.weight == 3);
    CHECK(np_folded_next(&r, &line) == 1 && strcmp(line.stack, "a;b;[GPU_Kernel]k x") == 0 &&
          line.weight == 12);
    CHECK(np_folded_next(&r, &line) == 1 && strcmp(line.stack, "a;;b") == 0 && line.len == 4);
    CHECK(np_folded_next(&r, &line) == 0 && r.malformed == 3 && r.line == 7);
    np_folded_close(&r);
    fclose(f);
    CHECK(np_folded_open(&r, "/nonexistent/x.folded") == -ENOENT);
    CHECK(np_folded_next(&r, &line) == 0);
    np_folded_close(&r);
}

static void test_frames(void) {
    size_t qual, file_len;
    const char *file;
    int64_t line;
    CHECK(np_frame_kind("[GPU_Kernel]k") == NP_FRAME_KIND_GPU);
    CHECK(np_frame_kind(NP_LEAF_PENDING) == NP_FRAME_KIND_GPU);
    CHECK(np_frame_kind("[NCCL]AllReduce") == NP_FRAME_KIND_NCCL);
    CHECK(np_frame_kind("[libc.so+0x1f]") == NP_FRAME_KIND_SYNTHETIC);
    CHECK(np_frame_kind("f [inlined]") == NP_FRAME_KIND_INLINED);
    CHECK(np_frame_kind("Model.forward (model.py:40)") == NP_FRAME_KIND_PYTHON);
    CHECK(np_frame_kind("f<void (int)>") == NP_FRAME_KIND_NATIVE);
    CHECK(np_frame_python("f (a.py:-2)", 11, &qual, &file, &file_len, &line) && qual == 1 &&
          file_len == 4 && line == -2);
    CHECK(np_frame_nccl_has_op("[NCCL]Send+Recv", "recv") && !np_frame_nccl_has_op("f", "f"));
    CHECK(np_frame_same_call("f (a.py:1)", "f (a.py:2)") && !np_frame_same_call("f", "g"));
    CHECK(np_frame_matches("M.forward (m.py:1)", "forward") &&
          np_frame_matches("g [inlined]", "g"));
    const char *frames[] = {"[NCCL]A", "x", "[NCCL]B", "y"};
    CHECK(strcmp(np_frames_last_nccl(frames, 4), "[NCCL]B") == 0 &&
          !np_frames_last_nccl(frames, 0));
}

/* The capture site of a graph replay's composed stack. */
static void test_capture_site(void) {
    const char *py[] = {"main",
                        "run (r.py:9)",
                        "cudaGraphLaunch",
                        NP_FRAME_GRAPH_CAPTURE,
                        "capture (c.py:4)",
                        "Model.forward (m.py:40)",
                        "at::gemm",
                        "cudaLaunchKernel"};
    const char *native[] = {"main",           "cuGraphLaunch", NP_FRAME_GRAPH_CAPTURE,
                            "capture_model",  "launch_named",  "ncclLaunchKernel",
                            "[NCCL]AllReduce"};
    const char *bare[] = {"main", "run", "cuGraphLaunch", NP_FRAME_GRAPH_CAPTURE, "cuLaunchKernel"};
    CHECK(strcmp(np_frames_capture_site(py, 8), "Model.forward (m.py:40)") == 0);
    CHECK(strcmp(np_frames_capture_site(native, 7), "launch_named") == 0);
    CHECK(strcmp(np_frames_capture_site(native, 5), "capture_model") == 0);
    CHECK(!np_frames_capture_site(bare, 5)); /* the launch API alone */
    CHECK(!np_frames_capture_site(py, 3));   /* no [graph capture] */
    CHECK(!np_frames_capture_site(py, 0));
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_exact_integers();
    test_stacks();
    test_launches(NP_REC_STRICT);
    test_launches(NP_REC_LENIENT);
    test_gpu_and_nccl_lines();
    test_graph_launches();
    test_meta();
    test_folded();
    test_frames();
    test_capture_site();
    const char *names[] = {NP_REC_STACKS_JSONL, NP_REC_LAUNCHES_JSONL, NP_REC_GPU_UNMATCHED_JSONL,
                           NP_REC_NCCL_JSONL};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        remove_file(names[i]);
    rmdir(dir);
    printf("recording_unit: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
