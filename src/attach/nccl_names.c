/* nccl_names.c - NCCL's enum names per library (see nccl_names.h). */
#define _GNU_SOURCE
#include "attach/nccl_names.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const enum_types[NP_NCCL_ENUMS] = {
    [NP_NCCL_FUNC] = "ncclFunc_t",
    [NP_NCCL_DATATYPE] = "ncclDataType_t",
    [NP_NCCL_REDOP] = "ncclRedOp_t",
};

/* What each enumerator starts with in nccl.h / device.h. */
static const char *const prefixes[NP_NCCL_ENUMS] = {
    [NP_NCCL_FUNC] = "ncclFunc",
    [NP_NCCL_DATATYPE] = "nccl",
    [NP_NCCL_REDOP] = "nccl",
};

/* For a library without DWARF: NCCL 2.28's values (nccl.h, device.h). */
static const char *const builtin_funcs[] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                            "AllReduce", "SendRecv", "Send",      "Recv",
                                            "AlltoAll",  "Scatter",  "Gather"};
static const char *const builtin_types[] = {"int8",    "uint8",    "int32",      "uint32",
                                            "int64",   "uint64",   "float16",    "float32",
                                            "float64", "bfloat16", "float8e4m3", "float8e5m2"};
static const char *const builtin_redops[] = {"sum", "prod", "max", "min", "avg"};

struct builtin {
    const char *const *names;
    int count;
};

static struct builtin builtin_of(enum np_nccl_enum e) {
    switch (e) {
    case NP_NCCL_FUNC:
        return (struct builtin){builtin_funcs, sizeof(builtin_funcs) / sizeof(builtin_funcs[0])};
    case NP_NCCL_DATATYPE:
        return (struct builtin){builtin_types, sizeof(builtin_types) / sizeof(builtin_types[0])};
    default:
        return (struct builtin){builtin_redops, sizeof(builtin_redops) / sizeof(builtin_redops[0])};
    }
}

const char *np_nccl_enum_type(enum np_nccl_enum e) {
    return (unsigned)e < NP_NCCL_ENUMS ? enum_types[e] : "?";
}

void np_nccl_names_clear(struct np_nccl_names *n) {
    memset(n, 0, sizeof(*n));
}

void np_nccl_names_add(struct np_nccl_names *n, enum np_nccl_enum e, const char *enumerator,
                       int64_t value) {
    if ((unsigned)e >= NP_NCCL_ENUMS || value < 0 || value >= NP_NCCL_NAMES_MAX ||
        strncmp(enumerator, "ncclNum", 7) == 0)
        return;
    char *slot = n->name[e][value];
    n->from_dwarf[e] = true;
    if (slot[0])
        return; /* an alias: ncclChar = ncclInt8 */
    size_t plen = strlen(prefixes[e]);
    const char *shortname = strncmp(enumerator, prefixes[e], plen) == 0 && enumerator[plen]
                                ? enumerator + plen
                                : enumerator;
    snprintf(slot, NP_NCCL_NAME_LEN, "%s", shortname);
    if (e != NP_NCCL_FUNC) /* nccl.h's datatypes and ops, as users write them */
        for (char *c = slot; *c; c++)
            *c = (char)tolower((unsigned char)*c);
    if (value >= n->count[e])
        n->count[e] = (int)value + 1;
}

void np_nccl_names_fill_builtin(struct np_nccl_names *n) {
    for (int e = 0; e < NP_NCCL_ENUMS; e++) {
        if (n->from_dwarf[e])
            continue;
        struct builtin b = builtin_of((enum np_nccl_enum)e);
        for (int v = 0; v < b.count; v++)
            snprintf(n->name[e][v], NP_NCCL_NAME_LEN, "%s", b.names[v]);
        n->count[e] = b.count;
    }
}

static const struct np_nccl_names *builtin_names(void) {
    static struct np_nccl_names names;
    static int ready;
    if (!ready) {
        np_nccl_names_clear(&names);
        np_nccl_names_fill_builtin(&names);
        ready = 1;
    }
    return &names;
}

const char *np_nccl_name(const struct np_nccl_names *n, enum np_nccl_enum e, int64_t value) {
    if (!n)
        n = builtin_names();
    if ((unsigned)e >= NP_NCCL_ENUMS || value < 0)
        return "?";
    if (e == NP_NCCL_REDOP && value >= n->count[e])
        return "custom"; /* ncclRedOpCreatePreMulSum's ops come after the built-in ones */
    if (value >= n->count[e] || !n->name[e][value][0])
        return "?";
    return n->name[e][value];
}

int np_nccl_datatype_bytes(const struct np_nccl_names *n, int64_t datatype) {
    const char *name = np_nccl_name(n, NP_NCCL_DATATYPE, datatype);
    const char *digits = strpbrk(name, "0123456789");
    long bits = digits ? strtol(digits, NULL, 10) : 0;
    return bits > 0 && bits % 8 == 0 ? (int)(bits / 8) : 0;
}

bool np_nccl_func_is(const struct np_nccl_names *n, int64_t func, const char *const *names) {
    const char *name = np_nccl_name(n, NP_NCCL_FUNC, func);
    for (; *names; names++)
        if (strcmp(name, *names) == 0)
            return true;
    return false;
}
