"""tools/check-layers.py (make check-layers) on small trees made here: it must pass a tree
whose arrows all point down the data flow, and fail - naming the file - an upward include,
an upward call that no include shows (a declaration written by hand), a cycle between two
files of one folder, and a folder with no level. The real tree is checked by `make test`."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "tools" / "check-layers.py"


def make_tree(root, files):
    """Writes src/FOLDER/NAME.c files and compiles each into build/obj/FOLDER/NAME.o."""
    for rel, text in files.items():
        path = root / "src" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel in files:
        if rel.endswith(".c"):
            obj = root / "build" / "obj" / (rel[:-2] + ".o")
            obj.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cc", "-c", "-I", str(root / "src"), str(root / "src" / rel), "-o",
                            str(obj)], check=True)


def check(root):
    return subprocess.run([sys.executable, str(CHECK), "--root", str(root),
                           "--build", str(root / "build")], capture_output=True, text=True)


GOOD = {
    "lib/util.h": "int lib_helper(void);\n",
    "lib/util.c": '#include "lib/util.h"\nint lib_helper(void) { return 1; }\n',
    "attach/attach.h": "int attach_it(void);\n",
    "attach/attach.c": '#include "attach/attach.h"\n#include "lib/util.h"\n'
                       "int attach_it(void) { return lib_helper(); }\n",
    "daemon/daemon.c": '#include "attach/attach.h"\nint daemon_main(void) { return attach_it(); }\n',
}


def test_a_tree_that_points_down_passes(tmp_path):
    make_tree(tmp_path, GOOD)
    proc = check(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every arrow points downward" in proc.stdout


@pytest.mark.parametrize("case,files,expected", [
    ("upward include", {"attach/bad.c": '#include "daemon/daemon.h"\nint b;\n',
                        "daemon/daemon.h": "int daemon_main(void);\n"},
     "src/attach/bad.c: includes daemon/daemon.h"),
    ("upward call", {"attach/sneaky.c": "int daemon_main(void);\n"
                                        "int sneaky(void) { return daemon_main(); }\n"},
     "src/attach/sneaky.c calls daemon_main of src/daemon/daemon.c"),
    ("file cycle", {"lib/a.c": "int b_fn(void);\nint a_fn(void) { return b_fn(); }\n",
                    "lib/b.c": "int a_fn(void);\nint b_fn(void) { return a_fn(); }\n"},
     "call each other"),
    ("unknown folder", {"gadgets/g.c": "int g;\n"}, "folder 'gadgets' has no level"),
])
def test_a_wrong_arrow_fails(tmp_path, case, files, expected):
    make_tree(tmp_path, {**GOOD, **files})
    proc = check(tmp_path)
    assert proc.returncode == 1, (case, proc.stdout)
    assert expected in proc.stdout, (case, proc.stdout)
