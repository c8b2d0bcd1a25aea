"""NCCL probes: the real libnccl.so.2 of the toolkit (attach, static cudart
inside it, the local ncclLaunchKernel symbol, real API arguments) and
libfakenccl.so, a test double with NCCL's names and signatures, for every
argument end to end. Expected values are the calls in tests/progs/nccl_user.c."""

from pathlib import Path

import pytest

from conftest import PROGS, Workload, needs_bpf, record, record_attached, thread_lines

pytestmark = needs_bpf

REAL_NCCL = Path("/usr/local/cuda/lib/libnccl.so.2")

# op -> (calling function in nccl_user, expected fields)
OPS = {
    "AllReduce": ("allreduce_grads", dict(count=1048576, datatype="float32", bytes=4194304,
                                          redop="sum", root=-1, peer=-1, stream="0x5010",
                                          sendbuff="0x1000", recvbuff="0x2000")),
    "AllGather": ("gather_params", dict(count=4096, datatype="bfloat16", bytes=8192, redop="",
                                        root=-1, peer=-1, stream="0x5011")),
    "ReduceScatter": ("scatter_grads", dict(count=2048, datatype="float16", bytes=4096,
                                            redop="max", root=-1, peer=-1, stream="0x5012")),
    "Broadcast": ("bcast_weights", dict(count=512, datatype="int32", bytes=2048, redop="",
                                        root=0, peer=-1, stream="0x5013")),
    "Send": ("exchange", dict(count=100, datatype="int8", bytes=100, root=-1, peer=1,
                              stream="0x5014", sendbuff="0x1000")),
    "Recv": ("exchange", dict(count=100, datatype="int8", bytes=100, root=-1, peer=1,
                              stream="0x5014", sendbuff="0x2000")),
    "GroupStart": ("exchange", {}),
    "GroupEnd": ("exchange", {}),
}


def test_every_nccl_call_and_argument_through_the_test_double(tmp_path):
    rec = record(tmp_path, ["--", PROGS / "nccl_user", "--iters", "3"])
    assert rec.returncode == 0, rec.stderr
    printed = thread_lines(rec.stdout, key="op", value="calls")
    ops = rec.jsonl("nccl.jsonl")
    stacks = rec.stacks()
    got = {}
    for op in ops:
        caller, fields = OPS[op["op"]]
        for key, value in fields.items():
            assert op[key] == value, (op["op"], key, op)
        # the application's chain down to the API call
        assert stacks[op["stack_id"]][-4:] == ["main", "train_step", caller,
                                               "nccl" + op["op"]], op
        got[(op["tid"], op["op"])] = got.get((op["tid"], op["op"]), 0) + 1
    assert got == printed
    comms = {op["comm"] for op in ops if op["op"] not in ("GroupStart", "GroupEnd")}
    assert len(comms) == 1 and comms != {"0x0"}

    # Every collective outside a group launches once from inside its API
    # call; the group's two p2p ops launch from ncclGroupEnd.
    launches = rec.folded()
    for op in ("AllReduce", "AllGather", "ReduceScatter", "Broadcast"):
        key = f"{OPS[op][0]};nccl{op};ncclLaunchKernel;[GPU_Kernel]<nccl kernel>"
        assert sum(c for s, c in launches.items() if s.endswith(key)) == 3, launches
    key = "exchange;ncclGroupEnd;ncclLaunchKernel;[GPU_Kernel]<nccl kernel>"
    assert sum(c for s, c in launches.items() if s.endswith(key)) == 6
    assert rec.summary["totals"]["nccl_ops"] == len(ops) == 8 * 3


@pytest.mark.skipif(not REAL_NCCL.exists(), reason=f"{REAL_NCCL} not installed")
def test_real_libnccl_attaches_and_reports_api_arguments(tmp_path, workloads):
    w = Workload([PROGS / "nccl_user", "--iters", "4", "--real-nccl", REAL_NCCL,
                  "--wait-signal"])
    workloads.append(w)
    rec, out, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    assert "rc=4" in out  # ncclInvalidArgument: comm is NULL, no GPU

    real = [p for p in rec.summary["probes"] if p["library"].endswith("libnccl.so.2")]
    by_symbol = {p["symbol"]: p for p in real}
    # the launch funnel, a local .symtab-only C++ symbol
    assert by_symbol["_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan"]["attached"]
    # cudart is linked statically into libnccl: probed there too
    for symbol in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaGetFuncBySymbol"):
        assert by_symbol[symbol]["attached"], symbol
    for symbol in ("ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
                   "ncclReduce", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"):
        assert by_symbol[symbol]["attached"], symbol
    assert all(p["attached"] for p in real)

    ops = [op for op in rec.jsonl("nccl.jsonl") if op["op"] == "AllReduce"]
    assert len(ops) == 4 == thread_lines(out, key="op", value="calls")[(w.pid, "AllReduce")]
    for op in ops:
        for key, value in OPS["AllReduce"][1].items():
            assert op[key] == value, (key, op)
        assert op["comm"] == "0x0"
    assert by_symbol["ncclAllReduce"]["hits"] == 4
