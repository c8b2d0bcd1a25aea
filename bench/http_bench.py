#!/usr/bin/python3
"""http_bench.py - the cost of scraping `ncclprobe daemon`'s HTTP endpoints while it traces; run
through bench/http.sh.

    http_bench.py --build BUILD --launch-loop PATH [--rounds N] [--seconds S] [--rate R] [--out FILE]

One daemon (http_listen on a free loopback port, cpu_budget = 100 so nothing is rate limited,
include_comm = the loop's name only). Each round runs launch_loop at --rate for --seconds twice,
in alternating order: once with nobody scraping, once with GET /metrics and
GET /pprof/launches?seconds=1 every second (what Prometheus plus Parca or Alloy would do, at a
tighter interval than either's default). Per run: the daemon's CPU time (all its threads,
/proc/PID/task/*/schedstat) over the run's wall time, the launches the loop made, the launches
/metrics counted and the drops it reports for the loop's pid. Ratios are scraped / unscraped
within the same round. Standard library only; every process started is stopped on every path.
"""
import argparse
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (cpu_ns)

COMM = "nphttp_loop"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=30):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read()


def pid_value(port, name, pid, extra=""):
    try:
        text = get(port, "/metrics").decode()
    except OSError:  # 503 before the first rendering
        return None
    total = None
    for m in re.finditer(rf'^{name}\{{pid="{pid}",[^}}]*{extra}[^}}]*\}} (\S+)$', text, re.M):
        total = (total or 0) + float(m.group(1))
    return total


def wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise SystemExit(f"http_bench.py: timed out waiting for {what}")


class Scraper(threading.Thread):
    """GET /metrics and /pprof/launches?seconds=1 every second until stopped."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.requests, self.bytes = port, threading.Event(), 0, 0

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            for path in ("/metrics", "/pprof/launches?seconds=1"):
                self.bytes += len(get(self.port, path))
                self.requests += 1
            time.sleep(max(0.0, 1 - (time.monotonic() - t0)))


def counted_at_least(port, pid, want, timeout):
    """The loop's launches in /metrics once they reach want (or after timeout: what is there)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pid_value(port, "ncclprobe_launches_total", pid) or 0
        if v >= want or time.monotonic() > deadline:
            return v
        time.sleep(0.1)


def read_until(stream, word):
    for line in stream:
        if word in line:
            return line
    raise SystemExit(f"http_bench.py: launch_loop ended before '{word}'")


def one_run(args, port, daemon_pid, loop_path, scrape):
    """One timed run: the loop waits (--pause) after its warm-up and after its result line,
    so the counters are read exactly around the timed launches, before it exits."""
    warmup = 1000
    loop = subprocess.Popen([loop_path, "--rate", str(args.rate), "--duration", str(args.seconds),
                             "--iters", str(10**9), "--warmup", str(warmup), "--wait-signal",
                             "--pause"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        read_until(loop.stdout, "ready")
        wait(lambda: pid_value(port, "ncclprobe_target_info", loop.pid) is not None, 30,
             "the loop traced")
        os.kill(loop.pid, signal.SIGUSR1)  # the warm-up
        read_until(loop.stdout, "warm")
        c0 = counted_at_least(port, loop.pid, warmup, 20)
        d0 = pid_value(port, "ncclprobe_target_dropped_total", loop.pid, 'reason="ring_buffer"')
        scraper = Scraper(port) if scrape else None
        cpu0, t0 = bench.cpu_ns(daemon_pid), time.monotonic()
        if scraper:
            scraper.start()
        os.kill(loop.pid, signal.SIGUSR1)  # the timed launches
        m = re.search(r"launches=(\d+)", read_until(loop.stdout, "launches="))
        wall = time.monotonic() - t0
        cpu = bench.cpu_ns(daemon_pid) - cpu0
        if scraper:
            scraper.stop.set()
            scraper.join()
        made = int(m.group(1)) if m else 0
        counted = counted_at_least(port, loop.pid, c0 + made, 30) - c0
        d1 = pid_value(port, "ncclprobe_target_dropped_total", loop.pid, 'reason="ring_buffer"')
        os.kill(loop.pid, signal.SIGUSR1)  # exit
        loop.wait(timeout=30)
        return {"cpu_pct": 100 * cpu / 1e9 / wall, "cpu_ns": cpu, "made": made,
                "counted": counted, "drops": (d1 or 0) - (d0 or 0),
                "requests": scraper.requests if scraper else 0}
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--launch-loop", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rate", type=int, default=50000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="np-http-bench-")
    link = os.path.join(tmp, COMM)
    os.symlink(args.launch_loop, link)
    port = free_port()
    conf = os.path.join(tmp, "ncclprobe.conf")
    with open(conf, "w") as f:
        f.write(f"output_dir = {tmp}/out\nctl_socket = {tmp}/ctl.sock\n"
                f"cupti_socket = {tmp}/cupti.sock\ninclude_comm = {COMM}\ncpu_budget = 100\n"
                f"http_listen = 127.0.0.1:{port}\n")
    err = open(os.path.join(tmp, "daemon.err"), "w")
    daemon = subprocess.Popen([os.path.join(args.build, "ncclprobe"), "daemon", "--config", conf],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    results = {False: [], True: []}
    try:
        wait(lambda: _healthy(port), 60, "the daemon's /healthz")
        for r in range(args.rounds):
            for scrape in ((False, True) if r % 2 == 0 else (True, False)):
                res = one_run(args, port, daemon.pid, link, scrape)
                results[scrape].append(res)
                print(f"round {r + 1} {'scraped  ' if scrape else 'unscraped'}: "
                      f"daemon {res['cpu_pct']:.1f}% of a core, {res['made']} launches made, "
                      f"{res['counted']:.0f} counted, {res['drops']:.0f} dropped, "
                      f"{res['requests']} requests", file=sys.stderr, flush=True)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    report(args, results)


def _healthy(port):
    try:
        return get(port, "/healthz", timeout=2) == b"ok\n"
    except OSError:
        return False


def report(args, results):
    ratios = [s["cpu_ns"] / s["made"] / (u["cpu_ns"] / u["made"])
              for s, u in zip(results[True], results[False]) if s["made"] and u["made"]]
    lines = [
        "# Scraping the daemon's HTTP endpoints (bench/http.sh)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
        f"{os.cpu_count()} CPUs, kernel {platform.release()}. launch_loop at {args.rate}/s for "
        f"{args.seconds} s per run, {args.rounds} rounds; in each round one run without scrapes "
        "and one with GET /metrics + GET /pprof/launches?seconds=1 every second, in "
        "alternating order. The machine is shared and loaded: compare within a round.",
        "",
        "| round | scraped | daemon CPU (% of a core) | daemon CPU ns/launch | launches made | "
        "counted in /metrics | dropped | requests |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in range(len(results[True])):
        for scrape in (False, True):
            x = results[scrape][r]
            lines.append(f"| {r + 1} | {'yes' if scrape else 'no'} | {x['cpu_pct']:.1f} | "
                         f"{x['cpu_ns'] / max(x['made'], 1):.0f} | {x['made']} | "
                         f"{x['counted']:.0f} | {x['drops']:.0f} | {x['requests']} |")
    added = [s["drops"] - u["drops"] for s, u in zip(results[True], results[False])]
    lines += ["",
              f"Daemon CPU per launch, scraped / unscraped (same round): "
              f"{', '.join(f'{x:.3f}' for x in ratios)}; median "
              f"{statistics.median(ratios) if ratios else float('nan'):.3f}.",
              f"Drops added by scraping (scraped - unscraped, per round): {added}.",
              ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
