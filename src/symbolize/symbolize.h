/* symbolize.h - address -> frame name for one process, with elfutils'
 * libdw: one Dwfl per process built from /proc/PID/maps, module files
 * opened through /proc/PID/root (so containers resolve their own files),
 * symbols from .symtab, .dynsym and separate debug files, C++ demangled.
 * Results are cached per address. A symbolizer may be used from several
 * threads: np_symbolize and np_symbolizer_refresh take its lock. */
#ifndef NP_SYMBOLIZE_H
#define NP_SYMBOLIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct np_symbolizer;

/* A source position: file NULL and line 0 when unknown. With inlined
 * functions, a frame's position is the call site of the function inlined
 * into it (DW_AT_call_file/line); the innermost one's is the line table's. */
struct np_src_pos {
    const char *file;
    int line;
};

struct np_frame {
    const char *name;        /* short demangled name, or "[module+0xoff]", or "[unknown]" */
    const char *module;      /* basename of the module, "" when unknown */
    const char *module_path; /* the module's path as the target maps it */
    uint64_t module_offset;  /* pc - the module's load address */
    const char *build_id;    /* hex GNU build id of the module, "" when it has none */
    struct np_src_pos src;   /* where in the source this frame is (DWARF), or unknown */
    bool known;              /* a symbol was found */
    const char *inlined; /* the functions inlined at this pc (DWARF scopes, where debug info is),
                            outermost first, as "f [inlined];g [inlined]"; NULL if none */
    struct np_src_pos *inlined_src; /* one per inlined function, outermost first */
    int n_inlined;
};

int np_symbolizer_new(pid_t pid, struct np_symbolizer **out);
void np_symbolizer_free(struct np_symbolizer *s);

/* Where to look for separate debug files, in libdw's syntax
 * ("DIR:DIR", "+" keeps .gnu_debuglink CRC checks); set before creating
 * symbolizers. The default finds the distro's /usr/lib/debug/.build-id. */
void np_symbolizer_set_debuginfo_path(const char *path);

/* Re-reads the process's mappings (after dlopen) and opens every module's
 * file now, while the process is alive. */
int np_symbolizer_refresh(struct np_symbolizer *s);

/* Looks up pc. A return address points after the call: pass
 * is_return_address so the call instruction itself is looked up. */
const struct np_frame *np_symbolize(struct np_symbolizer *s, uint64_t pc, bool is_return_address);

/* Held while libdw objects the symbolizer owns are used outside it (the
 * unwinder reading a module's CFI); not held across np_symbolize. */
void np_symbolizer_lock(struct np_symbolizer *s);
void np_symbolizer_unlock(struct np_symbolizer *s);

/* The libdw module that maps pc, re-reading the mappings (at most every
 * 100 ms) when none does; NULL if still none. For the unwinder, with the
 * lock held for as long as the module is used. */
struct Dwfl_Module;
struct Dwfl_Module *np_symbolizer_module(struct np_symbolizer *s, uint64_t pc);

/* Demangles a C++ symbol and shortens it to the qualified name without
 * parameters or return type ("ns::Foo<int>::bar"); plain C names come back
 * unchanged. Returns a malloc'd string, NULL on allocation failure. */
char *np_demangle_short(const char *symbol);

#endif
