/* pycode.h - CPython code objects -> "qualname (file.py:LINE)".
 *
 * BPF records, per Python frame, only the code object's address and the
 * instruction offset (struct np_py_frame). This reads the rest from the live
 * process with process_vm_readv: co_qualname (3.11+; co_name on 3.10),
 * co_filename, co_firstlineno and the line table, which maps the offset to a
 * line (the 3.10 PEP 626 table, or the 3.11+ location table). Code objects
 * are cached per address. A stack of code objects not seen before arrives
 * at once (BPF wakes the reader) and is re-read then, checking type and
 * field pointers, so a freed and reused address is noticed. */
#ifndef NP_PYCODE_H
#define NP_PYCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct np_python_layout;
struct np_pycode;

struct np_py_location {
    const char *name;     /* qualname (3.11+) or name (3.10); NULL if unreadable */
    const char *filename; /* co_filename as the interpreter has it */
    int line;             /* -1 when the instruction has no line */
};

/* Reader of one process's code objects; layout must outlive it. */
struct np_pycode *np_pycode_new(pid_t pid, const struct np_python_layout *layout);
void np_pycode_free(struct np_pycode *c);

/* (Re)reads the code object at code from the process, unless the cached
 * one is still there (same type, name, file and line-table pointers):
 * 0; 1 when it replaced another code object cached at that address (what
 * was named by the address may now be named wrongly); or -errno (-EFAULT:
 * unreadable, -EINVAL: not a code object). Called for the frames of a stack
 * not seen before, as soon as it arrives. */
int np_pycode_load(struct np_pycode *c, uint64_t code);

/* True the first time it is asked for the code object cached at code (and
 * again once another replaced it there): BPF is told of each once. */
bool np_pycode_first_sight(struct np_pycode *c, uint64_t code);

/* The process freed the code object at code: the next np_pycode_load there
 * reads what is there then, and returns 1 when it is a code object, even
 * one whose fields repeat the freed one's. Until then the cached one still
 * names it (records from before the free). */
void np_pycode_freed(struct np_pycode *c, uint64_t code);

/* Looks up one frame, from the cache when the code object is in it (else
 * as np_pycode_load): 0 and *out filled, or -errno. */
int np_pycode_locate(struct np_pycode *c, uint64_t code, int32_t instr, struct np_py_location *out);

/* Line of the instruction at byte offset addr, from a code object's line
 * table; firstlineno for addr < 0 (a frame that has not started); -1 when
 * the instruction has no line. Exposed for tests. */
int np_py_line_310(const uint8_t *table, size_t len, int firstlineno, int addr);
int np_py_line_311(const uint8_t *table, size_t len, int firstlineno, int addr);

/* The file name as folded stacks show it: the path below site-packages,
 * dist-packages or lib/pythonX.Y, else the base name. Points into path. */
const char *np_py_short_filename(const char *path);

#endif
