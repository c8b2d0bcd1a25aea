#!/usr/bin/env python3
"""py_nccl: Python workload driving libfakenccl.so through ctypes, like PyTorch's ProcessGroupNCCL.

A small "model" whose named methods call NCCL through a ProcessGroupNCCL-like wrapper:

    <module> -> main -> train_step -> DDP.all_reduce_grads       -> ProcessGroupNCCL.allreduce
                                   -> DDP.all_reduce_coalesced   -> ProcessGroupNCCL.allreduce_coalesced
                                   -> TensorParallel.all_gather  -> ProcessGroupNCCL.allgather
                                   -> TensorParallel.reduce_scatter -> ProcessGroupNCCL.reduce_scatter
                                   -> PipelineParallel.exchange  -> ProcessGroupNCCL.send_recv

Per iteration (libfakenccl.so plans, see tests/progs/README.md):
  DDP.all_reduce_grads        ncclAllReduce(0x7100000, 0x7200000, 262144, float32, sum, s 0x6001)
  DDP.all_reduce_coalesced    ncclGroupStart; ncclAllReduce x3 (bfloat16 sum: 4096 / 65536 /
                              1048576 elements, s 0x6001); ncclGroupEnd -> one plan, 3 coll tasks
  TensorParallel.all_gather   ncclAllGather(0x7500000, 0x7600000, 8192, bfloat16, s 0x6002)
  TensorParallel.reduce_scatter ncclReduceScatter(0x7700000, 0x7800000, 4096, float32, sum, s 0x6002)
  PipelineParallel.exchange   ncclGroupStart; ncclSend(0x7900000, 2048, float16, next);
                              ncclRecv(0x7a00000, 2048, float16, prev); ncclGroupEnd -> one plan
with next = (rank + 1) % nranks, prev = (rank - 1) % nranks. The communicator (id 7) is created
before the --wait-signal wait. Prints at the end, per model function: py fn=<qualname> calls=<n>
Exit codes: 0 ok, 2 usage, 4 a NCCL call failed or the library could not be loaded.
Runs on CPython 3.10-3.13, stdlib only.
"""

import argparse
import contextlib
import ctypes
import os
import signal
import sys

# nccl.h values (NCCL 2.28)
ncclSuccess = 0
ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg = range(5)
ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64 = range(6)
ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16 = 6, 7, 8, 9
FAKE_NCCL_FLAG_SYMMETRIC, FAKE_NCCL_FLAG_CE = 1, 2

COMM_ID = 7
DEFAULT_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "progs",
                           "libfakenccl.so")

CALLS = {}


def counted(name):
    CALLS[name] = CALLS.get(name, 0) + 1


class NcclError(RuntimeError):
    pass


def load(path):
    lib = ctypes.CDLL(path)
    vp, sz, i, u = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
    sigs = {
        "ncclCommInitRankFakeEx": [ctypes.POINTER(vp), i, i, u, ctypes.c_uint64],
        "ncclCommDestroy": [vp],
        "ncclAllReduce": [vp, vp, sz, i, i, vp, vp],
        "ncclAllGather": [vp, vp, sz, i, vp, vp],
        "ncclReduceScatter": [vp, vp, sz, i, i, vp, vp],
        "ncclSend": [vp, sz, i, i, vp, vp],
        "ncclRecv": [vp, sz, i, i, vp, vp],
        "ncclGroupStart": [],
        "ncclGroupEnd": [],
    }
    for name, argtypes in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    return lib


def check(what, rc):
    if rc != ncclSuccess:
        raise NcclError(f"{what} failed: {rc}")


class ProcessGroupNCCL:
    """The ctypes side: one communicator, PyTorch-like method names."""

    def __init__(self, lib, nranks, rank, flags=0, comm_id=COMM_ID):
        self.lib = lib
        self.rank, self.nranks = rank, nranks
        self.comm = ctypes.c_void_p()
        check("ncclCommInitRankFakeEx",
              lib.ncclCommInitRankFakeEx(ctypes.byref(self.comm), nranks, rank, flags, comm_id))

    def allreduce(self, send, recv, count, dtype, op, stream):
        check("ncclAllReduce", self.lib.ncclAllReduce(send, recv, count, dtype, op, self.comm, stream))

    @contextlib.contextmanager
    def coalescing(self):
        check("ncclGroupStart", self.lib.ncclGroupStart())
        try:
            yield
        finally:
            check("ncclGroupEnd", self.lib.ncclGroupEnd())

    def allreduce_coalesced(self, tensors, dtype, op, stream):
        with self.coalescing():
            for send, recv, count in tensors:
                self.allreduce(send, recv, count, dtype, op, stream)

    def allgather(self, send, recv, count, dtype, stream):
        check("ncclAllGather", self.lib.ncclAllGather(send, recv, count, dtype, self.comm, stream))

    def reduce_scatter(self, send, recv, count, dtype, op, stream):
        check("ncclReduceScatter",
              self.lib.ncclReduceScatter(send, recv, count, dtype, op, self.comm, stream))

    def send_recv(self, send, recv, count, dtype, dst, src, stream):
        with self.coalescing():
            check("ncclSend", self.lib.ncclSend(send, count, dtype, dst, self.comm, stream))
            check("ncclRecv", self.lib.ncclRecv(recv, count, dtype, src, self.comm, stream))

    def destroy(self):
        check("ncclCommDestroy", self.lib.ncclCommDestroy(self.comm))


class DDP:
    def __init__(self, pg):
        self.pg = pg

    def all_reduce_grads(self):
        counted("DDP.all_reduce_grads")
        self.pg.allreduce(0x7100000, 0x7200000, 262144, ncclFloat32, ncclSum, 0x6001)

    def all_reduce_coalesced(self):
        counted("DDP.all_reduce_coalesced")
        buckets = [(0x7300000, 0x7310000, 4096), (0x7320000, 0x7330000, 65536),
                   (0x7340000, 0x7350000, 1048576)]
        self.pg.allreduce_coalesced(buckets, ncclBfloat16, ncclSum, 0x6001)


class TensorParallel:
    def __init__(self, pg):
        self.pg = pg

    def all_gather(self):
        counted("TensorParallel.all_gather")
        self.pg.allgather(0x7500000, 0x7600000, 8192, ncclBfloat16, 0x6002)

    def reduce_scatter(self):
        counted("TensorParallel.reduce_scatter")
        self.pg.reduce_scatter(0x7700000, 0x7800000, 4096, ncclFloat32, ncclSum, 0x6002)


class PipelineParallel:
    def __init__(self, pg):
        self.pg = pg

    def exchange(self):
        counted("PipelineParallel.exchange")
        nxt = (self.pg.rank + 1) % self.pg.nranks
        prev = (self.pg.rank - 1) % self.pg.nranks
        self.pg.send_recv(0x7900000, 0x7a00000, 2048, ncclFloat16, nxt, prev, 0x6003)


FUNCTIONS = ["DDP.all_reduce_grads", "DDP.all_reduce_coalesced", "TensorParallel.all_gather",
             "TensorParallel.reduce_scatter", "PipelineParallel.exchange"]


def train_step(ddp, tp, pp):
    ddp.all_reduce_grads()
    ddp.all_reduce_coalesced()
    tp.all_gather()
    tp.reduce_scatter()
    pp.exchange()


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default=DEFAULT_LIB,
                        help="libfakenccl.so to load (default: build/progs/libfakenccl.so)")
    parser.add_argument("--iters", type=int, default=10, help="training steps (default 10)")
    parser.add_argument("--rank", type=int, default=0, help="this rank (default 0)")
    parser.add_argument("--nranks", type=int, default=2, help="communicator size (default 2)")
    parser.add_argument("--wait-signal", action="store_true",
                        help='print "ready <pid>", then wait for SIGUSR1 before the first step')
    args = parser.parse_args()
    if args.iters < 0 or args.nranks < 1 or not 0 <= args.rank < args.nranks:
        parser.error("need --iters >= 0, --nranks >= 1 and 0 <= --rank < --nranks")
    return args


def main():
    args = parse_args()
    try:
        lib = load(args.lib)
        pg = ProcessGroupNCCL(lib, args.nranks, args.rank)
    except (OSError, AttributeError, NcclError) as e:
        print(f"py_nccl: {e}", file=sys.stderr)
        return 4
    ddp, tp, pp = DDP(pg), TensorParallel(pg), PipelineParallel(pg)

    if args.wait_signal:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        print(f"ready {os.getpid()}", flush=True)
        signal.sigwait({signal.SIGUSR1})

    try:
        for _ in range(args.iters):
            train_step(ddp, tp, pp)
        pg.destroy()
    except NcclError as e:
        print(f"py_nccl: {e}", file=sys.stderr)
        return 4
    for name in FUNCTIONS:
        print(f"py fn={name} calls={CALLS.get(name, 0)}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
