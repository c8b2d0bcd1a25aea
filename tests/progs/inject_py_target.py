"""inject_py_target.py - the CPython target of tests/test_inject.py.

One thread holds the GIL in a pure-Python loop and checks its arithmetic;
the others rest where CPython threads rest: time.sleep (clock_nanosleep or
select), threading.Event.wait and queue.get with timeouts (futex waits on
the GIL's and the locks' condition variables), os.read on a pipe fed by a
writer thread (checked sequence). Sleeps must never end early. The main
thread reads stdin until EOF, then everything stops and is checked:
prints "RESULT OK" (exit 0) or "RESULT FAIL ..." (exit 1).
"""
import os
import queue
import struct
import sys
import threading
import time

stop = threading.Event()
errors = []
counts = {}


def chunk(seed):
    acc = seed
    for i in range(1000):
        acc = (acc * 31 + i) % 1000003
    return acc


def gil_loop():
    expect = [chunk(s) for s in range(7)]
    n = 0
    while not stop.is_set():
        if chunk(n % 7) != expect[n % 7]:
            errors.append("gil: integer arithmetic")
        if sum(range(1000)) != 499500 or 0.1 * 3 != 0.30000000000000004:
            errors.append("gil: arithmetic")
        n += 1
    counts["gil"] = n


def sleeper(name, seconds):
    n = 0
    while not stop.is_set():
        t0 = time.monotonic()
        time.sleep(seconds)
        took = time.monotonic() - t0
        if took < seconds:
            errors.append(f"{name}: woke early ({took:.6f} < {seconds})")
        if 1.0 / 3.0 != 0.3333333333333333:
            errors.append(f"{name}: float")
        n += 1
    counts[name] = n


def event_waiter():
    ev = threading.Event()
    n = 0
    while not stop.is_set():
        t0 = time.monotonic()
        if ev.wait(0.02):
            errors.append("event: set by nobody")
        if time.monotonic() - t0 < 0.02:
            errors.append("event: woke early")
        n += 1
    counts["event"] = n


def queue_worker(q):
    n = 0
    want = 0
    while not stop.is_set():
        try:
            v = q.get(timeout=0.05)
        except queue.Empty:
            continue
        if v != want:
            errors.append(f"queue: got {v} want {want}")
        want = v + 1
        n += 1
    counts["queue"] = n


def pipe_reader(fd):
    want = 0
    buf = b""
    while not stop.is_set() or buf:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 8:
            (v,) = struct.unpack("<Q", buf[:8])
            buf = buf[8:]
            if v != want:
                errors.append(f"pipe: got {v} want {want}")
            want = v + 1
    counts["pipe"] = want


def feeder(q, wfd):
    i = 0
    while not stop.is_set():
        q.put(i)
        os.write(wfd, struct.pack("<Q", i))
        i += 1
        time.sleep(0.003)
    os.close(wfd)


def main():
    q = queue.Queue()
    rfd, wfd = os.pipe()
    threads = [
        threading.Thread(target=gil_loop, name="gil"),
        threading.Thread(target=sleeper, args=("sleep10", 0.01)),
        threading.Thread(target=sleeper, args=("sleep50", 0.05)),
        threading.Thread(target=event_waiter),
        threading.Thread(target=queue_worker, args=(q,)),
        threading.Thread(target=pipe_reader, args=(rfd,)),
    ]
    feed = threading.Thread(target=feeder, args=(q, wfd))
    for t in threads + [feed]:
        t.start()
    print(f"READY {os.getpid()}", flush=True)
    while sys.stdin.buffer.read1(256):
        pass
    stop.set()
    for t in threads + [feed]:
        t.join()
    for name in ("gil", "sleep10", "sleep50", "event", "queue", "pipe"):
        if not counts.get(name):
            errors.append(f"{name}: no progress")
    print("COUNTS", counts, flush=True)
    if errors:
        print("RESULT FAIL", errors[:5], flush=True)
        sys.exit(1)
    print("RESULT OK", flush=True)


if __name__ == "__main__":
    main()
