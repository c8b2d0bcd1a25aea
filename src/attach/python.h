/* python.h - finds the CPython runtime in a target: which file holds it
 * (libpython3.X.so, or the executable of a static build), its version,
 * whether it is a free-threaded build, and where `_PyRuntime` lives in the
 * process. This is what walking the interpreter's frames starts from.
 * Processes without Python pay one symbol lookup per file, at attach. */
#ifndef NP_PYTHON_H
#define NP_PYTHON_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ncclprobe/events.h"

/* Where things are in this build's objects: the BPF walker's part (struct
 * np_py_cfg, shared with BPF) and the code-object and string fields the
 * symbolizer reads. */
struct np_python_layout {
    bool walkable;           /* frames can be walked: a known version, GIL build */
    char why_not[160];       /* when not: for the user */
    bool from_debug_offsets; /* 3.13+: read from the target's _Py_DebugOffsets */
    struct np_py_cfg bpf;    /* max_frames is the session's to set */
    uint32_t co_firstlineno, co_filename, co_name, co_linetable;
    uint32_t co_qualname; /* NP_PY_NO_FIELD on 3.10: co_name is all there is */
    uint32_t bytes_size, bytes_data;
    uint32_t str_length, str_state, str_ascii_data, str_compact_data;
    bool linetable_310; /* PEP 626 pairs (3.10), else the 3.11+ location table */
    uint64_t code_type; /* &PyCode_Type in the target, 0 if unknown */
};

struct np_python_info {
    bool found;
    char path[PATH_MAX]; /* the file with _PyRuntime, as the target sees it */
    bool shared;         /* a libpython shared library, not the executable */
    unsigned major, minor, micro;
    uint64_t version_hex;  /* PY_VERSION_HEX; 0 when only the file name told (3.10) */
    bool free_threaded;    /* 3.13t/3.14t: read from _Py_DebugOffsets */
    uint64_t runtime_addr; /* &_PyRuntime in the target */
    struct np_python_layout layout;
};

/* Looks at one executable mapping of the target: 1 and *out filled when
 * its file holds the runtime, 0 otherwise. */
struct np_mapping;
int np_python_inspect(pid_t pid, const struct np_mapping *m, struct np_python_info *out);

#endif
