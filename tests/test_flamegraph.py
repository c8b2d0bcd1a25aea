"""ncclprobe's own SVG flame graphs (src/writers/flamegraph.c): `ncclprobe
flamegraph IN.folded` and the flamegraph.svg / flamegraph.gpu_ns.svg written
from a recording's merged.folded / merged.gpu_ns.folded.

The expected trees, widths and totals are computed here from the folded
input itself; the SVG must be valid XML whatever bytes the names hold; the
colours must be in their kind's family; and a real browser (headless
Chromium) must draw it and run its script (search, zoom, hover details).
"""

import json
import random
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from lib.cupti_app import record_py_cupti
from lib.folded import folded_totals
from lib.paths import NCCLPROBE, PROGS
from lib.run import convert, made_by_record, record
from lib.skip import needs_binary, needs_bpf, needs_replay

SVG_NS = "{http://www.w3.org/2000/svg}"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FRAME_AREA = 1200 - 2 * 10  # default width minus the side pads

pytestmark = needs_binary(NCCLPROBE)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (headless browser)")


@pytest.fixture
def flamegraph():
    """Runs `ncclprobe flamegraph ARGS` with stdin_bytes on its stdin;
    returns the CompletedProcess (bytes)."""
    def run(args, stdin_bytes=b""):
        cmd = [str(NCCLPROBE), "flamegraph", *map(str, args)]
        return subprocess.run(cmd, input=stdin_bytes, capture_output=True, timeout=60)
    return run


def write_flamegraphs(directory):
    """`ncclprobe convert DIRECTORY --format svg`: its (exit code, stderr); a
    recording already has the flame graphs `record` drew (its default
    --format): those are the ones tested."""
    if made_by_record(directory):
        assert (Path(directory) / "flamegraph.svg").exists(), "record drew no flamegraph.svg"
        return 0, ""
    proc = convert(directory, "svg")
    return proc.returncode, proc.stderr


# ---- reading the SVG ------------------------------------------------------------------------

class Frame:
    def __init__(self, g, index):
        self.index = index
        self.name = g.get("data-n")
        self.value = int(g.get("data-v"))
        self.offset = int(g.get("data-o"))
        self.depth = int(g.get("data-d"))
        self.parent = int(g.get("data-p"))
        rect = g.find(SVG_NS + "rect")
        self.x, self.y = float(rect.get("x")), float(rect.get("y"))
        self.width, self.height = float(rect.get("width")), float(rect.get("height"))
        self.fill = tuple(int(v) for v in re.fullmatch(r"rgb\((\d+),(\d+),(\d+)\)",
                                                        rect.get("fill")).groups())
        self.title = g.find(SVG_NS + "title").text
        self.label = g.find(SVG_NS + "text").text or ""


class Svg:
    def __init__(self, data):
        self.data = data
        self.root = ET.fromstring(data)  # raises on anything that is not well-formed XML
        assert self.root.tag == SVG_NS + "svg"
        self.width = int(self.root.get("width"))
        self.frames_el = self.root.find(f".//{SVG_NS}g[@id='np_frames']")
        gs = list(self.frames_el) if self.frames_el is not None else []
        self.frames = [Frame(g, i) for i, g in enumerate(gs)]
        self.rects = self.frames_el.findall(f".//{SVG_NS}rect") if gs else []

    def text_by_id(self, ident):
        el = self.root.find(f".//*[@id='{ident}']")
        return None if el is None else "".join(el.itertext())

    def paths(self):
        """{(frame, ..., frame): Frame} from the root's children down."""
        out = {}
        for f in self.frames:
            path, p = [f.name], f.parent
            while p > 0:
                path.append(self.frames[p].name)
                p = self.frames[p].parent
            if f.parent >= 0:
                out[tuple(reversed(path))] = f
        return out

    def by_name(self, name):
        found = [f for f in self.frames if f.name == name]
        assert len(found) == 1, (name, [f.name for f in self.frames])
        return found[0]


def render(flamegraph, tmp_path, folded, args=(), name="in.folded"):
    """Renders folded (str or bytes) through the command; returns (Svg, proc)."""
    src = tmp_path / name
    src.write_bytes(folded.encode() if isinstance(folded, str) else folded)
    out = tmp_path / (name + ".svg")
    proc = flamegraph([src, "-o", out, *args])
    assert proc.returncode == 0, proc.stderr
    return Svg(out.read_bytes()), proc


def expected_tree(lines):
    """{path tuple: summed weight} for every prefix of every stack."""
    tree = {}
    for stack, weight in lines:
        frames = stack.split(";")
        for i in range(1, len(frames) + 1):
            tree[tuple(frames[:i])] = tree.get(tuple(frames[:i]), 0) + weight
    return tree


# ---- colours ------------------------------------------------------------------------------

def family(rgb):
    r, g, b = rgb
    if r == g == b:
        return "unknown"
    if g >= 180 and r <= 160 and b <= 160:
        return "gpu"
    if b >= 200 and 140 <= r <= 190 and g <= 130:
        return "nccl"
    if r <= 110 and g >= 165 and b >= 165:
        return "python"
    if r >= 225 and 90 <= b <= 135:
        return "inlined"
    if r >= 205 and b <= 55:
        return "native"
    return "?"


def kind_of(name):
    if re.match(r"\[GPU_(Kernel|Memcpy|Memset|Launch_Pending)\]", name):
        return "gpu"
    if name.startswith("[NCCL]"):
        return "nccl"
    if name.startswith("[") and name.endswith("]"):
        return "unknown"
    if name.endswith(" [inlined]"):
        return "inlined"
    if re.search(r" \(.*\.py(:-?\d+)?\)$", name):
        return "python"
    return "native"


# ---- the layout ---------------------------------------------------------------------------

def test_widths_are_proportional_to_weights(flamegraph, tmp_path):
    svg, _ = render(flamegraph, tmp_path, "a;b 3\na;c 1\n")
    assert len(svg.frames) == len(svg.rects) == 4  # all, a, b, c
    all_, a, b, c = (svg.by_name(n) for n in ("all", "a", "b", "c"))
    assert (all_.value, a.value, b.value, c.value) == (4, 4, 3, 1)
    assert all_.width == pytest.approx(FRAME_AREA, abs=0.01)
    assert b.width == pytest.approx(3 * c.width, abs=0.02)
    assert a.width == pytest.approx(b.width + c.width, abs=0.02)
    assert c.x == pytest.approx(b.x + b.width, abs=0.02)  # siblings side by side, alphabetical
    # root at the bottom, each level one frame higher
    assert all_.y > a.y > b.y == c.y
    assert b.title == "b (3 samples, 75.00%)"
    assert svg.text_by_id("np_title") == "Flame Graph"
    assert "total 4 samples" in svg.text_by_id("np_subtitle")


def test_random_stacks_merge_into_the_right_tree(flamegraph, tmp_path):
    rng = random.Random(8)
    names = ["main", "run", "step", "fwd", "bwd", "cudaLaunchKernel", "a b<c>", "x"]
    lines = []
    for _ in range(400):
        depth = rng.randint(1, 7)
        lines.append((";".join(rng.choice(names) for _ in range(depth)), rng.randint(5, 50)))
    folded = "".join(f"{s} {w}\n" for s, w in lines)
    svg, _ = render(flamegraph, tmp_path, folded)
    want = expected_tree(lines)
    got = svg.paths()
    assert {p: f.value for p, f in got.items()} == want  # one rect per distinct prefix
    total = sum(w for _, w in lines)
    assert svg.frames[0].name == "all" and svg.frames[0].value == total
    scale = FRAME_AREA / total
    for path, f in got.items():
        assert f.width == pytest.approx(f.value * scale, abs=0.01)
        children = sorted((p for p in got if p[:-1] == path), key=lambda p: p[-1].encode())
        # children in byte order, packed from the parent's left edge
        offset = f.offset
        for child in children:
            assert got[child].offset == offset
            assert got[child].x == pytest.approx(10 + offset * scale, abs=0.006)
            offset += got[child].value


def test_narrow_subtrees_are_left_out_but_totals_stay(flamegraph, tmp_path):
    folded = "main;big 10000000\nmain;small;deeper;deepest 1\ntiny 2\n"
    svg, _ = render(flamegraph, tmp_path, folded)
    names = [f.name for f in svg.frames]
    assert names == ["all", "main", "big"]  # small (0.0001 px) and tiny are pruned
    assert svg.frames[0].value == 10000003 and svg.by_name("main").value == 10000001
    assert svg.frames_el.get("data-total") == "10000003"
    assert all(f.width >= 0.1 for f in svg.frames)


def test_huge_weights(flamegraph, tmp_path):
    svg, _ = render(flamegraph, tmp_path, "a;b 10000000000000\na;c 30000000000000\n")
    assert svg.by_name("c").width == pytest.approx(3 * svg.by_name("b").width, abs=0.02)
    assert svg.by_name("a").value == 40000000000000
    # more than 2^64 in all: the total is capped, not wrapped
    svg, proc = render(flamegraph, tmp_path, f"a {2**64 - 1}\nb {2**63}\n", name="sat.folded")
    assert svg.frames[0].value == 2**64 - 1
    assert b"capped" in proc.stderr


def test_gpu_time_in_milliseconds(flamegraph, tmp_path):
    folded = ("main;cudaLaunchKernel;[GPU_Kernel]k1 2500000\n"
              "main;cudaLaunchKernel;[GPU_Kernel]k2 4300\n")
    title = "GPU <time>\x1b & 'more'"  # the escape character is dropped
    svg, _ = render(flamegraph, tmp_path, folded, ["--unit", "ns", "--title", title])
    assert svg.by_name("[GPU_Kernel]k1").title == "[GPU_Kernel]k1 (2.500 ms, 99.83%)"
    assert svg.by_name("[GPU_Kernel]k2").title == "[GPU_Kernel]k2 (0.0043 ms, 0.17%)"
    assert svg.text_by_id("np_title") == "GPU <time> & 'more'"
    assert "ms" in svg.text_by_id("np_subtitle") and "2.504 ms" in svg.text_by_id("np_subtitle")


def test_width_option(flamegraph, tmp_path):
    svg, _ = render(flamegraph, tmp_path, "a;b 1\n", ["--width", "800"])
    assert svg.width == 800 and svg.root.get("viewBox") == f"0 0 800 {svg.root.get('height')}"
    assert svg.frames[0].width == pytest.approx(780, abs=0.01)


def test_labels_fit_their_frames(flamegraph, tmp_path):
    long = "std::vector<at::Tensor> at::native::some_really_long_function_name_" + "x" * 200
    svg, _ = render(flamegraph, tmp_path, f"main;{long} 500\nmain;short 1\nmain;n 1000\n")
    f = svg.by_name(long)
    assert f.label.endswith("..") and long.startswith(f.label[:-2])
    assert len(f.label) * 12 * 0.59 <= f.width  # the per-character width estimate
    assert svg.by_name("n").label == "n"
    assert svg.by_name("short").label == ""  # 1.2 px: too narrow for any text


# ---- colours ------------------------------------------------------------------------------

KINDS = """\
main;worker;libfoo_call;cudaLaunchKernel;[GPU_Kernel]vector_add_kernel 5
main;worker;inl_helper [inlined];cudaGraphLaunch;[GPU_Memcpy]HtoD 4
main;worker;cudaGraphLaunch;[GPU_Memset] 3
main;worker;cudaLaunchKernel;[GPU_Launch_Pending] 3
main;<module> (train.py:12);Model.forward (model/layers.py:40);ncclAllReduce;ncclLaunchKernel;\
[NCCL]AllReduce;[GPU_Kernel]ncclDevKernel_Generic 6
main;step (train.py);[NCCL]Send+Recv;[GPU_Kernel]ncclDevKernel_SendRecv 2
[unknown];[libcuda.so.1+0x1f2a0];cudaLaunchKernel;[GPU_Kernel]k 2
[no launch stack];[GPU_Kernel]orphan 1
"""


def test_colours_by_frame_kind(flamegraph, tmp_path):
    svg, _ = render(flamegraph, tmp_path, KINDS)
    seen = set()
    for f in svg.frames:
        want = kind_of(f.name)
        assert family(f.fill) == want, (f.name, f.fill)
        seen.add(want)
    assert seen == {"gpu", "nccl", "python", "native", "inlined", "unknown"}
    # deterministic: the same name, the same colour, in every graph
    again, _ = render(flamegraph, tmp_path, KINDS.replace(" 5\n", " 50\n"), name="again.folded")
    fills = {f.name: f.fill for f in svg.frames}
    assert all(fills[f.name] == f.fill for f in again.frames)
    # names a letter apart still get visibly different native colours
    assert len({fills[n] for n in ("main", "worker", "libfoo_call")}) == 3
    # the legend names the kinds shown, in their colours
    legend = svg.root.find(f".//{SVG_NS}g[@id='np_legend']")
    swatches = {r.get("data-kind"): r.get("fill") for r in legend.iter(SVG_NS + "rect")}
    assert set(swatches) == {"native", "inlined", "Python", "NCCL", "GPU", "unknown"}
    for kind, fam in (("native", "native"), ("inlined", "inlined"), ("Python", "python"),
                      ("NCCL", "nccl"), ("GPU", "gpu"), ("unknown", "unknown")):
        rgb = tuple(int(v) for v in re.findall(r"\d+", swatches[kind]))
        assert family(rgb) == fam, kind


# ---- hostile input --------------------------------------------------------------------------

HOSTILE_NAMES = [
    b'say "hi" & <run> \'now\'',
    b"</script><script>alert(1)</script>",
    b"]]> <![CDATA[ x",
    b"bad utf8 \xff\xfe \xc3\x28 \xed\xa0\x80 end",
    b"ctrl \x01\x1b[31m\x7f chars",
    b"nonchar \xef\xbf\xbe \xc2\x85 c1",
    "käfer_λ_\U00020000 (py dir \U0001F40D/x.py:7)".encode(),
    b"${alert(1)} `x` \\u0041 \\",
    b"L" * 100000,
]


def hostile_folded():
    lines = [b"main;" + name + b";[GPU_Kernel]" + name + b" %d\n" % (i + 1)
             for i, name in enumerate(HOSTILE_NAMES)]
    return b"".join(lines)


def test_hostile_names_stay_valid_xml(flamegraph, tmp_path):
    svg, _ = render(flamegraph, tmp_path, hostile_folded())
    svg.data.decode("utf-8")  # strict
    names = [f.name for f in svg.frames]
    assert 'say "hi" & <run> \'now\'' in names
    assert "</script><script>alert(1)</script>" in names
    assert "bad utf8 \ufffd\ufffd \ufffd( \ufffd\ufffd\ufffd end" in names
    assert "ctrl [31m chars" in names  # control characters dropped
    assert "nonchar   c1" in names  # U+FFFE, U+0085: not XML text
    assert "käfer_λ_\U00020000 (py dir \U0001F40D/x.py:7)" in names
    assert family(svg.by_name("käfer_λ_\U00020000 (py dir \U0001F40D/x.py:7)").fill) == "python"
    long = [f for f in svg.frames if f.name.startswith("LLLL")]
    assert len(long) == 1 and len(long[0].name) <= 4003 and long[0].name.endswith("...")
    assert long[0].value == len(HOSTILE_NAMES)
    for f in svg.frames:
        assert not re.search(r"[\x00-\x1f\x7f\ufffe\uffff]", f.name + f.title + f.label)
    # the one script is ours, and nothing escaped into markup
    assert len(svg.root.findall(f".//{SVG_NS}script")) == 1
    assert svg.data.count(b"<script") == 1


def test_malformed_lines_are_skipped(flamegraph, tmp_path):
    folded = (b"a;b 3\n"
              b"no weight here\n"
              b"a;b x\n"
              b"a;b -3\n"
              b"a;b 3.5\n"
              b" 5\n"
              b";;; 4\n"
              b"a;b 99999999999999999999999\n"
              b"nul\x00inside 1\n"
              b"\n   \n"  # blank: not counted
              b"a;;c;  2\r\n"  # empty frames dropped, CRLF accepted
              b"a;c 1")  # no final newline
    svg, proc = render(flamegraph, tmp_path, folded)
    # "a;;c;  2": empty frames dropped, the spaces before the weight too
    assert {p: f.value for p, f in svg.paths().items()} == {("a",): 6, ("a", "b"): 3,
                                                            ("a", "c"): 3}
    assert b"skipped 8 malformed line(s)" in proc.stderr


def test_empty_input_gives_a_valid_svg(flamegraph, tmp_path):
    for content in (b"", b"\n\n", b"a;b 0\n"):
        proc = flamegraph(["-"], content)  # stdin, SVG on stdout
        assert proc.returncode == 0, proc.stderr
        svg = Svg(proc.stdout)
        assert svg.frames == []
        assert svg.text_by_id("np_empty") == "no samples"


def test_only_malformed_lines_fail_and_write_nothing(flamegraph, tmp_path):
    src = tmp_path / "junk.folded"
    src.write_text("this is not\nfolded at all\n")
    out = tmp_path / "out.svg"
    proc = flamegraph([src, "-o", out])
    assert proc.returncode == 1
    assert b"no valid folded line" in proc.stderr
    assert not out.exists() and not Path(str(out) + ".tmp").exists()


def test_command_line(flamegraph, tmp_path):
    src = tmp_path / "in.folded"
    src.write_text("a;b 1\n")
    assert flamegraph([]).returncode == 2
    assert flamegraph([src, src]).returncode == 2
    assert flamegraph([src, "--unit", "bytes"]).returncode == 2
    assert flamegraph([src, "--width", "5"]).returncode == 2
    assert flamegraph([src, "--bogus"]).returncode == 2
    helped = flamegraph(["--help"])
    assert helped.returncode == 0 and b"usage: ncclprobe flamegraph IN.folded" in helped.stdout
    assert flamegraph([tmp_path / "missing.folded"]).returncode == 1
    assert flamegraph([src, "-o", tmp_path / "no" / "such" / "dir.svg"]).returncode == 1
    proc = flamegraph([src])  # default: stdout
    assert proc.returncode == 0 and Svg(proc.stdout).by_name("b").value == 1


# ---- recording directories --------------------------------------------------------------------

def test_write_flamegraphs_of_a_directory(tmp_path):
    d = tmp_path / "set"
    d.mkdir()
    rc, err = write_flamegraphs(d)
    # no merged.folded: said, nothing drawn; convert takes a missing input as a partial set
    assert rc == 0 and "merged.folded" in err and not list(d.iterdir())
    (d / "merged.folded").write_text("main;cudaLaunchKernel;[GPU_Kernel]k 3\n")
    (d / "flamegraph.gpu_ns.svg").write_text("stale")
    rc, err = write_flamegraphs(d)
    assert rc == 0, err
    svg = Svg((d / "flamegraph.svg").read_bytes())
    assert svg.text_by_id("np_title") == "ncclprobe: launches by stack"
    assert svg.by_name("[GPU_Kernel]k").value == 3
    assert not (d / "flamegraph.gpu_ns.svg").exists()  # no GPU times: no (stale) GPU graph
    (d / "merged.gpu_ns.folded").write_text("main;cudaLaunchKernel;[GPU_Kernel]k 0\n")
    assert write_flamegraphs(d)[0] == 0 and not (d / "flamegraph.gpu_ns.svg").exists()
    (d / "merged.gpu_ns.folded").write_text("main;cudaLaunchKernel;[GPU_Kernel]k 1500000\n")
    assert write_flamegraphs(d)[0] == 0
    gpu = Svg((d / "flamegraph.gpu_ns.svg").read_bytes())
    assert gpu.text_by_id("np_title") == "ncclprobe: GPU time by stack"
    assert gpu.by_name("[GPU_Kernel]k").title == "[GPU_Kernel]k (1.500 ms, 100.00%)"
    assert sorted(p.name for p in d.iterdir()) == ["flamegraph.gpu_ns.svg", "flamegraph.svg",
                                                   "merged.folded", "merged.gpu_ns.folded"]


def check_against_folded(svg, folded):
    """Every stack of the folded file is a path of the SVG with its weight
    (the stacks are wide enough here not to be pruned)."""
    want = expected_tree(folded.items())
    got = {p: f.value for p, f in svg.paths().items()}
    assert got == want
    assert svg.frames[0].value == sum(folded.values())


@needs_bpf
def test_recorded_workload(tmp_path):
    rec = record(tmp_path, ["--", PROGS / "launcher", "--variant", "rt", "--iters", "20"])
    assert rec.returncode == 0, rec.stderr
    rc, err = write_flamegraphs(rec.path)
    assert rc == 0, err
    svg = Svg((rec.path / "flamegraph.svg").read_bytes())
    check_against_folded(svg, folded_totals(rec.path / "merged.folded"))
    names = {f.name for f in svg.frames}
    assert {"run_worker", "liba_submit", "libb_launch", "cudaLaunchKernel",
            "[GPU_Kernel]vector_add_kernel"} <= names
    assert svg.frames[0].value == 20
    assert family(svg.by_name("[GPU_Kernel]vector_add_kernel").fill) == "gpu"
    assert family(svg.by_name("run_worker").fill) == "native"


@needs_bpf
@needs_replay
def test_recorded_python_workload_by_gpu_time(tmp_path):
    """py_cupti.py: Python frames over real launches, with GPU records (the
    CUPTI test double): both graphs, GPU time in ms."""
    out, _ = record_py_cupti(tmp_path, "/usr/bin/python3")
    rc, err = write_flamegraphs(out)
    assert rc == 0, err
    count = Svg((out / "flamegraph.svg").read_bytes())
    check_against_folded(count, folded_totals(out / "merged.folded"))
    gpu = Svg((out / "flamegraph.gpu_ns.svg").read_bytes())
    check_against_folded(gpu, folded_totals(out / "merged.gpu_ns.folded"))
    assert gpu.frames[0].value == 10 * 1000 + 20 * 300  # the GPU time py_cupti.py scripts
    py = [f for f in gpu.frames if "(py_cupti.py:" in f.name]
    assert {f.name.split(" ")[0] for f in py} >= {"<module>", "train", "step", "launch"}
    assert all(family(f.fill) == "python" for f in py)
    matmul = gpu.by_name("[GPU_Kernel]matmul_kernel")
    assert matmul.title == "[GPU_Kernel]matmul_kernel (0.01 ms, 62.50%)"
    assert family(matmul.fill) == "gpu"
    assert "cudaLaunchKernel" in {f.name for f in gpu.frames}


# ---- in a browser ----------------------------------------------------------------------------

def chromium(tmp_path, *args):
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB/RGBA PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


@needs_chromium
def test_chromium_draws_the_frames(flamegraph, tmp_path):
    svg, _ = render(flamegraph, tmp_path, KINDS)
    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,800",
             (tmp_path / "in.folded.svg").as_uri())
    width, height, rows = read_png(shot)
    assert (width, height) == (1200, 800)
    # each frame wide enough: its fill is the commonest colour inside its rect (with its label)
    checked = 0
    for f in svg.frames:
        if f.width < 40:
            continue
        inside = Counter(px for row in rows[int(f.y) + 2:int(f.y + f.height) - 1]
                         for px in row[int(f.x) + 2:int(f.x + f.width) - 1])
        common = inside.most_common(1)[0][0]
        assert all(abs(p - q) <= 2 for p, q in zip(common, f.fill)), (f.name, common, f.fill)
        checked += 1
    assert checked >= 15
    top = int(min(f.y for f in svg.frames))
    bottom = int(max(f.y + f.height for f in svg.frames))
    colours = {px for row in rows[top:bottom] for px in row[10:1190]}
    assert len(colours) > 20
    # the GPU, NCCL and Python families are all on screen
    families = {family(px) for px in colours}
    assert {"gpu", "nccl", "python", "native", "inlined", "unknown"} <= families


PROBE_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>flame</title></head><body>
%(svg)s
<pre id="result"></pre>
<script>
(function () {
  var out = {}, F = window.ncclprobeFlame;
  function frame(name) {
    var gs = document.getElementById("np_frames").children;
    for (var i = 0; i < gs.length; i++) if (gs[i].getAttribute("data-n") === name) return gs[i];
    return null;
  }
  function width(name) { return Number(frame(name).querySelector("rect").getAttribute("width")); }
  out.frames = F.frames;
  out.pct = F.search("^cudaLaunchKernel$|^\\\\[GPU_");
  out.matched = document.getElementById("np_matched").textContent;
  out.highlighted = document.querySelectorAll("#np_frames rect[fill='rgb(230,0,230)']").length;
  F.resetSearch();
  out.afterReset = document.querySelectorAll("#np_frames rect[fill='rgb(230,0,230)']").length;
  out.hostile = F.search(%(hostile)s);
  out.hostileMatched = document.getElementById("np_matched").textContent;
  out.invalid = F.search("(unclosed");
  out.invalidText = document.getElementById("np_matched").textContent;
  // hover: the details line
  frame("worker").dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  out.details = document.getElementById("np_details").textContent;
  // click to zoom on "worker": it fills the width, its parent is dimmed, others hidden
  frame("worker").querySelector("rect").dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.zoomWorker = width("worker");
  out.zoomKernel = width("[GPU_Kernel]vector_add_kernel");
  out.mainClass = frame("main").getAttribute("class");
  out.unknownClass = frame("[unknown]").getAttribute("class");
  out.unzoomShown = !document.getElementById("np_unzoom").classList.contains("hide");
  // clicking the root resets the zoom
  frame("all").dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.resetWorker = width("worker");
  out.unzoomHidden = document.getElementById("np_unzoom").classList.contains("hide");
  document.getElementById("result").textContent = "RESULT" + JSON.stringify(out) + "END";
})();
</script></body></html>
"""


@needs_chromium
def test_chromium_runs_search_zoom_and_details(flamegraph, tmp_path):
    folded = KINDS.encode() + hostile_folded()
    svg, _ = render(flamegraph, tmp_path, folded)
    body = svg.data.decode()
    body = body[body.index("<svg"):]  # inline: no XML declaration or doctype
    page = tmp_path / "page.html"
    hostile = json.dumps(re.escape('say "hi" & <run>'))
    page.write_text(PROBE_PAGE % {"svg": body, "hostile": hostile})
    dom = chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    m = re.search(r"RESULT(.*?)END", dom, re.S)
    assert m, dom[-2000:]
    out = json.loads(m.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert out["frames"] == len(svg.frames)
    # matches nest (cudaLaunchKernel over its kernel): counted once
    total = svg.frames[0].value
    launch_or_gpu = sum(f.value for f in svg.frames
                        if (f.name == "cudaLaunchKernel" or f.name.startswith("[GPU_"))
                        and not any(svg.frames[a].name == "cudaLaunchKernel"
                                    for a in ancestors(svg, f)))
    assert out["pct"] == pytest.approx(100 * launch_or_gpu / total)
    assert out["matched"] == "Matched: %.1f%%" % (100 * launch_or_gpu / total)
    assert out["highlighted"] == sum(1 for f in svg.frames if f.name == "cudaLaunchKernel"
                                     or f.name.startswith("[GPU_"))
    assert out["afterReset"] == 0
    hostile_value = svg.by_name('say "hi" & <run> \'now\'').value
    assert out["hostile"] == pytest.approx(100 * hostile_value / total)
    assert out["invalid"] is None and out["invalidText"] == "Invalid regular expression"
    worker = svg.by_name("worker")
    assert out["details"] == worker.title
    assert out["zoomWorker"] == pytest.approx(FRAME_AREA, abs=0.01)
    kernel = svg.by_name("[GPU_Kernel]vector_add_kernel")
    assert out["zoomKernel"] == pytest.approx(FRAME_AREA * kernel.value / worker.value, abs=0.02)
    assert out["mainClass"] == "parent" and out["unknownClass"] == "hide"
    assert out["unzoomShown"] and out["unzoomHidden"]
    assert out["resetWorker"] == pytest.approx(worker.width, abs=0.01)


def ancestors(svg, f):
    p = f.parent
    while p >= 0:
        yield p
        p = svg.frames[p].parent
