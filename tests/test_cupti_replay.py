"""The CUPTI test double (tests/progs/libcupti_replay.so) and, through it,
libncclprobe_cupti.so.

First the double itself, driven step by step by cupti_replay_check (a tiny
subscriber that prints everything CUPTI hands it): it must behave as the
CUPTI 13.0 headers document, since the injection library's tests trust it.
Where the real libcupti.so of the toolkit can answer without a GPU (walking a
buffer, result strings, bad parameters) the two are compared directly.

Then the injection library in file mode: cupti_app makes real libcudart calls,
plays the CUPTI side through the double, and writes what it scripted (the
truth) with --expect; the Chrome trace the library writes must say exactly
that. These tests skip until the library is built.
"""

import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from lib.cupti_app import APP
from lib.jsonl import read_jsonl
from lib.paths import CUPTI_LIB, PROGS, PROGS_ENV
from lib.skip import needs_binary

CHECK = PROGS / "cupti_replay_check"
REAL_CUPTI = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64" / "libcupti.so.13"

pytestmark = pytest.mark.skipif(
    PROGS_ENV.get("HAVE_CUPTI_REPLAY") != "1" or not CHECK.exists(),
    reason="CUPTI test double not built (needs the CUDA toolkit's CUPTI headers)")
needs_injection = needs_binary(CUPTI_LIB)
needs_real_cupti = pytest.mark.skipif(not REAL_CUPTI.exists(), reason=f"no {REAL_CUPTI}")

# CUPTI values (cupti_result.h, cupti_activity.h, cupti_*_cbid.h)
SUCCESS, INVALID_PARAMETER, INVALID_OPERATION = 0, 1, 7
PARAMETER_SIZE_NOT_SUFFICIENT, MAX_LIMIT_REACHED, INVALID_KIND = 10, 12, 21
NOT_SUPPORTED, MULTIPLE_SUBSCRIBERS = 27, 39
DRIVER, RUNTIME, RESOURCE = 1, 2, 3  # callback domains
KIND_MEMCPY, KIND_MEMSET, KIND_KERNEL, KIND_DRIVER, KIND_RUNTIME = 1, 2, 3, 4, 5
KIND_CONCURRENT_KERNEL = 10
CBID_LAUNCH, CBID_GRAPH, CBID_MEMCPY_ASYNC, CBID_MEMSET_ASYNC = 211, 311, 41, 51
CBID_CU_LAUNCH, CBID_CU_GRAPH_LAUNCH = 307, 514
CONTEXT_DESTROY_STARTING, GRAPHNODE_CREATED, GRAPHNODE_CLONED = 4, 13, 20  # resource cbids
NODE_TYPE_KERNEL, NODE_TYPE_MEMSET = 0, 2  # CUgraphNodeType
RECORD_SIZE = {KIND_CONCURRENT_KERNEL: 216, KIND_KERNEL: 216, KIND_MEMCPY: 96,
               KIND_MEMSET: 88, KIND_RUNTIME: 40, KIND_DRIVER: 40}
FAKE_CLOCK_START, FAKE_CLOCK_STEP = 1000000, 1000  # the check's `tsclock`


# ---- the double, through cupti_replay_check ------------------------------------------------

def check_with_stderr(*steps, env=None, lib=None):
    """Runs cupti_replay_check with these steps; returns its JSON lines and its stderr."""
    argv = [str(CHECK)] + (["--lib", str(lib)] if lib else []) + [str(s) for s in steps]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def check(*steps, env=None, lib=None):
    """Runs cupti_replay_check with these steps; returns its JSON lines."""
    return check_with_stderr(*steps, env=env, lib=lib)[0]


def ops(lines, op):
    return [x for x in lines if x.get("op") == op]


def events(lines, ev):
    return [x for x in lines if x.get("ev") == ev]


def rcs(lines, op):
    return [x["rc"] for x in ops(lines, op)]


SETUP = ["subscribe:check", "register"]


def test_callbacks_only_for_enabled_domain_and_cbid():
    out = check(*SETUP, f"cb:{RUNTIME}:{CBID_LAUNCH}",
                f"api:{RUNTIME}:{CBID_LAUNCH}",        # 1: enabled
                f"api:{RUNTIME}:{CBID_GRAPH}",         # 2: other cbid
                f"api:{DRIVER}:{CBID_LAUNCH}",         # 3: same cbid, other domain
                f"domain:{DRIVER}",
                f"api:{DRIVER}:{CBID_CU_LAUNCH}",      # 4: whole domain on
                f"cb:{RUNTIME}:{CBID_LAUNCH}:0",
                f"api:{RUNTIME}:{CBID_LAUNCH}")        # 5: switched off again
    assert [a["corr"] for a in ops(out, "api")] == [1, 2, 3, 4, 5]
    got = [(c["corr"], c["domain"], c["cbid"], c["site"]) for c in events(out, "callback")]
    assert got == [(1, RUNTIME, CBID_LAUNCH, "enter"), (1, RUNTIME, CBID_LAUNCH, "exit"),
                   (4, DRIVER, CBID_CU_LAUNCH, "enter"), (4, DRIVER, CBID_CU_LAUNCH, "exit")]


def test_callback_data_names_and_correlation_data():
    out = check(*SETUP, f"domain:{RUNTIME}",
                f"api:{RUNTIME}:{CBID_LAUNCH}:cudaLaunchKernel:_Z3fooPf",
                f"api:{RUNTIME}:{CBID_GRAPH}:cudaGraphLaunch:graph:3")
    calls = events(out, "callback")
    assert [(c["corr"], c["function"], c["symbol"]) for c in calls] == [
        (1, "cudaLaunchKernel", "_Z3fooPf")] * 2 + [(2, "cudaGraphLaunch", "graph")] * 2
    # correlationData written at ENTER is there at EXIT; the return value at EXIT
    exits = [c for c in calls if c["site"] == "exit"]
    assert [c["correlation_data"] for c in exits] == [1007, 2007]
    assert [c["return_value"] for c in exits] == [0, 3]
    this = ops(out, "api")[0]
    assert {c["tid"] for c in calls} == {this["gettid"]}  # on the calling thread


def test_correlation_ids_unique_and_ordered_across_threads():
    out = check(*SETUP, "threads:8:50")
    per_thread = [t["corrs"] for t in ops(out, "thread")]
    assert len(per_thread) == 8
    assert all(c == sorted(c) and len(c) == 50 for c in per_thread)
    assert sorted(sum(per_thread, [])) == list(range(1, 401))


def test_a_late_subscriber_sees_only_what_comes_after():
    # the driver ran before anyone subscribed (a library loaded into a running process):
    # those calls reached nobody, their records were not queued; ids went on counting
    out = check("subscribed", f"api:{DRIVER}:{CBID_CU_LAUNCH}", "kernel:1:early:1:2",
                "subscribe:late", "subscribed", "register", f"domain:{DRIVER}",
                f"enable:{KIND_CONCURRENT_KERNEL}",
                f"api:{DRIVER}:{CBID_CU_LAUNCH}", "kernel:2:late:3:4", "flush")
    assert [x["value"] for x in ops(out, "subscribed")] == [0, 1]
    assert [a["corr"] for a in ops(out, "api")] == [1, 2]
    assert [(c["corr"], c["site"]) for c in events(out, "callback")] == [(2, "enter"),
                                                                       (2, "exit")]
    assert rcs(out, "kernel") == [-1, 0]
    assert [(r["corr"], r["name"]) for r in events(out, "record")] == [(2, "late")]


def scripted(out):
    """The records delivered, in delivery order."""
    return events(out, "record")


def test_records_only_for_enabled_kinds():
    out = check(*SETUP,
                "kernel:1:k0:100:200", "memcpy:1:1:4096:10:20", "memset:1:512:30:40",
                f"enable:{KIND_CONCURRENT_KERNEL}", "kernel:2:k1:300:450:3:14:5:6",
                "memcpy:2:1:4096:10:20",
                f"enable:{KIND_MEMCPY}", "memcpy:3:2:8192:500:600:1:15:0:0",
                f"enable:{KIND_MEMSET}", "memset:4:1024:700:800:2:16:7:8",
                f"disable:{KIND_CONCURRENT_KERNEL}", "kernel:5:k2:1:2",
                "flush")
    assert rcs(out, "kernel") == [-1, 0, -1]
    assert rcs(out, "memcpy") == [-1, -1, 0]
    assert rcs(out, "memset") == [-1, 0]
    recs = scripted(out)
    assert [(r["kind"], r["corr"]) for r in recs] == [
        (KIND_CONCURRENT_KERNEL, 2), (KIND_MEMCPY, 3), (KIND_MEMSET, 4)]
    k, m, s = recs
    assert (k["name"], k["start"], k["end"], k["device"], k["stream"], k["graph_id"],
            k["graph_node_id"]) == ("k1", 300, 450, 3, 14, 5, 6)
    assert (m["copy_kind"], m["bytes"], m["start"], m["end"], m["device"], m["stream"]) == (
        2, 8192, 500, 600, 1, 15)
    assert (m["src_kind"], m["dst_kind"]) == (3, 1)  # DtoH: device -> pageable
    assert (s["bytes"], s["start"], s["end"], s["device"], s["stream"], s["graph_id"],
            s["graph_node_id"]) == (1024, 700, 800, 2, 16, 7, 8)


def test_legacy_kernel_kind_alone():
    out = check(*SETUP, f"enable:{KIND_KERNEL}", "kernel:1:k:1:2", "flush")
    assert [r["kind"] for r in scripted(out)] == [KIND_KERNEL]


def test_kernel_names_interned():
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}", "kernel:1:alpha:1:2",
                "kernel:2:beta:1:2", "kernel:3:alpha:1:2", "flush")
    ptr = {r["corr"]: r["name_ptr"] for r in scripted(out)}
    assert ptr[1] == ptr[3] != ptr[2]


def api_records(out):
    return [(r["kind"], r["cbid"], r["corr"]) for r in scripted(out)
            if r["kind"] in (KIND_RUNTIME, KIND_DRIVER)]


def test_api_records_only_for_enabled_cbids():
    out = check(*SETUP, f"rtapi:{CBID_LAUNCH}", f"drvapi:{CBID_CU_LAUNCH}",
                f"api:{RUNTIME}:{CBID_LAUNCH}",          # 1 yes
                f"api:{RUNTIME}:{CBID_GRAPH}",           # 2 no
                f"api:{DRIVER}:{CBID_CU_LAUNCH}",        # 3 yes
                f"api:{DRIVER}:{CBID_LAUNCH}",           # 4 no: that id is runtime-only here
                f"rtapi:{CBID_LAUNCH}:0",
                f"api:{RUNTIME}:{CBID_LAUNCH}",          # 5 no
                "flush")
    assert api_records(out) == [(KIND_RUNTIME, CBID_LAUNCH, 1), (KIND_DRIVER, CBID_CU_LAUNCH, 3)]


def test_runtime_kind_enables_all_then_per_cbid_refines():
    out = check(*SETUP, f"enable:{KIND_RUNTIME}",
                f"api:{RUNTIME}:{CBID_LAUNCH}", f"api:{RUNTIME}:{CBID_MEMCPY_ASYNC}",  # 1, 2
                f"rtapi:{CBID_MEMCPY_ASYNC}:0",
                f"api:{RUNTIME}:{CBID_LAUNCH}", f"api:{RUNTIME}:{CBID_MEMCPY_ASYNC}",  # 3
                f"api:{DRIVER}:{CBID_CU_LAUNCH}",                                      # no
                f"disable:{KIND_RUNTIME}", f"api:{RUNTIME}:{CBID_LAUNCH}",             # no
                "flush")
    assert api_records(out) == [(KIND_RUNTIME, CBID_LAUNCH, 1),
                                (KIND_RUNTIME, CBID_MEMCPY_ASYNC, 2),
                                (KIND_RUNTIME, CBID_LAUNCH, 3)]


@pytest.mark.parametrize("tid_type", ["default", "system"])
def test_api_record_thread_and_process_ids(tid_type):
    out = check(*SETUP, f"tid:{tid_type}", f"rtapi:{CBID_LAUNCH}",
                f"api:{RUNTIME}:{CBID_LAUNCH}:cudaLaunchKernel:k:5", "flush")
    call, = ops(out, "api")
    rec, = scripted(out)
    want = call["gettid"] if tid_type == "system" else call["pthread"]
    assert rec["thread_id"] == want
    assert call["gettid"] != call["pthread"]  # so the two types can be told apart
    assert (rec["pid"], rec["return_value"], rec["corr"]) == (call["pid"], 5, call["corr"])


def test_timestamp_callback_used_everywhere():
    out = check(*SETUP, "tsclock", f"rtapi:{CBID_LAUNCH}", f"cb:{RUNTIME}:{CBID_LAUNCH}",
                f"api:{RUNTIME}:{CBID_LAUNCH}", "replay_now", "now", "flush")
    call, = ops(out, "api")
    rec, = scripted(out)
    enter, exit_ = events(out, "callback")
    # every read of CUPTI's clock is one tick of the registered callback, in call order
    seq = [call["before"], rec["start"], enter["ts"], rec["end"], exit_["ts"], call["after"],
           ops(out, "replay_now")[0]["ts"], ops(out, "now")[0]["cupti"]]
    assert seq == sorted(set(seq))
    assert all(FAKE_CLOCK_START <= t < FAKE_CLOCK_START + 100 * FAKE_CLOCK_STEP and
               (t - FAKE_CLOCK_START) % FAKE_CLOCK_STEP == 0 for t in seq), seq


def test_default_clock_is_realtime():
    now, = ops(check("now"), "now")
    assert now["realtime_before"] <= now["cupti"] <= now["realtime_after"]
    assert abs(now["cupti"] - time.time_ns()) < 60 * 10**9


def test_dropped_count_reported_once_then_reset():
    out = check("drop:5", "drop:2", "dropped", "dropped", "drop:1", "dropped")
    assert [d["n"] for d in ops(out, "dropped")] == [7, 0, 1]


def test_declined_buffers_count_as_dropped():
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}", "nullbuf:1",
                *[f"kernel:{i}:k:1:2" for i in range(1, 4)], "flush", "dropped",
                "nullbuf:0", "kernel:4:k:1:2", "flush", "dropped")
    assert [d["n"] for d in ops(out, "dropped")] == [3, 0]
    assert [r["corr"] for r in scripted(out)] == [4]


def buffers_in_completion_order(out):
    return [(b["buffer"], [r["corr"] for r in scripted(out) if r["buffer"] == b["buffer"]])
            for b in events(out, "buffer")]


def test_out_of_order_delivery():
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}",
                *[f"kernel:{i}:k:{i}:{i + 1}" for i in range(1, 11)], "deliver:3:1")
    assert [r["buffer"] for r in events(out, "request")] == [0, 1, 2, 3]
    assert buffers_in_completion_order(out) == [
        (3, [10]), (2, [7, 8, 9]), (1, [4, 5, 6]), (0, [1, 2, 3])]


def test_flush_order_default_and_configured():
    kernels = [f"kernel:{i}:k:{i}:{i + 1}" for i in range(1, 131)]
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}", *kernels, "flush")
    assert [(b, len(c)) for b, c in buffers_in_completion_order(out)] == [(0, 64), (1, 64), (2, 2)]
    assert [r["corr"] for r in scripted(out)] == list(range(1, 131))
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}", "flush_order:4:1", *kernels[:10],
                "flush")
    assert buffers_in_completion_order(out) == [
        (2, [9, 10]), (1, [5, 6, 7, 8]), (0, [1, 2, 3, 4])]


def test_buffer_limits_from_request_callback():
    three_kernels = [f"kernel:{i}:k:1:2" for i in range(1, 4)]
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}", "bufsize:500", *three_kernels,
                "flush")  # 216-byte records: two fit in 500 bytes
    assert buffers_in_completion_order(out) == [(0, [1, 2]), (1, [3])]
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}", "maxrec:1", *three_kernels, "flush")
    assert buffers_in_completion_order(out) == [(0, [1]), (1, [2]), (2, [3])]


def test_records_packed_aligned_and_walk_ends_with_max_limit_reached():
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}", f"enable:{KIND_MEMCPY}",
                f"enable:{KIND_MEMSET}", f"rtapi:{CBID_LAUNCH}",
                f"api:{RUNTIME}:{CBID_LAUNCH}", "kernel:1:k:1:2", "memcpy:1:1:64:1:2",
                "memset:1:64:1:2", "kernel:1:k:3:4", "flush")
    recs = scripted(out)
    assert [r["kind"] for r in recs] == [KIND_RUNTIME, KIND_CONCURRENT_KERNEL, KIND_MEMCPY,
                                         KIND_MEMSET, KIND_CONCURRENT_KERNEL]
    offset = 0
    for r in recs:
        assert r["offset"] == offset and offset % 8 == 0
        offset += RECORD_SIZE[r["kind"]]
    buffer, = events(out, "buffer")
    assert buffer["valid"] == offset and buffer["size"] == 1 << 16
    assert [w["rc"] for w in events(out, "walk_end")] == [MAX_LIMIT_REACHED]


WALKS = ["walk:two", "walk:cut", "walk:tiny", "walk:garbage", "walk:zeroes", "walk:empty",
         "walk:null"]


def test_walk_edge_cases():
    steps = {w["case"]: w["steps"] for w in ops(check(*WALKS), "walk")}
    assert steps == {
        "two": [[SUCCESS, 0], [SUCCESS, 40], [MAX_LIMIT_REACHED, -1]],
        "cut": [[SUCCESS, 0], [MAX_LIMIT_REACHED, -1]],      # second record cut short
        "tiny": [[MAX_LIMIT_REACHED, -1]],
        "garbage": [[SUCCESS, 0], [INVALID_KIND, -1]],
        "zeroes": [[INVALID_KIND, -1]],
        "empty": [[MAX_LIMIT_REACHED, -1]],
        "null": [[INVALID_PARAMETER, -1]],
    }


# Steps the real libcupti answers without a GPU or driver (a graph id of a NULL handle, or into
# a NULL pointer; of any other handle it says CUPTI_ERROR_UNKNOWN there: no driver).
GRAPH_ID_NULLS = ["getnode:0", "getnode:0:null", "getnode:0x1234:null", "getgraph:0",
                  "getgraph:0:null", "getgraph:0x1234:null"]
DRIVER_FREE = WALKS + GRAPH_ID_NULLS + [
    "result:0", "result:12", "result:36", "result:39", "result:46", "result:47", "result:999",
    "result_null", "now_null", "dropped_null", "register_null", "tsclock_null", "cb_bad"]


@needs_real_cupti
def test_same_answers_as_real_cupti():
    assert check(*DRIVER_FREE) == check(*DRIVER_FREE, lib=REAL_CUPTI)


@needs_real_cupti
def test_same_clock_as_real_cupti():
    real, = ops(check("now", lib=REAL_CUPTI), "now")
    double, = ops(check("now"), "now")
    for now in (real, double):
        assert now["realtime_before"] <= now["cupti"] <= now["realtime_after"]


def test_busy_subscriber_reports_the_holder():
    env = {"CUPTI_REPLAY_BUSY": "torch.profiler (Kineto)"}
    out = check("subscribe:ncclprobe", "subscribe_v1", f"cb:{RUNTIME}:{CBID_LAUNCH}", env=env)
    sub, = ops(out, "subscribe")
    assert (sub["rc"], sub["old"]) == (MULTIPLE_SUBSCRIBERS, "torch.profiler (Kineto)")
    assert rcs(out, "subscribe_v1") == [MULTIPLE_SUBSCRIBERS]
    assert rcs(out, "cb") == [INVALID_PARAMETER]  # no handle was given out


def test_one_subscriber_at_a_time():
    out = check("subscribe:first", "subscribe:second", "subscribe_v1", "unsubscribe",
                "subscribe:second")
    assert [(s["rc"], s["old"]) for s in ops(out, "subscribe")] == [
        (SUCCESS, ""), (MULTIPLE_SUBSCRIBERS, "CUPTI for first"), (SUCCESS, "")]
    assert rcs(out, "subscribe_v1") == [MULTIPLE_SUBSCRIBERS]
    assert rcs(out, "unsubscribe") == [SUCCESS]


@pytest.mark.parametrize("steps,op,rc", [
    (["flush"], "flush", INVALID_OPERATION),                       # before RegisterCallbacks
    (["subscribe", "cb_bad"], "cb_bad", INVALID_PARAMETER),        # not our handle
    ([f"cb:{RUNTIME}:{CBID_LAUNCH}"], "cb", INVALID_PARAMETER),    # nobody subscribed
    (["subscribe", f"cb:{RUNTIME}:0"], "cb", INVALID_PARAMETER),   # cbid 0 is INVALID
    (["subscribe", "cb:9:1"], "cb", INVALID_PARAMETER),            # no such domain
    (["subscribe", "domain:0"], "domain", INVALID_PARAMETER),
    (["subscribe", "unsubscribe", f"cb:{RUNTIME}:{CBID_LAUNCH}"], "cb", INVALID_PARAMETER),
    (["subscribe", "unsubscribe", "unsubscribe"], "unsubscribe", INVALID_PARAMETER),
    (["unsubscribe_bad"], "unsubscribe_bad", INVALID_PARAMETER),
    (["subscribe_badsize"], "subscribe_badsize", INVALID_PARAMETER),
    (["register_null"], "register_null", INVALID_PARAMETER),
    (["tsclock_null"], "tsclock_null", INVALID_PARAMETER),
    (["enable:0"], "enable", INVALID_KIND),
    (["enable:100000"], "enable", INVALID_KIND),
    (["disable:100000"], "disable", INVALID_KIND),
    (["rtapi:100000"], "rtapi", INVALID_PARAMETER),
    (["drvapi:0"], "drvapi", INVALID_PARAMETER),
    (["tid:5"], "tid", NOT_SUPPORTED),
    (["dropped_null"], "dropped_null", INVALID_PARAMETER),
    (["now_null"], "now_null", INVALID_PARAMETER),
    (["attr:0:1"], "attr", PARAMETER_SIZE_NOT_SUFFICIENT),        # a size_t attribute
    (["attr:5:1"], "attr", SUCCESS),                               # a uint8_t one
    (["attr:77:8"], "attr", INVALID_PARAMETER),
    (["register", "finalize", "flush"], "flush", INVALID_OPERATION),  # detached
])
def test_calls_in_the_wrong_state(steps, op, rc):
    assert rcs(check(*steps), op)[-1] == rc


def test_finalize_detaches_and_allows_a_new_session():
    out = check(*SETUP, f"enable:{KIND_CONCURRENT_KERNEL}", f"cb:{RUNTIME}:{CBID_LAUNCH}",
                f"api:{RUNTIME}:{CBID_LAUNCH}", "kernel:1:k:1:2", "drop:4", "pending",
                "finalize", "pending", "dropped", f"api:{RUNTIME}:{CBID_LAUNCH}",
                "kernel:2:k:1:2", *SETUP, f"cb:{RUNTIME}:{CBID_LAUNCH}",
                f"api:{RUNTIME}:{CBID_LAUNCH}", "flush")
    assert [p["n"] for p in ops(out, "pending")] == [1, 0]
    assert [d["n"] for d in ops(out, "dropped")] == [0]
    assert rcs(out, "kernel") == [0, -1]                 # kinds are off after finalize
    assert [c["corr"] for c in events(out, "callback")] == [1, 1, 3, 3]  # ids keep counting
    assert rcs(out, "subscribe") == [SUCCESS, SUCCESS]
    assert scripted(out) == []


def test_flush_from_inside_a_callback():
    """The double calls back without its lock held: a client may flush from a callback."""
    out = check("flush_in_exit", *SETUP, f"enable:{KIND_CONCURRENT_KERNEL}",
                f"cb:{RUNTIME}:{CBID_LAUNCH}", "kernel:7:k:1:2", f"api:{RUNTIME}:{CBID_LAUNCH}")
    assert rcs(out, "flush_in_exit") == [SUCCESS]
    assert [r["corr"] for r in scripted(out)] == [7]
    kinds = [x.get("ev") or x.get("op") for x in out]
    assert kinds.index("record") < kinds.index("api")  # delivered during the call


# ---- graph ids, resource callbacks, calls in two halves -------------------------------------

def test_graph_ids_as_registered():
    out = check("nodeid:0x1000:101", "nodeid:0x1008:102", "graphid:0x2000:1",
                "getnode:0x1000", "getnode:0x1008", "getgraph:0x2000",
                "getnode:0x2000", "getgraph:0x1000", "getnode:0x1010",   # never registered
                *GRAPH_ID_NULLS,
                "nodeid:0x1000:555", "getnode:0x1000",                  # registered again
                "nodeid:0:9", "getnode:0",                              # NULL is never one
                "graphid:0x3000:4294967295", "getgraph:0x3000",
                "finalize", "getnode:0x1008", "getgraph:0x2000")        # the driver's: kept
    got = [(x["op"], x["handle"], x["rc"], x["id"]) for x in out if x["op"] != "finalize"]
    assert got == [
        ("getnode", 0x1000, SUCCESS, 101), ("getnode", 0x1008, SUCCESS, 102),
        ("getgraph", 0x2000, SUCCESS, 1),
        ("getnode", 0x2000, INVALID_PARAMETER, 77), ("getgraph", 0x1000, INVALID_PARAMETER, 77),
        ("getnode", 0x1010, INVALID_PARAMETER, 77),
        ("getnode", 0, INVALID_PARAMETER, 77), ("getnode", 0, INVALID_PARAMETER, 77),
        ("getnode", 0x1234, INVALID_PARAMETER, 77), ("getgraph", 0, INVALID_PARAMETER, 77),
        ("getgraph", 0, INVALID_PARAMETER, 77), ("getgraph", 0x1234, INVALID_PARAMETER, 77),
        ("getnode", 0x1000, SUCCESS, 555), ("getnode", 0, INVALID_PARAMETER, 77),
        ("getgraph", 0x3000, SUCCESS, 2**32 - 1),
        ("getnode", 0x1008, SUCCESS, 102), ("getgraph", 0x2000, SUCCESS, 1)]


def test_graph_id_of_registered_handle_into_null_pointer():
    out = check("nodeid:0x1000:101", "graphid:0x2000:1", "getnode:0x1000:null",
                "getgraph:0x2000:null")
    assert [(x["rc"], x["id"]) for x in out] == [(INVALID_PARAMETER, 77)] * 2


def resources(out):
    return events(out, "resource")


CREATED_0 = f"resource:{GRAPHNODE_CREATED}:0:0x2000:0x1000"          # graph, node
CLONED_0 = f"resource:{GRAPHNODE_CLONED}:0:0x3000:0x1100:0x2000:0x1000:0x4000"


def test_resource_callbacks_only_when_enabled():
    ids = ["nodeid:0x1000:101", "nodeid:0x1100:1001", "graphid:0x2000:1", "graphid:0x3000:2"]
    out = check(*ids, CREATED_0,                                        # nobody subscribed
                *SETUP, CREATED_0,                                      # not enabled
                f"cb:{RESOURCE}:{GRAPHNODE_CREATED}", CREATED_0,        # 1: enabled
                CLONED_0,                                               # another cbid: not
                f"cb:{RUNTIME}:{CBID_LAUNCH}", f"cb:{DRIVER}:{GRAPHNODE_CLONED}",
                CLONED_0,                                               # other domains: not
                f"domain:{RESOURCE}", CLONED_0,                         # 2: the whole domain
                f"resource:{CONTEXT_DESTROY_STARTING}:0x77",            # 3
                f"cb:{RESOURCE}:{GRAPHNODE_CREATED}:0", CREATED_0,      # off again
                f"domain:{RESOURCE}:0", CLONED_0, "subscribe:again")
    assert [r["cbid"] for r in ops(out, "resource")] == [GRAPHNODE_CREATED] * 3 + [
        GRAPHNODE_CLONED] * 3 + [CONTEXT_DESTROY_STARTING, GRAPHNODE_CREATED, GRAPHNODE_CLONED]
    assert events(out, "callback") == []
    created, cloned, destroy = resources(out)
    assert created == {"ev": "resource", "cbid": GRAPHNODE_CREATED, "context": 0, "stream": 0,
                       "tid": created["tid"], "descriptor": 1, "graph": 0x2000,
                       "original_graph": 0, "node": 0x1000, "original_node": 0,
                       "node_type": NODE_TYPE_KERNEL, "dependency": 0, "graph_exec": 0,
                       # asked from inside the callback: the double's lock is not held
                       "node_rc": SUCCESS, "node_id": 101, "graph_rc": SUCCESS, "graph_id": 1}
    assert (cloned["graph"], cloned["node"], cloned["original_graph"], cloned["original_node"],
            cloned["graph_exec"], cloned["node_id"], cloned["graph_id"]) == (
        0x3000, 0x1100, 0x2000, 0x1000, 0x4000, 1001, 2)
    assert (destroy["cbid"], destroy["context"], destroy["stream"], destroy["descriptor"]) == (
        CONTEXT_DESTROY_STARTING, 0x77, 0, 0)
    # on the scripting thread
    assert {r["tid"] for r in resources(out)} == {created["tid"]}


def test_resource_callback_passes_the_descriptor_as_given():
    out = check(*SETUP, f"cb:{RESOURCE}:{GRAPHNODE_CREATED}",
                f"resource:{GRAPHNODE_CREATED}:0x55:0x2000:0x1000:0:0:0:{NODE_TYPE_MEMSET}:0x999")
    r, = resources(out)
    assert (r["context"], r["node_type"], r["dependency"]) == (0x55, NODE_TYPE_MEMSET, 0x999)
    assert (r["node_rc"], r["graph_rc"]) == (INVALID_PARAMETER, INVALID_PARAMETER)  # unregistered


def test_enter_exit_nest_with_resources_between():
    """A runtime call around a driver call that makes a graph node (a captured launch)."""
    out = check(*SETUP, "tsclock", f"domain:{RUNTIME}", f"domain:{DRIVER}", f"domain:{RESOURCE}",
                f"rtapi:{CBID_LAUNCH}", f"drvapi:{CBID_CU_LAUNCH}",
                f"enter:{RUNTIME}:{CBID_LAUNCH}:cudaLaunchKernel:_Z3foov",
                f"enter:{DRIVER}:{CBID_CU_LAUNCH}:cuLaunchKernel:_Z3foov",
                "nodeid:0x1000:101", CREATED_0,
                "exit:2:0", "exit:1:3", "flush")
    assert [x["corr"] for x in ops(out, "enter")] == [1, 2]
    seq = [(x["ev"], x.get("corr", x.get("cbid")), x.get("site")) for x in out
           if x.get("ev") in ("callback", "resource")]
    assert seq == [("callback", 1, "enter"), ("callback", 2, "enter"),
                   ("resource", GRAPHNODE_CREATED, None),
                   ("callback", 2, "exit"), ("callback", 1, "exit")]
    calls = events(out, "callback")
    assert [(c["domain"], c["cbid"], c["function"], c["symbol"]) for c in calls] == [
        (RUNTIME, CBID_LAUNCH, "cudaLaunchKernel", "_Z3foov"),
        (DRIVER, CBID_CU_LAUNCH, "cuLaunchKernel", "_Z3foov"),
        (DRIVER, CBID_CU_LAUNCH, "cuLaunchKernel", "_Z3foov"),
        (RUNTIME, CBID_LAUNCH, "cudaLaunchKernel", "_Z3foov")]
    # each call keeps its own correlationData from ENTER to EXIT, and gets its return value
    exits = [c for c in calls if c["site"] == "exit"]
    assert [(c["correlation_data"], c["return_value"]) for c in exits] == [(2007, 0), (1007, 3)]
    # API records: the inner call's first (it ended first), each from its ENTER to its EXIT
    inner, outer = [r for r in scripted(out) if r["kind"] in (KIND_RUNTIME, KIND_DRIVER)]
    assert [(r["kind"], r["cbid"], r["corr"], r["return_value"]) for r in (inner, outer)] == [
        (KIND_DRIVER, CBID_CU_LAUNCH, 2, 0), (KIND_RUNTIME, CBID_LAUNCH, 1, 3)]
    assert outer["start"] < inner["start"] < inner["end"] < outer["end"]


def test_exit_must_close_the_innermost_call_of_its_thread():
    out, err = check_with_stderr(
        *SETUP, f"domain:{RUNTIME}", f"enable:{KIND_RUNTIME}",
        f"enter:{RUNTIME}:{CBID_LAUNCH}", f"enter:{RUNTIME}:{CBID_GRAPH}",
        "exit:1",           # not the innermost: ignored
        "exit_thread:2",    # the innermost, but of another thread: ignored
        "exit:2", "exit:2",  # the second: closed already
        f"api:{RUNTIME}:{CBID_MEMCPY_ASYNC}",  # a whole call nested in the open one
        "exit:1", "exit:1", "flush")
    got = [(c["corr"], c["site"]) for c in events(out, "callback")]
    assert got == [(1, "enter"), (2, "enter"), (2, "exit"), (3, "enter"), (3, "exit"),
                   (1, "exit")]
    assert [r["corr"] for r in scripted(out)] == [2, 3, 1]
    assert err.count("cupti_replay_api_exit") == 4, err
    assert "cupti_replay_api_exit(1): the innermost open call of this thread is 2" in err
    assert "cupti_replay_api_exit(2): no call open on this thread" in err


def test_calls_open_at_most_eight_deep():
    enters = [f"enter:{DRIVER}:{CBID_CU_LAUNCH}"] * 9
    exits = [f"exit:{corr}" for corr in range(8, 0, -1)]
    out, err = check_with_stderr(*SETUP, f"domain:{DRIVER}", *enters, *exits,
                                 f"api:{DRIVER}:{CBID_CU_LAUNCH}")
    assert [x["corr"] for x in ops(out, "enter")] == [1, 2, 3, 4, 5, 6, 7, 8, 0]
    assert "8 calls open on this thread already" in err
    got = [(c["corr"], c["site"]) for c in events(out, "callback")]
    assert got == [(c, "enter") for c in range(1, 9)] + [(c, "exit") for c in range(8, 0, -1)] + [
        (9, "enter"), (9, "exit")]


def test_calls_open_on_threads_of_their_own():
    """Each thread's open calls are its own: 8 threads in calls at once, each EXIT closing
    the call its thread entered last."""
    out = check(*SETUP, f"domain:{RUNTIME}", "threads:8:20")
    per_thread = {}
    for c in events(out, "callback"):
        per_thread.setdefault(c["tid"], []).append((c["corr"], c["site"]))
    assert len(per_thread) == 8
    for seq in per_thread.values():
        assert seq == [(corr, site) for corr, _ in seq[::2] for site in ("enter", "exit")]


# ---- libncclprobe_cupti.so through cupti_app ------------------------------------------------

LAUNCH_CBID = {"cudaLaunchKernel": CBID_LAUNCH, "cudaGraphLaunch": CBID_GRAPH}
GPU_CATEGORY = {"kernel": "GPU_Kernel", "memcpy": "GPU_Memcpy", "memset": "GPU_Memset"}


class AppRun:
    """One cupti_app run: its process, the trace the library wrote and the truth."""

    def __init__(self, proc, stdout, stderr, trace_path, truth_path, t0, t1):
        self.pid, self.returncode = proc.pid, proc.returncode
        self.stdout, self.stderr = stdout, stderr
        self.trace_path = trace_path
        self.t0, self.t1 = t0, t1  # CLOCK_MONOTONIC around the run
        lines = read_jsonl(truth_path)
        self.calls = [x for x in lines if "api" in x]
        self.dropped = next(x["dropped"] for x in lines if "dropped" in x)

    @property
    def trace(self):
        return json.loads(self.trace_path.read_text())


def run_app(tmp_path, *args, env=None):
    trace, truth = tmp_path / "trace.json", tmp_path / "truth.jsonl"
    env = {**os.environ, "NCCLPROBE_CUPTI_OUTPUT": str(trace), **(env or {})}
    env.pop("NCCLPROBE_CUPTI_LIBRARY", None)  # cupti_app points it at the double
    t0 = time.monotonic_ns()
    proc = subprocess.Popen([str(APP), "--injection", str(CUPTI_LIB), "--expect", str(truth),
                             *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    out, err = proc.communicate(timeout=60)
    t1 = time.monotonic_ns()
    assert proc.returncode == 0, err
    return AppRun(proc, out, err, trace, truth, t0, t1)


def expected_gpu_events(calls):
    out = []
    for call in calls:
        for g in call["gpu"]:
            out.append((GPU_CATEGORY[g["type"]], call["correlation_id"], g.get("name"),
                        g["start_ns"], g["end_ns"], g["device"], g["stream"], g["graph_id"],
                        g["graph_node_id"], g.get("bytes"), g.get("copy_kind")))
    return sorted(out, key=str)


def actual_gpu_events(trace):
    out = []
    for e in trace["traceEvents"]:
        if e["cat"] not in GPU_CATEGORY.values():
            continue
        a = e["args"]
        # ts/dur are the same times in microseconds
        assert round(e["ts"] * 1000) == a["start_ns"], e
        assert round(e["dur"] * 1000) == a["end_ns"] - a["start_ns"], e
        out.append((e["cat"], a["correlationId"],
                    e["name"] if e["cat"] == "GPU_Kernel" else None,
                    a["start_ns"], a["end_ns"], a["device"], a["stream"], a["graphId"],
                    a["graphNodeId"], a.get("bytes"), a.get("copyKind")))
    return sorted(out, key=str)


def runtime_events(trace):
    return [e for e in trace["traceEvents"] if e["cat"] == "CUDA_Runtime"]


def assert_trace_matches_truth(run):
    trace = run.trace
    assert run.calls
    launches = [c for c in run.calls if c["api"] in LAUNCH_CBID]
    assert {e["cat"] for e in trace["traceEvents"]} <= {"CUDA_Runtime", *GPU_CATEGORY.values()}
    got = sorted((e["args"]["correlationId"], e["name"], e["args"]["cbid"], e["tid"], e["pid"])
                 for e in runtime_events(trace))
    want = sorted((c["correlation_id"], c["api"], LAUNCH_CBID[c["api"]], c["tid"], run.pid)
                  for c in launches)
    assert got == want
    assert actual_gpu_events(trace) == expected_gpu_events(run.calls)
    assert trace["otherData"]["dropped_records"] == run.dropped
    # the library's timestamp callback put CPU and GPU times on CLOCK_MONOTONIC
    for e in trace["traceEvents"]:
        assert run.t0 <= e["ts"] * 1000 <= run.t1, e


SCENARIO_CALLS = {  # API calls per iteration (per thread for "threads")
    "eager": Counter(cudaLaunchKernel=1),
    "graph": Counter(cudaGraphLaunch=1),
    "memcpy": Counter(cudaMemcpyAsync=1, cudaMemsetAsync=1),
    "threads": Counter(cudaLaunchKernel=1),
    "mixed": Counter(cudaLaunchKernel=1, cudaGraphLaunch=1, cudaMemcpyAsync=1,
                     cudaMemsetAsync=1),
}


@needs_injection
@pytest.mark.parametrize("scenario", sorted(SCENARIO_CALLS))
def test_trace_matches_truth(tmp_path, scenario):
    iters, threads = 6, 4
    run = run_app(tmp_path, "--scenario", scenario, "--iters", iters, "--threads", threads)
    scale = iters * (threads if scenario == "threads" else 1)
    want = Counter({api: n * scale for api, n in SCENARIO_CALLS[scenario].items()})
    assert Counter(c["api"] for c in run.calls) == want  # the truth is what was asked for
    assert_trace_matches_truth(run)
    if scenario == "threads":
        assert len({c["tid"] for c in run.calls}) == threads
        assert run.pid not in {c["tid"] for c in run.calls}  # launched off the main thread


@needs_injection
def test_out_of_order_buffers(tmp_path):
    run = run_app(tmp_path, "--scenario", "mixed", "--iters", 4, "--reverse-buffers")
    assert_trace_matches_truth(run)
    order = [e["args"]["correlationId"] for e in run.trace["traceEvents"]]
    assert order != sorted(order)  # the buffers really did arrive last first


@needs_injection
@pytest.mark.parametrize("scenario", ["eager", "threads"])
def test_dropped_records_reported(tmp_path, scenario):
    run = run_app(tmp_path, "--scenario", scenario, "--iters", 3, "--threads", 2, "--drop", 7)
    assert run.dropped == 7
    assert_trace_matches_truth(run)


@needs_injection
def test_busy_cupti_keeps_the_library_out(tmp_path):
    holder = "torch.profiler (Kineto)"
    run = run_app(tmp_path, "--scenario", "mixed", "--iters", 2,
                  env={"CUPTI_REPLAY_BUSY": holder})
    assert "InitializeInjection returned 0" in run.stderr
    ours = [x for x in run.stderr.splitlines() if not x.startswith("cupti_app:")]
    assert len(ours) == 1 and holder in ours[0], run.stderr
    assert "calls=" in run.stdout  # the app ran normally
    assert len(run.calls) == 8
    if run.trace_path.exists():
        assert run.trace["traceEvents"] == []


@needs_injection
def test_app_without_injection_runs_the_same_script(tmp_path):
    """The truth does not depend on the library: same calls, ids and GPU records."""
    truth = tmp_path / "truth.jsonl"
    proc = subprocess.run([str(APP), "--scenario", "mixed", "--iters", "2", "--expect",
                           str(truth)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    calls = [x for x in read_jsonl(truth) if "api" in x]
    assert [c["correlation_id"] for c in calls] == list(range(1, 9))
    with_lib = run_app(tmp_path, "--scenario", "mixed", "--iters", 2)
    assert shape(with_lib.calls) == shape(calls)


def shape(calls):
    """The calls without their times and threads."""
    return [(c["api"], c["correlation_id"], c.get("grid"),
             [(g["type"], g.get("name"), g["graph_node_id"]) for g in c["gpu"]]) for c in calls]


# ---- cupti_app --scenario capture: a CUDA graph captured through the driver double ---------

CAPTURED = [("attn_kernel", "capture_attention"), ("gemm_kernel", "capture_mlp"),
            ("mlp_kernel", "capture_mlp"), ("gemm_kernel", "capture_proj")]


def capture_truth(tmp_path, *args):
    truth = tmp_path / "capture.jsonl"
    proc = subprocess.run([str(APP), "--scenario", "capture", "--expect", str(truth), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc, read_jsonl(truth)


@pytest.mark.parametrize("announced", [True, False])
def test_capture_scenario_truth(tmp_path, announced):
    proc, rows = capture_truth(tmp_path, "--iters", "3", *([] if announced else
                                                           ["--no-graph-nodes"]))
    assert f"scenario=capture calls={4 + 1 + 3}" in proc.stdout
    captured = [r for r in rows if r.get("captured")]
    eager = [r for r in rows if r.get("api") == "cuLaunchKernel" and not r.get("captured")]
    replays = [r for r in rows if r.get("api") == "cuGraphLaunch"]
    assert rows[-1] == {"dropped": 0} and len(rows) == 4 + 1 + 3 + 1
    assert [(r["kernel"], r["capture_site"]) for r in captured] == CAPTURED
    assert [r["graph_node_id"] for r in captured] == ([101, 102, 103, 104] if announced
                                                      else [0] * 4)
    assert all(r["gpu"] == [] for r in captured)
    assert [r["correlation_id"] for r in rows[:-1]] == list(range(1, 9))
    e, = eager
    assert [(g["name"], g["graph_id"], g["graph_node_id"]) for g in e["gpu"]] == [
        ("mlp_kernel", 0, 0)]
    assert [r["replay"] for r in replays] == [0, 1, 2]
    durations = []
    for r in replays:
        assert [(g["name"], g["capture_site"], g["graph_id"], g["graph_node_id"], g["device"],
                 g["stream"]) for g in r["gpu"]] == [
            (k, site, 2, 1001 + i, 0, 9) for i, (k, site) in enumerate(CAPTURED)]
        starts = [g["start_ns"] for g in r["gpu"]]
        order = sorted(range(4), key=lambda i: starts[i])
        # with the nodes announced, capture_proj's gemm runs before capture_mlp's
        assert order == ([0, 3, 1, 2] if announced else [0, 1, 2, 3])
        durations += [g["end_ns"] - g["start_ns"] for g in r["gpu"]]
    durations += [g["end_ns"] - g["start_ns"] for g in e["gpu"]]
    assert len(set(durations)) == len(durations)
    # replays on one stream one after another
    spans = [(min(g["start_ns"] for g in r["gpu"]), max(g["end_ns"] for g in r["gpu"]))
             for r in replays]
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
    assert {r["tid"] for r in rows[:-1]} == {proc_tid(proc)}


def proc_tid(proc):
    return int(proc.stdout.split("tid=")[1].split()[0])


@needs_injection
@pytest.mark.parametrize("announced", [True, False])
def test_capture_scenario_trace(tmp_path, announced):
    """The library in file mode sees every driver call and every record of the capture
    scenario (captured launches have none)."""
    run = run_app(tmp_path, "--scenario", "capture", "--iters", 4,
                  *([] if announced else ["--no-graph-nodes"]))
    trace = run.trace
    driver = sorted((e["args"]["correlationId"], e["name"], e["tid"])
                    for e in trace["traceEvents"] if e["cat"] == "CUDA_Driver")
    assert driver == sorted((c["correlation_id"], c["api"], c["tid"]) for c in run.calls)
    assert actual_gpu_events(trace) == expected_gpu_events(run.calls)
    assert trace["otherData"]["dropped_records"] == 0
