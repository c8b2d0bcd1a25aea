/* dwarf_params.c - parameter locations at a function's entry, from its
 * DW_TAG_subprogram's formal parameters (see dwarf_params.h). The compile
 * unit whose ranges hold the address is found first; only its top level
 * and namespaces are searched, where GCC puts out-of-line functions. */
#define _GNU_SOURCE
#include "attach/dwarf_params.h"
#include "attach/dwarf_layout.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The subprogram in scope (or a namespace under it) whose code holds vaddr. */
static bool find_subprogram(Dwarf_Die *scope, uint64_t vaddr, Dwarf_Die *out) {
    Dwarf_Die child;
    if (dwarf_child(scope, &child) != 0)
        return false;
    do {
        int tag = dwarf_tag(&child);
        if (tag == DW_TAG_subprogram && dwarf_haspc(&child, vaddr) > 0) {
            *out = child;
            return true;
        }
        if (tag == DW_TAG_namespace && find_subprogram(&child, vaddr, out))
            return true;
    } while (dwarf_siblingof(&child, &child) == 0);
    return false;
}

static bool find_function(Dwarf *dw, uint64_t vaddr, Dwarf_Die *out) {
    Dwarf_Off off = 0, next;
    size_t header;
    while (dwarf_nextcu(dw, off, &next, &header, NULL, NULL, NULL) == 0) {
        Dwarf_Die cu;
        if (dwarf_offdie(dw, off + header, &cu) && dwarf_haspc(&cu, vaddr) > 0 &&
            find_subprogram(&cu, vaddr, out))
            return true;
        off = next;
    }
    return false;
}

/* DW_OP_fbreg is CFA-relative when the frame base is DW_OP_call_frame_cfa (GCC's, clang's). */
static bool frame_base_is_cfa(Dwarf_Die *fn) {
    Dwarf_Attribute attr;
    Dwarf_Op *ops;
    size_t n;
    return dwarf_attr(fn, DW_AT_frame_base, &attr) && dwarf_getlocation(&attr, &ops, &n) == 0 &&
           n == 1 && ops[0].atom == DW_OP_call_frame_cfa;
}

static struct np_param_loc location_at(Dwarf_Die *param, uint64_t vaddr, bool cfa_base) {
    struct np_param_loc loc = {.kind = NP_PARAM_NONE};
    Dwarf_Attribute attr;
    Dwarf_Op *ops;
    size_t n;
    if (!dwarf_attr(param, DW_AT_location, &attr))
        return loc;
    int got = dwarf_getlocation_addr(&attr, vaddr, &ops, &n, 1);
    if (got == 0 || (got == 1 && n == 0))
        return loc; /* no location at the entry */
    loc.kind = NP_PARAM_OTHER;
    if (got != 1 || n != 1)
        return loc;
    if (ops[0].atom >= DW_OP_reg0 && ops[0].atom <= DW_OP_reg31) {
        loc = (struct np_param_loc){.kind = NP_PARAM_REG, .reg = ops[0].atom - DW_OP_reg0};
    } else if (ops[0].atom == DW_OP_regx) {
        loc = (struct np_param_loc){.kind = NP_PARAM_REG, .reg = (int)ops[0].number};
    } else if (ops[0].atom == DW_OP_fbreg && cfa_base) {
        loc = (struct np_param_loc){.kind = NP_PARAM_CFA, .cfa_offset = (int64_t)ops[0].number};
    }
    return loc;
}

/* The name of a parameter, its abstract origin's for a clone's or an inlined copy's. */
static const char *param_name(Dwarf_Die *param) {
    Dwarf_Attribute attr;
    return dwarf_attr_integrate(param, DW_AT_name, &attr) ? dwarf_formstring(&attr) : NULL;
}

static void read_params(Dwarf_Die *fn, uint64_t vaddr, const char *const *names, size_t n,
                        struct np_param_loc *out) {
    bool cfa_base = frame_base_is_cfa(fn);
    Dwarf_Die child;
    if (dwarf_child(fn, &child) != 0)
        return;
    do {
        if (dwarf_tag(&child) != DW_TAG_formal_parameter)
            continue;
        const char *name = param_name(&child);
        for (size_t i = 0; name && i < n; i++)
            if (out[i].kind == NP_PARAM_ABSENT && strcmp(name, names[i]) == 0)
                out[i] = location_at(&child, vaddr, cfa_base);
    } while (dwarf_siblingof(&child, &child) == 0);
}

int np_dwarf_entry_params(const char *path, uint64_t vaddr, const char *const *names, size_t n,
                          struct np_param_loc *out) {
    for (size_t i = 0; i < n; i++)
        out[i] = (struct np_param_loc){.kind = NP_PARAM_ABSENT};
    int fd, err;
    Dwarf *dw = np_dwarf_open(path, &fd, &err);
    if (!dw)
        return err;
    Dwarf_Die fn;
    err = -ENOENT;
    if (find_function(dw, vaddr, &fn)) {
        read_params(&fn, vaddr, names, n, out);
        err = 0;
    }
    np_dwarf_close(dw, fd);
    return err;
}

void np_param_loc_name(const struct np_param_loc *loc, char *buf, size_t size) {
    static const char *const regs[] = {"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
                                       "r8",  "r9",  "r10", "r11", "r12", "r13", "r14", "r15"};
    switch (loc->kind) {
    case NP_PARAM_REG:
        if (loc->reg >= 0 && loc->reg < (int)(sizeof(regs) / sizeof(regs[0])))
            snprintf(buf, size, "%s", regs[loc->reg]);
        else
            snprintf(buf, size, "dwarf_reg%d", loc->reg);
        return;
    case NP_PARAM_CFA:
        snprintf(buf, size, "cfa%+lld", (long long)loc->cfa_offset);
        return;
    case NP_PARAM_NONE:
        snprintf(buf, size, "none");
        return;
    case NP_PARAM_ABSENT:
        snprintf(buf, size, "absent");
        return;
    default:
        snprintf(buf, size, "other");
    }
}
