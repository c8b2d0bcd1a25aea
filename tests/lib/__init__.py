"""The tests' toolkit: everything more than one test file needs, written once.
Test files import it as `from lib.folded import folded_totals` (pytest puts
tests/ on sys.path); tests/conftest.py holds only the fixtures.

- paths.py       where the build is (NCCLPROBE_BUILD), the workloads, progs.env
- skip.py        skip markers: root and BPF, a binary not built, a tool not installed,
                 the CUDA toolkit, the CUPTI test double
- run.py         running ncclprobe: a command, `record` (also attached by --pid),
                 `convert`, `go tool pprof`; a Recording's files; exit statuses
- processes.py   workload processes, what they print, waiting for a condition
- folded.py      reading folded files (launches.folded, merged*.folded, stacks.ext.folded)
- jsonl.py       reading and writing JSON-lines files (launches, stacks, logs)
- synthetic.py   recording directories made by hand, for the tests of the readers
- cupti_app.py   recordings with GPU records from the CUPTI test double
- daemon.py      `ncclprobe daemon` under test, and the launcher workloads it traces
- merge.py       `ncclprobe merge` on written inputs, and CUPTI trace events
- gdb.py         gdb's backtrace at a launch, the oracle for stacks
- nccl_dwarf.py  gdb (and nm, readelf) on a libnccl: struct offsets, sizes, enumerators
- bpf.py         the BPF programs and links a process holds
- inject.py      the live library injector: its test driver, self-checking targets,
                 what an injection may change, the timing table
"""
