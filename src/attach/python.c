/* python.c - CPython runtime detection (see python.h). Facts used, from
 * ../shared/notes/cpython.md: `_PyRuntime` is exported by every build
 * (shared and static); `Py_Version` (3.11+) holds PY_VERSION_HEX; from 3.13
 * `_PyRuntime` starts with `_Py_DebugOffsets`: cookie "xdebugpy", then the
 * version (u64), then free_threaded (u64). 3.10 has neither: its version
 * comes from the library's or executable's name.
 *
 * It also works out the layout the frame walker and the code-object reader
 * need (struct np_python_layout): from tables for 3.10-3.12, from the target's
 * own _Py_DebugOffsets for 3.13+ (with a table of where each field sits in
 * that struct, which changes between minor versions). */
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
#include "lib/util.h"

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

/* ---- layouts ---------------------------------------------------------- */

#define NONE NP_PY_NO_FIELD
/* _PyStackChunk {previous, size, top, data[]}: the same in 3.11-3.14 (not in
 * _Py_DebugOffsets) */
#define CHUNK_DATA 0x18

/* 3.10-3.12, x86-64, GIL builds: offsetof() against each version's headers,
 * checked on live interpreters (../shared/notes/cpython.md, tables 1.2,
 * 2.1, 4 and 5). */
static const struct np_python_layout table_layouts[] = {
    {.bpf = {.interp_head = 0x20,
             .interp_next = 0x0,
             .interp_threads = 0x8,
             .tstate_next = 0x8,
             .tstate_thread_id = 0xb0,
             .tstate_frame = 0x18,
             .cframe_frame = NONE,
             .frame_previous = 0x18,
             .frame_code = 0x20,
             .frame_instr = 0x60,
             .frame_owner = NONE,
             .frame_is_entry = NONE,
             .code_adaptive = 0,
             .legacy_frames = 1,
             .owner_shim = 255,
             .frame_read = 0x68,
             .tstate_chunk = NONE, /* PyFrameObjects: no data stack */
             .chunk_data = NONE},
     .co_firstlineno = 0x28,
     .co_filename = 0x68,
     .co_name = 0x70,
     .co_qualname = NONE,
     .co_linetable = 0x78,
     .bytes_size = 0x10,
     .bytes_data = 0x20,
     .str_length = 0x10,
     .str_state = 0x20,
     .str_ascii_data = 48,
     .str_compact_data = 72,
     .linetable_310 = true},
    {.bpf = {.interp_head = 0x28,
             .interp_next = 0x0,
             .interp_threads = 0x10,
             .tstate_next = 0x8,
             .tstate_thread_id = 0x98,
             .tstate_frame = 0x38,
             .cframe_frame = 0x8,
             .frame_previous = 0x30,
             .frame_code = 0x20,
             .frame_instr = 0x38,
             .frame_owner = NONE,
             .frame_is_entry = 0x44,
             .code_adaptive = 0xb8,
             .owner_shim = 255,
             .frame_read = 0x48,
             .tstate_chunk = 0x128,
             .chunk_data = CHUNK_DATA},
     .co_firstlineno = 0x48,
     .co_filename = 0x70,
     .co_name = 0x78,
     .co_qualname = 0x80,
     .co_linetable = 0x88,
     .bytes_size = 0x10,
     .bytes_data = 0x20,
     .str_length = 0x10,
     .str_state = 0x20,
     .str_ascii_data = 48,
     .str_compact_data = 72},
    {.bpf = {.interp_head = 0x28,
             .interp_next = 0x0,
             .interp_threads = 0x48,
             .tstate_next = 0x8,
             .tstate_thread_id = 0x88,
             .tstate_frame = 0x38,
             .cframe_frame = 0x0,
             .frame_previous = 0x8,
             .frame_code = 0x0,
             .frame_instr = 0x38,
             .frame_owner = 0x46,
             .frame_is_entry = NONE,
             .code_adaptive = 0xc0,
             .owner_shim = 3,
             .frame_read = 0x48,
             .tstate_chunk = 0xe8,
             .chunk_data = CHUNK_DATA},
     .co_firstlineno = 0x44,
     .co_filename = 0x70,
     .co_name = 0x78,
     .co_qualname = 0x80,
     .co_linetable = 0x88,
     .bytes_size = 0x10,
     .bytes_data = 0x20,
     .str_length = 0x10,
     .str_state = 0x20,
     .str_ascii_data = 40,
     .str_compact_data = 56},
};

/* 3.13+: where each field we use sits inside _Py_DebugOffsets (byte
 * positions, from the 3.13/3.14 headers). The values there are the offsets. */
struct debug_positions {
    unsigned minor;
    uint32_t struct_size;
    uint32_t interp_head, interp_next, interp_threads;
    uint32_t tstate_next, tstate_frame, tstate_thread_id, tstate_chunk;
    uint32_t frame_previous, frame_code, frame_instr, frame_owner;
    uint32_t co_filename, co_name, co_qualname, co_linetable, co_firstlineno, co_adaptive;
    uint32_t bytes_size, bytes_data, str_state, str_length, str_ascii_size;
    uint8_t owner_shim; /* not in the struct: the owner enum (renumbered in 3.14) */
};

static const struct debug_positions debug_positions[] = {
    {13,  584, 40,  64,  72,  168, 184, 192, 208, 232, 240, 248, 264,
     280, 288, 296, 304, 312, 344, 520, 528, 544, 552, 560, 3},
    /* 3.14's datastack_chunk position (232) is inferred: the thread_state
     * fields keep their 3.13 order, shifted like the rest */
    {14,  760, 40,  64,  72,  192, 208, 216, 232, 256, 264, 272, 288,
     320, 328, 336, 344, 352, 384, 600, 608, 624, 632, 640, 3},
};

#define DEBUG_OFFSETS_MAX 768

static uint64_t field_at(const uint8_t *debug, uint32_t pos) {
    uint64_t v;
    memcpy(&v, debug + pos, sizeof(v));
    return v;
}

static uint16_t round_up8(uint32_t n) {
    return (uint16_t)((n + 7) & ~7u);
}

/* Fills l from a 3.13+ _Py_DebugOffsets image; -ENOTSUP for a minor
 * version whose struct we do not know, -EINVAL for values out of range. */
static int layout_from_debug(const uint8_t *debug, unsigned minor, struct np_python_layout *l) {
    const struct debug_positions *p = NULL;
    for (size_t i = 0; i < NP_ARRAY_SIZE(debug_positions); i++)
        if (debug_positions[i].minor == minor)
            p = &debug_positions[i];
    if (!p)
        return -ENOTSUP;
    uint64_t v[] = {field_at(debug, p->frame_previous), field_at(debug, p->frame_code),
                    field_at(debug, p->frame_instr), field_at(debug, p->frame_owner)};
    for (size_t i = 0; i < NP_ARRAY_SIZE(v); i++)
        if (v[i] > NP_PY_FRAME_READ - 8)
            return -EINVAL;
    uint64_t big[] = {field_at(debug, p->interp_head),    field_at(debug, p->interp_next),
                      field_at(debug, p->interp_threads), field_at(debug, p->tstate_next),
                      field_at(debug, p->tstate_frame),   field_at(debug, p->tstate_thread_id),
                      field_at(debug, p->co_adaptive),    field_at(debug, p->co_linetable),
                      field_at(debug, p->tstate_chunk)};
    for (size_t i = 0; i < NP_ARRAY_SIZE(big); i++)
        if (big[i] > 0xfff0)
            return -EINVAL;
    *l = (struct np_python_layout){
        .from_debug_offsets = true,
        .bpf = {.interp_head = (uint32_t)big[0],
                .interp_next = (uint32_t)big[1],
                .interp_threads = (uint32_t)big[2],
                .tstate_next = (uint16_t)big[3],
                .tstate_frame = (uint16_t)big[4],
                .tstate_thread_id = (uint16_t)big[5],
                .cframe_frame = NONE,
                .frame_previous = (uint16_t)v[0],
                .frame_code = (uint16_t)v[1],
                .frame_instr = (uint16_t)v[2],
                .frame_owner = (uint16_t)v[3],
                .frame_is_entry = NONE,
                .code_adaptive = (uint16_t)big[6],
                .owner_shim = p->owner_shim,
                .tstate_chunk = (uint16_t)big[8],
                .chunk_data = CHUNK_DATA},
        .co_filename = (uint32_t)field_at(debug, p->co_filename),
        .co_name = (uint32_t)field_at(debug, p->co_name),
        .co_qualname = (uint32_t)field_at(debug, p->co_qualname),
        .co_linetable = (uint32_t)big[7],
        .co_firstlineno = (uint32_t)field_at(debug, p->co_firstlineno),
        .bytes_size = (uint32_t)field_at(debug, p->bytes_size),
        .bytes_data = (uint32_t)field_at(debug, p->bytes_data),
        .str_state = (uint32_t)field_at(debug, p->str_state),
        .str_length = (uint32_t)field_at(debug, p->str_length),
        .str_ascii_data = (uint32_t)field_at(debug, p->str_ascii_size),
        /* PyCompactUnicodeObject: the ASCII header plus utf8_length and utf8 */
        .str_compact_data = (uint32_t)field_at(debug, p->str_ascii_size) + 16,
    };
    uint32_t top = v[0];
    for (size_t i = 1; i < NP_ARRAY_SIZE(v); i++)
        top = v[i] > top ? (uint32_t)v[i] : top;
    l->bpf.frame_read = round_up8(top + 8);
    return 0;
}

/* Works out info->layout; explains in why_not when frames cannot be walked. */
/* What one pass over the file's symbols found (inspect_file). */
struct runtime_symbols {
    uint8_t runtime[DEBUG_OFFSETS_MAX]; /* _PyRuntime's initial bytes: 3.13+ _Py_DebugOffsets */
    int runtime_err;
    uint64_t runtime_vaddr;
    uint64_t py_version; /* Py_Version (3.11+), 0 if absent */
    uint64_t code_type;  /* &PyCode_Type in the file, 0 if absent */
};

static void compute_layout(pid_t pid, const struct runtime_symbols *syms, uint64_t bias,
                           struct np_python_info *info) {
    struct np_python_layout *l = &info->layout;
    int err = 0;

    if (info->free_threaded) {
        snprintf(l->why_not, sizeof(l->why_not),
                 "free-threaded CPython %u.%ut is not supported: no Python frames", info->major,
                 info->minor);
        return;
    }
    if (info->major == 3 && info->minor >= 10 && info->minor <= 12) {
        *l = table_layouts[info->minor - 10];
    } else if (info->major == 3 && info->minor >= 13) {
        uint8_t debug[DEBUG_OFFSETS_MAX] = {0};
        /* the target's own copy; the file's initial data when unreadable */
        if (np_read_process(pid, info->runtime_addr, debug, sizeof(debug)) != 0) {
            err = syms->runtime_err;
            memcpy(debug, syms->runtime, sizeof(debug));
        }
        if (!err && memcmp(debug, "xdebugpy", 8) != 0)
            err = -EINVAL;
        if (!err)
            err = layout_from_debug(debug, info->minor, l);
    } else {
        err = -ENOTSUP;
    }
    if (err) {
        snprintf(l->why_not, sizeof(l->why_not),
                 err == -ENOTSUP ? "CPython %u.%u is not supported: no Python frames"
                                 : "CPython %u.%u: unexpected _Py_DebugOffsets: no Python frames",
                 info->major, info->minor);
        return;
    }
    if (syms->code_type)
        l->code_type = syms->code_type + bias;
    l->bpf.runtime = info->runtime_addr;
    l->walkable = true;
}

/* Reads what the file says about its runtime, in one pass over its
 * symbols; 1 if it holds one. */
static int inspect_file(int fd, const char *path, struct runtime_symbols *syms,
                        struct np_python_info *out) {
    struct np_elf_symbol_query q[] = {
        {.name = "_PyRuntime", .buf = syms->runtime, .len = sizeof(syms->runtime)},
        {.name = "Py_Version", .buf = &syms->py_version, .len = sizeof(syms->py_version)},
        {.name = "PyCode_Type"},
    };
    if (np_elf_read_symbols(fd, q, NP_ARRAY_SIZE(q)) != 0 || q[0].err == -ENOENT)
        return 0;
    syms->runtime_err = q[0].err;
    syms->runtime_vaddr = q[0].vaddr;
    if (q[1].err)
        syms->py_version = 0;
    syms->code_type = q[2].err ? 0 : q[2].vaddr;

    const uint8_t *debug = syms->runtime; /* cookie, version, free_threaded (3.13+) */
    uint64_t version, free_threaded;
    memcpy(&version, debug + 8, sizeof(version));
    memcpy(&free_threaded, debug + 16, sizeof(free_threaded));
    if (!syms->runtime_err && memcmp(debug, "xdebugpy", 8) == 0) {
        set_version(out, version);
        out->free_threaded = free_threaded != 0;
    } else if (syms->py_version) {
        set_version(out, syms->py_version);
    } else if (!version_from_name(path, out)) {
        return 0; /* a _PyRuntime we cannot place: not walkable */
    }
    out->runtime_addr = syms->runtime_vaddr; /* made absolute by the caller */
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
    struct runtime_symbols syms = {0};
    uint64_t bias;
    int found = inspect_file(fd, m->path, &syms, &info) == 1 &&
                np_elf_load_bias(fd, m->start, m->offset, &bias) == 0;
    if (!found) {
        close(fd);
        return 0;
    }
    info.found = true;
    info.runtime_addr += bias;
    info.shared = strstr(m->path, ".so") != NULL;
    snprintf(info.path, sizeof(info.path), "%s", m->path);
    compute_layout(pid, &syms, bias, &info);
    close(fd);
    *out = info;
    return 1;
}
