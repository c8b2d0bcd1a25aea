#!/usr/bin/env python3
"""check-layers.py - the arrows of ncclprobe's source tree point downward only.

The folders follow the data flow, and each sits on a level:

    lib < wire formats (include/ncclprobe, the BPF skeletons) < attach
        < unwind, symbolize < ingest < correlate < writers, recording, report, merge
        < session < http < cli, daemon

plus the in-process CUPTI library (src/cupti), which may use only the wire formats.
A folder may use its own level and the levels below it, never one above. Checked two
ways, so that neither an #include nor a call can slip through:

- includes: every `#include "X/..."` in src/A/ names a folder X no higher than A;
- calls: every undefined symbol of an object in BUILD/obj/A/ is defined in a folder no
  higher than A (read with `nm`);

and within one level there are no cycles: between folders (writers -> report -> writers),
and between the files of one folder (a.c calls b.c and b.c calls a.c).

Usage: tools/check-layers.py [--build BUILD] [--root TREE]   (exit 1 and a list when violated)"""

import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

LEVELS = {
    "lib": 0,
    "ncclprobe": 1, "skel": 1,  # include/ncclprobe and the generated BPF skeletons
    "cupti": 1.5,
    "attach": 2, "inject": 2,  # inject: the live library injector, uses attach's ELF/maps
    "unwind": 3, "symbolize": 3,
    "ingest": 4,
    "correlate": 5,
    "recording": 6, "writers": 6, "report": 6, "merge": 6, "gen": 6,  # gen: profile.pb-c
    "session": 7,
    "http": 7.5,  # the daemon's HTTP endpoints: the daemon starts them, feeds them
    "cli": 8, "daemon": 8,
}
# What the in-process library may use: it runs inside the target, apart from the rest.
CUPTI_MAY_USE = {"cupti", "ncclprobe"}
GENERATED = {"ncclprobe.skel.h": "skel", "discover.skel.h": "skel", "vmlinux.h": "skel",
             "profile.pb-c.h": "gen"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

REPO = Path(__file__).resolve().parent.parent  # --root changes it (tests)


def folder_of_include(name):
    if name in GENERATED:
        return GENERATED[name]
    head = name.split("/", 1)[0]
    return head if "/" in name else None  # a bare name: a file of the same folder


def source_files():
    for path in sorted((REPO / "src").glob("*/*.[ch]")):
        yield path.parent.name, path
    for path in sorted((REPO / "include" / "ncclprobe").glob("*.h")):
        yield "ncclprobe", path


def allowed(user, used):
    if user == used:
        return True
    if user == "cupti":
        return used in CUPTI_MAY_USE
    if used == "cupti":
        return False
    return LEVELS[used] <= LEVELS[user]


def check_includes(problems, folder_edges):
    for folder, path in source_files():
        if folder not in LEVELS:
            problems.append(f"{path.relative_to(REPO)}: folder '{folder}' has no level "
                            "(add it to tools/check-layers.py)")
            continue
        for name in INCLUDE.findall(path.read_text(errors="replace")):
            used = folder_of_include(name)
            if used is None:
                continue
            if used not in LEVELS:
                problems.append(f"{path.relative_to(REPO)}: includes {name}: unknown folder")
                continue
            if used != folder:
                folder_edges[folder].add(used)
            if not allowed(folder, used):
                problems.append(f"{path.relative_to(REPO)}: includes {name} "
                                f"({used}, level {LEVELS[used]}) from {folder} "
                                f"(level {LEVELS[folder]}): an arrow upward")


def nm(obj):
    out = subprocess.run(["nm", "--defined-only", "-g", str(obj)], capture_output=True,
                         text=True, check=True).stdout
    defined = {line.split()[-1] for line in out.splitlines() if line.strip()}
    out = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    undefined = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return defined, undefined


def check_calls(build, problems, folder_edges):
    # objects of the sources there are now (a build dir keeps those of moved files)
    objs = sorted(o for o in (build / "obj").glob("*/*.o")
                  if (REPO / "src" / o.parent.name / (o.stem + ".c")).exists())
    if not objs:
        problems.append(f"no objects under {build}/obj: build first (make)")
        return
    owner = {}  # symbol -> (folder, file)
    uses = {}
    for obj in objs:
        folder = obj.parent.name
        defined, undefined = nm(obj)
        for sym in defined:
            owner[sym] = (folder, obj.stem)
        uses[(folder, obj.stem)] = undefined
    file_edges = defaultdict(set)
    for (folder, stem), undefined in uses.items():
        for sym in undefined:
            if sym not in owner:
                continue  # a library's (libbpf, libdw, libc)
            used_folder, used_stem = owner[sym]
            if used_folder == folder:
                if used_stem != stem:
                    file_edges[(folder, stem)].add((folder, used_stem))
                continue
            folder_edges[folder].add(used_folder)
            if used_folder in LEVELS and folder in LEVELS and not allowed(folder, used_folder):
                problems.append(f"src/{folder}/{stem}.c calls {sym} of src/{used_folder}/"
                                f"{used_stem}.c: an arrow upward ({folder} is level "
                                f"{LEVELS[folder]}, {used_folder} level {LEVELS[used_folder]})")
    for a, targets in file_edges.items():
        for b in targets:
            if a < b and a in file_edges.get(b, ()):
                problems.append(f"src/{a[0]}/{a[1]}.c and src/{b[0]}/{b[1]}.c call each "
                                "other: one of them should own what both need")


def check_folder_cycles(problems, folder_edges):
    state = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(folder_edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt]
                problems.append("folders depend on each other in a cycle: " +
                                " -> ".join(cycle))
            elif state.get(nxt) is None:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(folder_edges):
        if state.get(node) is None:
            visit(node, [node])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--root", default=None, help="the source tree (default: this one)")
    args = ap.parse_args()
    global REPO
    if args.root:
        REPO = Path(args.root).resolve()
    build = Path(args.build)
    if not build.is_absolute():
        build = REPO / build
    problems = []
    folder_edges = defaultdict(set)
    check_includes(problems, folder_edges)
    check_calls(build, problems, folder_edges)
    check_folder_cycles(problems, folder_edges)
    for p in sorted(set(problems)):
        print(f"check-layers: {p}")
    if problems:
        print(f"check-layers: {len(set(problems))} problem(s); the order is in "
              "tools/check-layers.py and docs/design.md", file=sys.stderr)
        return 1
    print(f"check-layers: every arrow points downward ({len(folder_edges)} folders)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
