"""The daemon's HTTP endpoints (docs/daemon.md, "HTTP"), end to end: real BPF, the toolkit's
real libcudart.so.13, a real Python workload (tests/progs/http_launcher.py, which says when it
launched), a real Prometheus scraping /metrics, `go tool pprof` reading /pprof/launches, and
hostile clients on real sockets.

Expected values come from the workload (the launches it made and when) and from the
specification, never from ncclprobe itself. Each daemon traces only the workloads of this file:
they run as a symlink to the interpreter named nphttp*, and the daemon's include_comm says so."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from lib.daemon import Daemon, set_folded
from lib.paths import CUPTI_LIB, NCCLPROBE, PROGS, PROGS_ENV, REPO
from lib.processes import wait_for
from lib.run import go_pprof
from lib.skip import needs_bpf, needs_real_cudart

pytestmark = [needs_bpf, needs_real_cudart]

WORKLOAD = REPO / "tests/progs/http_launcher.py"
PYTHON = Path("/usr/bin/python3")
# http_launcher.py's chain down to the launch (its docstring), as folded frames end it
PY_CHAIN = ["serve", "burst", "launch_one"]


# ---- helpers -------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launcher:
    """http_launcher.py run as `comm` (a symlink to the interpreter): burst(n) launches n
    times and returns (n, first_ns, last_ns) in CLOCK_MONOTONIC."""

    def __init__(self, tmp_path, comm="nphttp"):
        link = tmp_path / comm
        if not link.exists():
            link.symlink_to(os.path.realpath(PYTHON))
        self.proc = subprocess.Popen([str(link), str(WORKLOAD)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("ready "), line
        self.pid = self.proc.pid
        self.total = 0

    def burst(self, n):
        self.proc.stdin.write(f"launch {n}\n")
        self.proc.stdin.flush()
        words = self.proc.stdout.readline().split()
        assert words[:2] == ["launched", str(n)], words
        self.total += n
        return n, int(words[2]), int(words[3])

    def quit(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def http_daemon(tmp_path, port, name="d", **conf):
    conf.setdefault("include_comm", "nphttp*")
    return Daemon(tmp_path / name, http_listen=f"127.0.0.1:{port}", **conf)


def get(port, path, headers=None, timeout=30):
    """(status, headers, body bytes) of GET path."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def try_get(port, path):
    """The status of GET path; None while nothing listens."""
    try:
        return get(port, path, timeout=5)[0]
    except (urllib.error.URLError, ConnectionError):
        return None


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metrics(port, auth=None):
    """/metrics as {(name, frozenset(labels)): value}; every line must be a comment or a
    sample of the text format."""
    status, headers, body = get(port, "/metrics", auth)
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ ", line), line
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def pid_series(values, name, pid):
    return {k: v for k, v in values.items() if k[0] == name and ("pid", str(pid)) in k[1]}


def launches_of(port, pid, auth=None):
    s = pid_series(metrics(port, auth), "ncclprobe_launches_total", pid)
    return sum(s.values()) if s else None


def wait_traced(daemon, pid):
    daemon.wait_traced(pid, timeout=30)


# `go tool pprof -raw`: samples with their labels, and the locations' functions
RAW_SAMPLE = re.compile(r"^ +(-?\d+(?: +-?\d+)*): ([\d ]+)$")
RAW_LABEL = re.compile(r"^ +(\w+):\[(.*)\]$")
RAW_LOC = re.compile(r"^ *(\d+): 0x[0-9a-f]+ (?:M=\d+ )?(.*) (\S*):(-?\d+) s=")


def raw_profile(tmp_path, path):
    """[(values, [functions leaf first], {label: value})] of the profile at path."""
    text = go_pprof(tmp_path, "-raw", path)
    samples, locs, section = [], {}, None
    for line in text.splitlines():
        if line in ("Samples:", "Locations", "Mappings"):
            section = line
            continue
        if section == "Samples:" and RAW_SAMPLE.match(line):
            m = RAW_SAMPLE.match(line)
            samples.append(([int(v) for v in m.group(1).split()],
                            [int(i) for i in m.group(2).split()], {}))
        elif section == "Samples:" and RAW_LABEL.match(line) and samples:
            m = RAW_LABEL.match(line)
            samples[-1][2][m.group(1)] = m.group(2)
        elif section == "Locations" and RAW_LOC.match(line):
            m = RAW_LOC.match(line)
            locs[int(m.group(1))] = (m.group(2), m.group(3), int(m.group(4)))
    return [(v, [locs[i] for i in ids], labels) for v, ids, labels in samples]


PY_FRAME = re.compile(r"^(.*) \((\S+):(\d+)\)$")


def as_location(frame):
    """A folded frame as pprof names it: (function, file, line)."""
    m = PY_FRAME.match(frame)
    return (m.group(1), m.group(2), int(m.group(3))) if m else (frame, "", 0)


def fetch_profile(port, seconds, kind="launches", auth=None):
    """(status, (window start ns, end ns) or None, body) of /pprof/KIND?seconds=N."""
    status, headers, body = get(port, f"/pprof/{kind}?seconds={seconds}", auth,
                                timeout=seconds + 30)
    window = headers.get("X-Ncclprobe-Window-Monotonic-Ns")
    return status, tuple(map(int, window.split())) if window else None, body


class Served:
    """A daemon whose endpoints need a bearer token (a 0600 file)."""

    def __init__(self, root):
        self.token = root / "token"
        self.token.write_text("s3cret-token\n")
        self.token.chmod(0o600)
        self.auth = {"Authorization": "Bearer s3cret-token"}
        self.port = free_port()
        self.daemon = http_daemon(root, self.port, http_token_file=self.token)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One daemon for the tests that look only at their own processes and requests."""
    s = Served(tmp_path_factory.mktemp("served"))
    yield s
    s.daemon.kill()
    s.daemon.assert_clean()


# ---- /metrics and a real Prometheus ---------------------------------------------------------

PROM_CONFIG = """global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ncclprobe
    scrape_interval: 1s
    scrape_timeout: 1s
    authorization:
      type: Bearer
      credentials_file: {token}
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""


@pytest.fixture
def prometheus(tmp_path):
    """A function starting Prometheus on loopback, scraping 127.0.0.1:PORT every second;
    returns a query function (PromQL -> the API's result list)."""
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip("no prometheus (tools/install-deps.sh installs Debian's)")
    procs = []

    def start(port, token):
        conf = tmp_path / "prometheus.yml"
        conf.write_text(PROM_CONFIG.replace("{port}", str(port)).replace("{token}", str(token)))
        web = free_port()
        log = open(tmp_path / "prometheus.log", "w")
        procs.append(subprocess.Popen(
            [exe, f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{web}"], stdout=log, stderr=log))

        def query(promql):
            q = urllib.parse.urlencode({"query": promql})
            status, _, body = get(web, f"/api/v1/query?{q}")
            assert status == 200, body
            reply = json.loads(body)
            assert reply["status"] == "success", reply
            return reply["data"]["result"]

        wait_for(lambda: try_get(web, "/-/ready") == 200 if procs[0].poll() is None else
                 pytest.fail((tmp_path / "prometheus.log").read_text()), 60, "Prometheus ready")
        return query

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=30)


def test_prometheus_counts_the_launches_of_a_process(tmp_path, prometheus, served):
    d = served.daemon
    w = Launcher(tmp_path)
    try:
        wait_traced(d, w.pid)
        query = prometheus(served.port, served.token)
        w.burst(123)
        promql = f'sum(ncclprobe_launches_total{{pid="{w.pid}"}})'

        def seen(want):
            r = query(promql)
            return r and float(r[0]["value"][1]) == want
        wait_for(lambda: seen(123), 30, "Prometheus to see 123 launches", interval=0.5)
        # the per-API and per-kernel series of the same launches
        r = query(f'ncclprobe_launches_total{{pid="{w.pid}"}}')
        assert [(x["metric"]["api"], x["metric"]["comm"], x["value"][1]) for x in r] == \
            [("cudaLaunchKernel", "nphttp", "123")]
        r = query(f'ncclprobe_kernel_launches_total{{pid="{w.pid}"}}')
        assert [(x["metric"]["kernel"], x["value"][1]) for x in r] == \
            [("<unnamed 0x1234>", "123")]
        assert query('up{job="ncclprobe"}')[0]["value"][1] == "1"
        # a counter goes on from where it was while the process lives
        w.burst(77)
        wait_for(lambda: seen(200), 30, "Prometheus to see 200 launches", interval=0.5)
        r = query(f'ncclprobe_target_dropped_total{{pid="{w.pid}"}}')
        assert r and all(x["value"][1] == "0" for x in r), r
    finally:
        w.kill()


def test_metrics_series_go_with_the_process_and_restart_with_the_daemon(tmp_path):
    port = free_port()
    d = http_daemon(tmp_path, port, ring_buffer="8M")
    w = Launcher(tmp_path)
    try:
        wait_traced(d, w.pid)
        w.burst(40)
        wait_for(lambda: launches_of(port, w.pid) == 40, 20, "40 launches in /metrics")
        values = metrics(port)
        info = pid_series(values, "ncclprobe_target_info", w.pid)
        assert len(info) == 1 and ("comm", "nphttp") in next(iter(info))[1]
        assert ("container", "") in next(iter(info))[1]
        for name in ("ncclprobe_probe_hits_total", "ncclprobe_events_captured_total",
                     "ncclprobe_targets", "ncclprobe_daemon_cpu_seconds_total",
                     "ncclprobe_daemon_resident_memory_bytes", "ncclprobe_injected_agents"):
            assert (name, frozenset()) in values, name
        assert values[("ncclprobe_events_captured_total", frozenset())] >= 40
        assert values[("ncclprobe_targets", frozenset())] >= 1
        assert 0 < values[("ncclprobe_daemon_resident_memory_bytes", frozenset())] < 1 << 34
        # where records wait: the ring (the configured 8 MiB) and the reader's backlog
        assert values[("ncclprobe_ring_buffer_size_bytes", frozenset())] == 8 << 20
        assert 0 <= values[("ncclprobe_ring_buffer_used_bytes", frozenset())] <= 8 << 20
        assert values[("ncclprobe_reader_backlog_records", frozenset())] >= 0
        assert values[("ncclprobe_events_dropped_total", frozenset({("reason", "backlog")}))] == 0

        # a daemon restart: the new daemon counts from 0, the launches made after it came
        assert d.terminate()[0] == 0
        d = http_daemon(tmp_path, port, name="d2")
        wait_traced(d, w.pid)
        w.burst(25)
        wait_for(lambda: launches_of(port, w.pid) == 25, 20, "25 launches after the restart")

        # the process exits: its series go
        w.quit()
        wait_for(lambda: not [k for k in metrics(port) if ("pid", str(w.pid)) in k[1]], 30,
                 "the exited process's series to go")
    finally:
        w.kill()
        d.kill()
    d.assert_clean()


# ---- /pprof ---------------------------------------------------------------------------------

def at_fraction(fraction):
    """Sleeps until CLOCK_MONOTONIC's fraction of a second is `fraction`."""
    now = time.clock_gettime(time.CLOCK_MONOTONIC)
    time.sleep((fraction - now % 1) % 1)


def test_pprof_launches_is_the_window_after_the_request(tmp_path, served):
    port, d = served.port, served.daemon
    w = Launcher(tmp_path)
    try:
        wait_traced(d, w.pid)
        w.burst(3)  # before the request: never in its window
        results = {}

        def scrape(key, seconds):
            results[key] = fetch_profile(port, seconds, auth=served.auth)
        at_fraction(0.5)
        threads = [threading.Thread(target=scrape, args=(k, s)) for k, s in (("a", 3), ("b", 2))]
        for t in threads:
            t.start()
        bursts = []
        for n in (11, 13, 17, 19):  # one burst a second, in the middle of it
            at_fraction(0.5)
            bursts.append(w.burst(n))
        for t in threads:
            t.join(timeout=60)
        assert d.proc.poll() is None
    finally:
        w.quit()
        w.kill()
    for key, seconds in (("a", 3), ("b", 2)):
        status, window, body = results[key]
        assert status == 200, body
        assert window[1] - window[0] == seconds * 10**9
        # the bursts are mid-second, the window whole seconds: each burst is in it or not
        want = sum(n for n, first, last in bursts if window[0] <= first and last < window[1])
        assert want > 0
        profile = tmp_path / f"{key}.pb.gz"
        profile.write_bytes(body)
        samples = raw_profile(tmp_path, profile)
        ours = [s for s in samples if s[2].get("pid") == str(w.pid)]
        assert sum(s[0][0] for s in ours) == want, (key, window, bursts, ours)
        assert all(s[2]["comm"] == "nphttp" for s in ours)
    # the same stacks as the process's output set (its launches.folded), leaf first
    sets = d.written_sets(w.pid)
    recorded = Counter()
    for name in sets:
        for stack, n in set_folded(d.out / name).items():
            recorded[tuple(as_location(f) for f in reversed(stack))] += n
    assert sum(recorded.values()) == 3 + 11 + 13 + 17 + 19
    profile_stacks = {tuple(s[1]) for s in ours}
    assert profile_stacks and profile_stacks <= set(recorded)
    names = [f[0] for f in next(iter(profile_stacks))]
    assert names[0] == "[GPU_Kernel]<unnamed 0x1234>" and "cudaLaunchKernel" in names
    assert [n for n in names if n in PY_CHAIN] == list(reversed(PY_CHAIN))


def test_pprof_gpu_time_of_a_process_with_gpu_records(tmp_path, served):
    """py_cupti.py: its CUPTI answered by the TEST DOUBLE libcupti_replay.so (no GPU here),
    10 matmul launches of 1000 ns and 20 softmax ones of 300 ns (its docstring)."""
    d = served.daemon
    link = tmp_path / "nphttp_gpu"
    link.symlink_to(os.path.realpath(PYTHON))
    env = {**os.environ, "NCCLPROBE_CUPTI_SOCKET": str(d.root / "cupti.sock"),
           "CUDART_PATH": PROGS_ENV.get("CUDART_PATH", "")}
    app = subprocess.Popen([link, REPO / "tests/progs/py_cupti.py", CUPTI_LIB,
                            PROGS / "libcupti_replay.so", "--wait-signal"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert app.stdout.readline().startswith("ready")
        wait_traced(d, app.pid)
        wait_for(lambda: d.target(app.pid)["gpu"] == "active", 20, "its CUPTI library's hello")
        result = {}
        scrape = threading.Thread(target=lambda: result.update(
            r=fetch_profile(served.port, 4, "gpu_time", served.auth)))
        at_fraction(0.8)
        scrape.start()
        at_fraction(0.2)  # inside the window: it starts at the second boundary just passed
        app.send_signal(signal.SIGUSR1)
        out, err = app.communicate(timeout=60)
        assert "launches matmul=10 softmax=20" in out, (out, err)
        scrape.join(timeout=60)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
    status, window, body = result["r"]
    assert status == 200 and window
    profile = tmp_path / "gpu.pb.gz"
    profile.write_bytes(body)
    text = go_pprof(tmp_path, "-raw", profile)
    assert "gpu_time/nanoseconds[dflt]" in text, text
    ours = [s for s in raw_profile(tmp_path, profile) if s[2].get("pid") == str(app.pid)]
    launches, gpu_ns = Counter(), Counter()
    for values, frames, _ in ours:
        launches[frames[0][0]] += values[0]
        gpu_ns[frames[0][0]] += values[1]
    assert dict(launches) == {"[GPU_Kernel]matmul_kernel": 10, "[GPU_Kernel]softmax_kernel": 20}
    assert dict(gpu_ns) == {"[GPU_Kernel]matmul_kernel": 10 * 1000,
                            "[GPU_Kernel]softmax_kernel": 20 * 300}


def test_requests_that_are_not_served(served):
    port, auth = served.port, served.auth
    assert get(port, "/healthz", auth)[0:3:2] == (200, b"ok\n")
    status, _, body = get(port, "/nothing", auth)
    assert status == 404 and b"/metrics" in body
    for bad in ("0", "61", "x", "-1", "1.5", "", "99999999999999999999"):
        status, _, body = get(port, f"/pprof/launches?seconds={bad}", auth)
        assert status == 400, bad
        assert b"expected a whole number of seconds from 1 to 60" in body, body
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x", method="POST",
                                 headers=auth)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405


# ---- security -------------------------------------------------------------------------------

def test_bearer_token(tmp_path, served):
    port = served.port
    assert get(port, "/metrics")[0] == 401
    assert get(port, "/healthz", {"Authorization": "Bearer s3cret-tokem"})[0] == 401
    assert get(port, "/healthz", {"Authorization": "Bearer s3cret-token-and-more"})[0] == 401
    assert get(port, "/healthz", {"Authorization": "s3cret-token"})[0] == 401
    assert get(port, "/healthz", {"Authorization": "Bearer s3cret-token"})[0] == 200

    # a token file others may read is refused, before anything is loaded
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(0o644)
    d = http_daemon(tmp_path, free_port(), wait=False, http_token_file=token)
    assert d.exit_status() == 1
    assert f"http_token_file {token}: mode 0644 lets others read it" in d.stderr()


@pytest.mark.parametrize("listen,why", [
    ("0.0.0.0:{port}", "not a loopback address; stacks reveal code paths"),
    ("localhost:{port}", "is not a numeric IPv4 address"),
    ("127.0.0.1:0", "not ADDR:PORT"),
    ("127.0.0.1", "not ADDR:PORT"),
])
def test_listen_addresses_refused(tmp_path, listen, why):
    d = Daemon(tmp_path / "d", wait=False, include_comm="nphttp*",
               http_listen=listen.replace("{port}", str(free_port())))
    assert d.exit_status() == 1
    assert why in d.stderr(), d.stderr()


# ---- hostile clients ------------------------------------------------------------------------

def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def hostile(port, stop):
    """1000 connections at once, slowloris, 1 MiB of header and garbage bytes, until stop."""
    socks = []
    for _ in range(1000):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            socks.append(s)
        except OSError:
            pass
    for s in socks[:20]:
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # slowloris: never ends
        except OSError:
            pass
    big = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    garbage = bytes(range(256)) * 64
    while not stop.is_set():
        for payload in (big, garbage, b"\x00\xff" * 100 + b"\r\n\r\n"):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.sendall(payload)
                    s.recv(100)
            except OSError:
                pass
        for s in socks[:20]:
            try:
                s.sendall(b"X-a: b\r\n")
            except OSError:
                pass
        time.sleep(0.1)
    for s in socks:
        s.close()


def test_hostile_clients_do_not_stall_tracing(tmp_path):
    port = free_port()
    d = http_daemon(tmp_path, port)
    w = Launcher(tmp_path)
    stop = threading.Event()
    attacker = threading.Thread(target=hostile, args=(port, stop))
    try:
        wait_traced(d, w.pid)
        w.burst(10)
        wait_for(lambda: launches_of(port, w.pid) == 10, 20, "10 launches")
        rss_before = rss_kib(d.pid)
        attacker.start()
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            w.burst(200)
            time.sleep(0.05)
        stop.set()
        attacker.join(timeout=60)
        assert d.proc.poll() is None, d.stderr()[-3000:]
        # tracing went on: every launch counted, none dropped (the ctl socket says it too)
        assert wait_for(lambda: try_get(port, "/healthz") == 200, 30, "healthz")
        wait_for(lambda: launches_of(port, w.pid) == w.total, 30, f"{w.total} launches")
        values = metrics(port)
        assert values[("ncclprobe_events_dropped_total", frozenset({("reason", "ring_buffer")}))] \
            == 0
        assert all(v == 0 for v in pid_series(values, "ncclprobe_target_dropped_total",
                                              w.pid).values())
        assert d.target(w.pid)["launches"] == w.total
        # memory stayed bounded: connections are capped, and so is each one's memory
        assert rss_kib(d.pid) - rss_before < 64 * 1024, (rss_before, rss_kib(d.pid))
    finally:
        stop.set()
        w.kill()
        d.kill()
    d.assert_clean()


def test_http_listen_option_overrides_the_configuration(tmp_path):
    """--http-listen replaces http_listen: a non-loopback address given there is refused too."""
    d = Daemon(tmp_path / "d", wait=False, include_comm="nphttp*",
               http_listen=f"127.0.0.1:{free_port()}")
    d.kill()
    proc = subprocess.run([str(NCCLPROBE), "daemon", "--config", str(d.conf_path),
                           "--http-listen", "10.0.0.1:9464"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert "http_listen 10.0.0.1:9464: not a loopback address" in proc.stderr, proc.stderr
