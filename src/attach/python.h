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

struct np_python_info {
    bool found;
    char path[PATH_MAX]; /* the file with _PyRuntime, as the target sees it */
    bool shared;         /* a libpython shared library, not the executable */
    unsigned major, minor, micro;
    uint64_t version_hex;  /* PY_VERSION_HEX; 0 when only the file name told (3.10) */
    bool free_threaded;    /* 3.13t/3.14t: read from _Py_DebugOffsets */
    uint64_t runtime_addr; /* &_PyRuntime in the target */
};

/* Looks at one executable mapping of the target: 1 and *out filled when
 * its file holds the runtime, 0 otherwise. */
struct np_mapping;
int np_python_inspect(pid_t pid, const struct np_mapping *m, struct np_python_info *out);

#endif
