/* elfscan.h - finds the probe points inside one ELF file: every symbol of
 * the probe table, from .dynsym and .symtab (local C++ symbols too), as a
 * file offset ready for a uprobe. Also spots thunks - entry points that
 * only tail-jump into another probed function (CUDA 13's __cudaLaunchKernel
 * jumps into cudaLaunchKernel) - so one launch is not counted twice. */
#ifndef NP_ELFSCAN_H
#define NP_ELFSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attach/probes.h"

struct np_elf_match {
    const struct np_probe_def *def;
    uint64_t vaddr;
    uint64_t file_offset;
    int thunk_target; /* index of the match this one tail-jumps into, or -1 */
};

struct np_elf_scan {
    struct np_elf_match *matches;
    size_t count;
    char build_id[41]; /* hex, "" when the file has none */
};

/* Scans the ELF file open on fd. An ELF that is not x86-64, or not ELF at
 * all, yields zero matches and returns 0. */
int np_elf_scan_fd(int fd, struct np_elf_scan *out);
void np_elf_scan_free(struct np_elf_scan *scan);

/* Finds symbol name (.dynsym or .symtab) in the ELF open on fd: its vaddr,
 * and, when len > 0, the first len bytes of its initial value from the
 * file. -ENOENT when there is no such symbol. */
int np_elf_read_symbol(int fd, const char *name, uint64_t *vaddr, void *buf, size_t len);
/* Several symbols in one pass over the symbol tables: each query's err
 * is 0 (vaddr set, and buf filled when len > 0), -ENOENT or -ERANGE.
 * Returns -EINVAL when fd is not an ELF file. */
struct np_elf_symbol_query {
    const char *name;
    void *buf;
    size_t len;
    uint64_t vaddr; /* out */
    int err;        /* out */
    /* also match the compiler's clones of name ("name.isra.11", "name.constprop.0.isra.0";
     * not the ".cold"/".part" pieces): GCC's -O3 turns static functions into IPA clones */
    bool clones;
    bool clone; /* out: what matched was a clone */
};
int np_elf_read_symbols(int fd, struct np_elf_symbol_query *q, size_t n);
/* The file offset of vaddr (a uprobe's), through the PT_LOAD that maps it:
 * -ENOENT when none does, -ENOEXEC when fd is not an x86-64 ELF64 file. */
int np_elf_file_offset(int fd, uint64_t vaddr, uint64_t *offset);

/* The same restricted to what the dynamic loader sees: .dynsym only, and
 * only defined functions and objects (an IFUNC's value is its resolver, not
 * the function). -ENOEXEC when fd is not an x86-64 ELF64 file. The
 * injector (src/inject) finds dlopen & co in a target's libc this way. */
int np_elf_read_dynsyms(int fd, struct np_elf_symbol_query *q, size_t n);

/* The last executable PT_LOAD of the ELF open on fd (its text). -ENOENT when
 * there is none, -ENOEXEC when fd is not an x86-64 ELF64 file. */
struct np_elf_segment {
    uint64_t vaddr, offset, filesz, memsz;
};
int np_elf_exec_segment(int fd, struct np_elf_segment *out);

/* The vaddr of the first occurrence of the len bytes of pattern in the file
 * bytes of that segment: 0, -ENOENT when absent, -ENOEXEC as above. */
int np_elf_find_code(int fd, const void *pattern, size_t len, uint64_t *vaddr);

/* What else the ELF open on fd carries: whether it has a .symtab, and the
 * first string of its .rodata that starts with prefix (copied to text, ""
 * when there is none: libnccl's "NCCL version 2.29.7+cuda13.2" banner).
 * -ENOEXEC when fd is not an x86-64 ELF64 file, -EINVAL when not ELF. */
int np_elf_describe(int fd, const char *prefix, bool *has_symtab, char *text, size_t size);

/* The load bias of the ELF open on fd, from one of its mappings (start
 * address and file offset): address in the process = bias + vaddr. */
int np_elf_load_bias(int fd, uint64_t mapped_start, uint64_t mapped_offset, uint64_t *bias);

/* Decodes the entry of a function: returns 1 and the jump target's vaddr if
 * the code is only an optional endbr64 / push rbp; mov rbp,rsp; pop rbp
 * prologue followed by a jmp; 0 otherwise. Exposed for unit tests. */
int np_decode_thunk(const uint8_t *code, size_t len, uint64_t vaddr, uint64_t *target);

#endif
