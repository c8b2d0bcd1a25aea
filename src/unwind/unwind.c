/* unwind.c - cached-rule DWARF unwinder (see unwind.h). */
#define _GNU_SOURCE
#include "unwind/unwind.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdlib.h>
#include <string.h>

#include "lib/hashmap.h"
#include "symbolize/symbolize.h"

/* x86-64 DWARF register numbers */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

enum rule_status { RULE_OK, RULE_NO_MODULE, RULE_NO_CFI, RULE_COMPLEX };
enum reg_loc { LOC_SAME, LOC_UNDEFINED, LOC_AT_CFA }; /* LOC_AT_CFA: saved at CFA + off */

/* How to get from a frame at one PC to its caller. */
struct cfa_rule {
    uint8_t status;  /* enum rule_status */
    uint8_t cfa_reg; /* REG_RSP or REG_RBP */
    uint8_t ra;      /* enum reg_loc: LOC_UNDEFINED marks the outermost frame */
    uint8_t rbp;     /* enum reg_loc */
    int32_t cfa_off, ra_off, rbp_off;
};

/* The rules of the PCs seen last, by a few bits of the PC, in front of the
 * map: a deep stack looks up a rule per frame at every launch. Rules are
 * never freed before the unwinder, so an entry stays valid. */
#define RECENT_RULES 1024

struct np_unwinder {
    struct np_symbolizer *sym;
    struct np_map rules; /* pc -> struct cfa_rule * */
    struct {
        uint64_t pc;
        const struct cfa_rule *rule;
    } recent[RECENT_RULES];
};

struct np_unwinder *np_unwinder_new(struct np_symbolizer *sym) {
    struct np_unwinder *u = calloc(1, sizeof(*u));
    if (!u)
        return NULL;
    u->sym = sym;
    np_map_init(&u->rules);
    return u;
}

void np_unwinder_free(struct np_unwinder *u) {
    if (!u)
        return;
    np_map_free(&u->rules, free);
    free(u);
}

/* Where the caller's register is: libdw hands back a tiny DWARF expression. */
static int register_location(Dwarf_Frame *frame, int regno, uint8_t *loc, int32_t *off) {
    Dwarf_Op mem[3], *ops = NULL;
    size_t nops = 0;

    if (dwarf_frame_register(frame, regno, mem, &ops, &nops) != 0)
        return -1;
    if (nops == 0) {
        *loc = ops == mem ? LOC_UNDEFINED : LOC_SAME;
        return 0;
    }
    if (ops[0].atom != DW_OP_call_frame_cfa)
        return -1;
    if (nops == 1) {
        *loc = LOC_AT_CFA, *off = 0;
        return 0;
    }
    if (nops == 2 && ops[1].atom == DW_OP_plus_uconst) {
        *loc = LOC_AT_CFA, *off = (int32_t)(int64_t)ops[1].number;
        return 0;
    }
    return -1; /* a value rule or an expression: not a plain save slot */
}

/* A CFA of the form register + offset, with rsp or rbp as the register.
 * libdw writes DW_CFA_def_cfa as DW_OP_bregx (register, offset). */
static int cfa_base(const Dwarf_Op *op, uint8_t *reg, int32_t *off) {
    uint64_t regno;
    int64_t offset;
    if (op->atom == DW_OP_bregx) {
        regno = op->number;
        offset = (int64_t)op->number2;
    } else if (op->atom >= DW_OP_breg0 && op->atom <= DW_OP_breg31) {
        regno = op->atom - DW_OP_breg0;
        offset = (int64_t)op->number;
    } else {
        return -1;
    }
    if ((regno != REG_RSP && regno != REG_RBP) || offset < INT32_MIN || offset > INT32_MAX)
        return -1;
    *reg = (uint8_t)regno;
    *off = (int32_t)offset;
    return 0;
}

static Dwarf_Frame *frame_at(Dwfl_Module *mod, uint64_t pc) {
    Dwarf_Addr bias;
    Dwarf_Frame *frame = NULL;
    Dwarf_CFI *cfi = dwfl_module_eh_cfi(mod, &bias);
    if (cfi && dwarf_cfi_addrframe(cfi, pc - bias, &frame) == 0)
        return frame;
    cfi = dwfl_module_dwarf_cfi(mod, &bias);
    if (cfi && dwarf_cfi_addrframe(cfi, pc - bias, &frame) == 0)
        return frame;
    return NULL;
}

static void derive_rule(struct np_unwinder *u, uint64_t pc, struct cfa_rule *r) {
    memset(r, 0, sizeof(*r));
    np_symbolizer_lock(u->sym); /* libdw's objects are the symbolizer's */
    Dwfl_Module *mod = np_symbolizer_module(u->sym, pc);
    Dwarf_Frame *frame = mod ? frame_at(mod, pc) : NULL;
    np_symbolizer_unlock(u->sym);
    if (!mod) {
        r->status = RULE_NO_MODULE;
        return;
    }
    if (!frame) {
        r->status = RULE_NO_CFI;
        return;
    }
    Dwarf_Op *ops = NULL;
    size_t nops = 0;
    r->status = RULE_COMPLEX;
    if (dwarf_frame_cfa(frame, &ops, &nops) == 0 && nops == 1 &&
        cfa_base(&ops[0], &r->cfa_reg, &r->cfa_off) == 0 &&
        register_location(frame, REG_RA, &r->ra, &r->ra_off) == 0 &&
        register_location(frame, REG_RBP, &r->rbp, &r->rbp_off) == 0)
        r->status = RULE_OK;
    free(frame);
}

static const struct cfa_rule *rule_for(struct np_unwinder *u, uint64_t pc) {
    static const struct cfa_rule no_memory = {.status = RULE_COMPLEX};
    size_t slot = (size_t)(pc ^ (pc >> 10)) & (RECENT_RULES - 1);
    if (u->recent[slot].rule && u->recent[slot].pc == pc)
        return u->recent[slot].rule;
    struct cfa_rule *r = np_map_get_u64(&u->rules, pc);
    if (r) {
        u->recent[slot].pc = pc;
        u->recent[slot].rule = r;
        return r;
    }
    r = malloc(sizeof(*r));
    if (!r)
        return &no_memory;
    derive_rule(u, pc, r);
    if (np_map_put_u64(&u->rules, pc, r) < 0) {
        free(r);
        return &no_memory;
    }
    return r;
}

/* How much of a stack copy is prefetched before it is walked. */
#define PREFETCH_BYTES 4096

/* The copied stack, addressed by the target's own addresses. */
struct stack_copy {
    uint64_t base;
    const uint8_t *bytes;
    uint64_t len;
};

static bool read_word(const struct stack_copy *c, uint64_t addr, uint64_t *out) {
    if (addr < c->base || addr - c->base > c->len || c->len - (addr - c->base) < 8)
        return false;
    memcpy(out, c->bytes + (addr - c->base), 8);
    return true;
}

struct regs {
    uint64_t pc, sp, bp;
    bool bp_known;
};

/* One step by frame pointer: [bp] is the caller's bp, [bp+8] the return. */
static bool step_by_frame_pointer(const struct stack_copy *c, struct regs *r, uint64_t *cfa,
                                  uint64_t *ra) {
    uint64_t saved_bp;
    if (!r->bp_known || r->bp < r->sp || !read_word(c, r->bp, &saved_bp) ||
        !read_word(c, r->bp + 8, ra))
        return false;
    *cfa = r->bp + 16;
    r->bp = saved_bp;
    return true;
}

/* One step by CFI rule; returns the end reason, or -1 to go on. */
static int step_by_rule(const struct stack_copy *c, const struct cfa_rule *rule, struct regs *r,
                        uint64_t *cfa, uint64_t *ra) {
    if (rule->ra == LOC_UNDEFINED)
        return NP_UNWIND_COMPLETE; /* the outermost frame says so */
    if (rule->ra != LOC_AT_CFA || (rule->cfa_reg == REG_RBP && !r->bp_known))
        return NP_UNWIND_UNKNOWN;
    *cfa = (rule->cfa_reg == REG_RSP ? r->sp : r->bp) + (int64_t)rule->cfa_off;
    if (!read_word(c, *cfa + (int64_t)rule->ra_off, ra))
        return NP_UNWIND_TRUNCATED;
    if (rule->rbp == LOC_AT_CFA)
        r->bp_known = read_word(c, *cfa + (int64_t)rule->rbp_off, &r->bp);
    else if (rule->rbp == LOC_UNDEFINED)
        r->bp_known = false;
    return -1;
}

void np_unwind(struct np_unwinder *u, const struct np_launch_event *e, bool fp_fallback,
               struct np_unwind_result *out) {
    struct stack_copy copy = {e->sp, np_launch_stack(e), e->stack_len};
    struct regs r = {np_launch_ips(e)[0], e->sp, e->bp, true};

    /* pcs[] past n is never read: not cleared (4 KiB at every launch) */
    out->n = 0;
    out->end = NP_UNWIND_COMPLETE;
    out->bytes_used = 0;
    out->fp_fallbacks = 0;
    /* The copy was written by BPF on another CPU and is read here for the
     * first time: the walk below waits on a cache miss at almost every
     * frame. Asking for the lines it will read first overlaps those waits
     * (it reads upwards from sp; the first few KiB hold most frames). */
    for (uint64_t off = 0; off < copy.len && off < PREFETCH_BYTES; off += 64)
        __builtin_prefetch(copy.bytes + off);
    out->pcs[out->n++] = r.pc;
    for (;;) {
        if (out->n == NP_UNWIND_MAX_FRAMES) {
            out->end = NP_UNWIND_TRUNCATED;
            return;
        }
        /* A return address points after its call: look up the call itself. */
        uint64_t lookup = out->n == 1 ? r.pc : r.pc - 1;
        const struct cfa_rule *rule = rule_for(u, lookup);
        uint64_t cfa = 0, ra = 0;
        int end = -1;
        if (rule->status == RULE_OK) {
            end = step_by_rule(&copy, rule, &r, &cfa, &ra);
        } else if (fp_fallback && step_by_frame_pointer(&copy, &r, &cfa, &ra)) {
            out->fp_fallbacks++;
        } else {
            end = NP_UNWIND_UNKNOWN;
        }
        if (end >= 0) {
            out->end = (enum np_unwind_end)end;
            return;
        }
        /* Each caller's frame lies above its callee's: anything else is garbage. */
        if (cfa <= r.sp || ra == 0) {
            out->end = ra == 0 ? NP_UNWIND_COMPLETE : NP_UNWIND_UNKNOWN;
            return;
        }
        r.sp = cfa;
        r.pc = ra;
        out->bytes_used = (uint32_t)(cfa - copy.base);
        out->pcs[out->n++] = ra;
    }
}
