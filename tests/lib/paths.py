"""Where the build is: the paths every test file starts from.

NCCLPROBE_BUILD names the build directory (`make check` and `make test`
set it); without it, build/ of this checkout."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = Path(os.environ.get("NCCLPROBE_BUILD", REPO / "build"))
NCCLPROBE = BUILD / "ncclprobe"
PROGS = BUILD / "progs"
CUPTI_LIB = BUILD / "libncclprobe_cupti.so"


def read_env_file(path):
    """The KEY=VALUE lines of path as a dict ({} when there is no such file)."""
    env = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                env[key.strip()] = value.strip()
    return env


# What the workloads were built with (tests/progs/Makefile writes it): CUDA_STANDIN,
# CUDART_PATH, HAVE_CUPTI_REPLAY, HAVE_RT13.
PROGS_ENV = read_env_file(PROGS / "progs.env")
