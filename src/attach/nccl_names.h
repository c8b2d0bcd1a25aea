/* nccl_names.h - the names of NCCL's enums as one libnccl has them: its
 * operations (ncclFunc_t: 2.28 added AlltoAll..Gather, 2.29 AllGatherV and
 * the RMA signals), datatypes (ncclDataType_t) and reduction ops
 * (ncclRedOp_t). Read from the library's own DWARF enumerators at attach
 * (nccl_layout.c), so a value means what that version means by it; a
 * library without DWARF gets a built-in table (NCCL 2.28's values), and says
 * so. The table travels with the library's layout (struct np_nccl_layout)
 * to wherever records are formatted. */
#ifndef NP_NCCL_NAMES_H
#define NP_NCCL_NAMES_H

#include <stdbool.h>
#include <stdint.h>

enum np_nccl_enum {
    NP_NCCL_FUNC,     /* ncclFunc_t: "AllReduce" */
    NP_NCCL_DATATYPE, /* ncclDataType_t: "float32" */
    NP_NCCL_REDOP,    /* ncclRedOp_t: "sum"; values past the named ones: "custom" */
    NP_NCCL_ENUMS
};

#define NP_NCCL_NAMES_MAX 32 /* values 0..31 of each enum can be named */
#define NP_NCCL_NAME_LEN 24

struct np_nccl_names {
    bool from_dwarf[NP_NCCL_ENUMS];
    int count[NP_NCCL_ENUMS]; /* values 0..count-1 may have a name ("" for a gap) */
    char name[NP_NCCL_ENUMS][NP_NCCL_NAMES_MAX][NP_NCCL_NAME_LEN];
};

/* The enum's name in the source ("ncclFunc_t"), as DWARF names it. */
const char *np_nccl_enum_type(enum np_nccl_enum e);

/* Empties n (every enum unnamed, nothing from DWARF). */
void np_nccl_names_clear(struct np_nccl_names *n);
/* One enumerator read from DWARF: "ncclFuncAllGatherV" = 11 becomes
 * "AllGatherV", "ncclFloat32" "float32"; the first name of a value wins
 * (ncclInt8 over ncclChar), the ncclNum* counts are not names. */
void np_nccl_names_add(struct np_nccl_names *n, enum np_nccl_enum e, const char *enumerator,
                       int64_t value);
/* Enums DWARF did not name get the built-in table (from_dwarf stays false). */
void np_nccl_names_fill_builtin(struct np_nccl_names *n);

/* The name of a value: "?" when unknown (redop: "custom" past the named
 * ones, a user-defined op). n NULL: the built-in table. */
const char *np_nccl_name(const struct np_nccl_names *n, enum np_nccl_enum e, int64_t value);
/* Bytes per element of a datatype, from its name's bit width ("float16": 2,
 * "float8e4m3": 1); 0 when unknown. */
int np_nccl_datatype_bytes(const struct np_nccl_names *n, int64_t datatype);
/* True when the operation is one of those named. */
bool np_nccl_func_is(const struct np_nccl_names *n, int64_t func, const char *const *names);

#endif
