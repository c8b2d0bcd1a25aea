/* dwarf_layout.h - where fields of a library's structs are, and which
 * values its enums have, read with libdw from the library's own debug info
 * at attach time (libnccl's ncclComm, ncclKernelPlan, ncclTaskColl... move
 * in almost every release, ncclFunc_t grows: nothing is hard-coded for one
 * version). A field is named by its struct and a dotted path through nested
 * members ("planner.streams"); bit-fields give the byte that holds them
 * (little-endian) and their bit position in it. An enum is named as the
 * source names it: an enum tag or a typedef of one ("ncclFunc_t"). */
#ifndef NP_DWARF_LAYOUT_H
#define NP_DWARF_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

struct np_field_query {
    const char *type; /* struct name as in the source: "ncclComm" */
    const char *path; /* member, or member.member...: "planner.streams"; "": the struct
                         itself (offset 0, size = sizeof, an array's stride) */
};

struct np_field {
    int64_t offset;    /* bytes from the struct's start; -1: not found */
    uint32_t size;     /* bytes of the member's type (the storage unit of a bit-field) */
    uint8_t bit_size;  /* 0: not a bit-field */
    uint8_t bit_shift; /* bit-fields: bits to shift the byte at `offset` right */
};

/* One enumerator of an asked-for enum, in declaration order. */
typedef void (*np_enumerator_fn)(void *ctx, size_t enum_index, const char *name, int64_t value);

/* One pass over a file's DWARF: fields and enums together. */
struct np_dwarf_request {
    const struct np_field_query *fields;
    size_t nfields;
    struct np_field *out; /* nfields answers */
    const char *const *enums;
    size_t nenums;
    np_enumerator_fn on_enumerator; /* called for each enumerator of each enum found */
    void *ctx;
    int dwarf_version; /* out: of the first compile unit, 0 when unknown */
};

/* Answers every query from the DWARF of the ELF file at path (or its
 * separate debug file found the standard ways). Returns 0 when the file
 * has debug info (fields not found are -1 each, enums not found get no
 * call), -ENODATA when it has none (stripped), or another negative errno. */
int np_dwarf_read(const char *path, struct np_dwarf_request *req);
/* The same for fields only. */
int np_dwarf_fields(const char *path, const struct np_field_query *queries, size_t n,
                    struct np_field *out);

struct Dwarf;
/* The DWARF of the ELF file at path, opened for reading (*fd: the file,
 * closed by np_dwarf_close); NULL with *err = -ENODATA when it has none, or
 * another negative errno. */
struct Dwarf *np_dwarf_open(const char *path, int *fd, int *err);
void np_dwarf_close(struct Dwarf *dw, int fd);

#endif
