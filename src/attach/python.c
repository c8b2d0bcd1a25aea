/* python.c - CPython runtime detection (see python.h). Facts used, from
 * ../shared/notes/cpython.md: `_PyRuntime` is exported by every build
 * (shared and static); `Py_Version` (3.11+) holds PY_VERSION_HEX; from 3.13
 * `_PyRuntime` starts with `_Py_DebugOffsets`: cookie "xdebugpy", then the
 * version (u64), then free_threaded (u64). 3.10 has neither: its version
 * comes from the library's or executable's name. */
#define _GNU_SOURCE
#include "attach/python.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach/elfscan.h"
#include "attach/procmaps.h"

static void set_version(struct np_python_info *out, uint64_t hex) {
    out->version_hex = hex;
    out->major = (unsigned)(hex >> 24) & 0xff;
    out->minor = (unsigned)(hex >> 16) & 0xff;
    out->micro = (unsigned)(hex >> 8) & 0xff;
}

/* "python3.10", "libpython3.10.so.1.0": the version the name carries. */
static bool version_from_name(const char *path, struct np_python_info *out) {
    const char *base = strrchr(path, '/');
    const char *p = strstr(base ? base : path, "python3.");
    unsigned minor;
    if (!p || sscanf(p, "python3.%u", &minor) != 1)
        return false;
    out->major = 3, out->minor = minor, out->micro = 0;
    return true;
}

/* Reads what the file says about its runtime; 1 if it holds one. */
static int inspect_file(int fd, const char *path, struct np_python_info *out) {
    uint64_t runtime_vaddr, version_vaddr, version = 0;
    struct {
        char cookie[8];
        uint64_t version;
        uint64_t free_threaded;
    } debug;

    int r = np_elf_read_symbol(fd, "_PyRuntime", &runtime_vaddr, &debug, sizeof(debug));
    if (r == -ENOENT || r == -EINVAL)
        return 0;
    if (r == 0 && memcmp(debug.cookie, "xdebugpy", 8) == 0) {
        set_version(out, debug.version);
        out->free_threaded = debug.free_threaded != 0;
    } else if (np_elf_read_symbol(fd, "Py_Version", &version_vaddr, &version, sizeof(version)) ==
                   0 &&
               version) {
        set_version(out, version);
    } else if (!version_from_name(path, out)) {
        return 0; /* a _PyRuntime we cannot place: not walkable */
    }
    out->runtime_addr = runtime_vaddr; /* made absolute by the caller */
    return 1;
}

/* libpythonX.Y.so, or the executable itself (a static build, or an
 * embedding program): other libraries are not looked at. */
static bool may_hold_runtime(pid_t pid, const char *path) {
    const char *base = strrchr(path, '/');
    if (strstr(base ? base : path, "python"))
        return true;
    char link[64], exe[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, exe, sizeof(exe) - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    return strcmp(exe, path) == 0;
}

int np_python_inspect(pid_t pid, const struct np_mapping *m, struct np_python_info *out) {
    if (!m->exec || !may_hold_runtime(pid, m->path))
        return 0;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, m->path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct np_python_info info = {0};
    uint64_t bias;
    int found = inspect_file(fd, m->path, &info) == 1 &&
                np_elf_load_bias(fd, m->start, m->offset, &bias) == 0;
    close(fd);
    if (!found)
        return 0;
    info.found = true;
    info.runtime_addr += bias;
    info.shared = strstr(m->path, ".so") != NULL;
    snprintf(info.path, sizeof(info.path), "%s", m->path);
    *out = info;
    return 1;
}
