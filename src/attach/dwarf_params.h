/* dwarf_params.h - where a function's parameters are at its entry, from the
 * library's own DWARF: in which register, or in which stack slot (relative
 * to the CFA, the caller's stack pointer before the call), read from the
 * DW_TAG_formal_parameter locations of the function's out-of-line
 * DW_TAG_subprogram (a compiler clone's concrete instance included: its
 * parameters name their abstract origin). A uprobe on a GCC IPA-SRA clone
 * (".isra.N") needs this: the clone's signature is the compiler's choice. */
#ifndef NP_DWARF_PARAMS_H
#define NP_DWARF_PARAMS_H

#include <stddef.h>
#include <stdint.h>

enum np_param_kind {
    NP_PARAM_ABSENT, /* no parameter of that name */
    NP_PARAM_NONE,   /* named, but without a location at entry (optimized out, or split by
                        IPA-SRA into pieces the DWARF does not name) */
    NP_PARAM_REG,    /* in register reg */
    NP_PARAM_CFA,    /* in memory at CFA + cfa_offset (x86-64: [rsp + 8 + cfa_offset]) */
    NP_PARAM_OTHER,  /* some other location expression */
};

/* DWARF register numbers of the x86-64 psABI used for arguments. */
enum np_dwarf_reg {
    NP_DWREG_RDX = 1,
    NP_DWREG_RCX = 2,
    NP_DWREG_RSI = 4,
    NP_DWREG_RDI = 5,
    NP_DWREG_R8 = 8,
    NP_DWREG_R9 = 9,
};

struct np_param_loc {
    enum np_param_kind kind;
    int reg;            /* NP_PARAM_REG: the DWARF register number */
    int64_t cfa_offset; /* NP_PARAM_CFA */
};

/* For each of names[0..n), where the parameter so named is at vaddr, the
 * entry of the out-of-line function there (a .symtab symbol's value). The
 * first parameter of a name wins. Returns 0, -ENODATA when the file has no
 * DWARF, -ENOENT when no subprogram covers vaddr, or another negative errno. */
int np_dwarf_entry_params(const char *path, uint64_t vaddr, const char *const *names, size_t n,
                          struct np_param_loc *out);

/* "rdi", "cfa+8", "none", "absent", "other" (size >= 24). */
void np_param_loc_name(const struct np_param_loc *loc, char *buf, size_t size);

#endif
