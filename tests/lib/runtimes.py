"""NVIDIA's real runtimes of other versions, for the matrix tests
(tests/test_runtimes_*.py): libcudart 12.x/13.x, libnccl 2.21-2.32 and
libcupti 12.x/13.x from their PyPI wheels, fetched by tools/fetch-runtimes.sh
into a cache outside the tree, and what each test found, written down for
docs/compatibility.md (tools/compat-doc.py).

    cache()                     the entries, fetched first when the cache lacks any
    entries(kind)               names of one kind ("cudart", "nccl", "cupti"), in order
    library(name)               the entry's one shared library
    record_result(name, check, verdict, detail)
                                one cell of the compatibility table

A verdict is "works", "degrades" (detail says what is missing) or "fails". The
results are JSON files under $NCCLPROBE_BUILD/runtimes/, one per entry, merged
cell by cell, so every test file adds its own columns.
"""

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from lib.paths import BUILD, REPO

FETCH = REPO / "tools" / "fetch-runtimes.sh"
CACHE = Path(os.environ.get("NCCLPROBE_RUNTIMES_DIR")
             or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
             / "ncclprobe" / "runtimes")
RESULTS = BUILD / "runtimes"
VERDICTS = ("works", "degrades", "fails")


def _matrix():
    """[(name, package==version, who ships it)] of fetch-runtimes.sh --list, plus
    the toolkit's CUDA 13.0 cudart and CUPTI that the script links in."""
    out = subprocess.run(["bash", str(FETCH), "--list"], capture_output=True, text=True,
                         check=True).stdout
    rows = []
    for line in out.splitlines():
        name, pkg, ver, who = line.split(None, 3)
        rows.append((name, f"{pkg}=={ver}", who))
    return rows


def _index_reachable():
    """Why the package index cannot be reached, or None when it can."""
    url = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple/"
    try:
        cfg = subprocess.run(["python3", "-m", "pip", "config", "get", "global.index-url"],
                             capture_output=True, text=True, timeout=30)
        if cfg.returncode == 0 and cfg.stdout.strip():
            url = cfg.stdout.strip()
        urllib.request.urlopen(url.rstrip("/") + "/nvidia-nccl-cu12/", timeout=20).close()
        return None
    except OSError as e:
        return f"the package index ({url}) cannot be reached: {e}"


_fetched = None


def cache():
    """The cache folder, every pinned entry in it: fetched (about 2.2 GB
    downloaded, 330 MiB kept) when any is missing. Skips the calling test only
    when the package index cannot be reached; any other fetch failure fails it."""
    global _fetched
    if _fetched is None:
        names = [n for n, _, _ in _matrix()]
        missing = [n for n in names if not (CACHE / n / ".stamp").exists()]
        missing += [n for n in ("cudart-13.0", "cupti-13.0") if not (CACHE / n).exists()]
        if missing or not (CACHE / "MANIFEST.tsv").exists():
            res = subprocess.run(["bash", str(FETCH), "--dir", str(CACHE), "-q"],
                                 capture_output=True, text=True, timeout=1800)
            if res.returncode != 0:
                why = _index_reachable()
                if why:
                    _fetched = ("skip", why)
                else:
                    _fetched = ("fail", f"fetch-runtimes.sh failed:\n{res.stderr[-3000:]}")
        if _fetched is None:
            _fetched = ("ok", CACHE)
    verdict, what = _fetched
    if verdict == "skip":
        pytest.skip(what)
    if verdict == "fail":
        pytest.fail(what)
    return what


def entries(kind):
    """The matrix's entry names of one kind ("cudart", "nccl", "cupti"), oldest
    first, the toolkit's 13.0 included (works before the fetch: --list is local)."""
    names = [n for n, _, _ in _matrix()]
    if kind in ("cudart", "cupti"):
        names.append(f"{kind}-13.0")
    def key(n):
        return tuple(int(p) for p in n.split("-", 1)[1].split("."))
    return sorted((n for n in names if n.startswith(kind + "-")), key=key)


def shipped_by(name):
    """Who ships the entry (the comment of its pin)."""
    for n, pkg, who in _matrix():
        if n == name:
            return pkg, who
    return "CUDA 13.0 toolkit", "torch 2.11-2.14 -> vLLM 0.25.1, 0.33.0"


def library(name):
    """The entry's shared library (libcudart.so.N, libnccl.so.2, libcupti.so.N)."""
    libs = sorted((cache() / name / "lib").glob("lib*.so*"))
    assert len(libs) == 1, f"{name}: expected one library, found {libs}"
    return libs[0]


def include_dir(name):
    """The entry's headers (nccl.h, or CUPTI's include/)."""
    return cache() / name / "include"


def version_of(name):
    """"12.4" of "cudart-12.4"."""
    return name.split("-", 1)[1]


def record_result(name, check, verdict, detail=""):
    """Writes one cell of docs/compatibility.md: entry `name`, column `check`."""
    assert verdict in VERDICTS, verdict
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("entry", name)
    data["package"], data["shipped_by"] = shipped_by(name)
    data.setdefault("checks", {})[check] = {"verdict": verdict, "detail": detail}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
