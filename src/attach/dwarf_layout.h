/* dwarf_layout.h - where fields of a library's structs are, read with libdw
 * from the library's own debug info at attach time (libnccl's ncclComm,
 * ncclKernelPlan, ncclTaskColl... move in almost every release: nothing is
 * hard-coded for one version). A field is named by its struct and a dotted
 * path through nested members ("planner.streams"); bit-fields give the byte
 * that holds them (little-endian) and their bit position in it. */
#ifndef NP_DWARF_LAYOUT_H
#define NP_DWARF_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

struct np_field_query {
    const char *type; /* struct name as in the source: "ncclComm" */
    const char *path; /* member, or member.member...: "planner.streams" */
};

struct np_field {
    int64_t offset;    /* bytes from the struct's start; -1: not found */
    uint32_t size;     /* bytes of the member's type (the storage unit of a bit-field) */
    uint8_t bit_size;  /* 0: not a bit-field */
    uint8_t bit_shift; /* bit-fields: bits to shift the byte at `offset` right */
};

/* Answers every query from the DWARF of the ELF file at path (or its
 * separate debug file found the standard ways). Returns 0 when the file
 * has debug info (fields not found are -1 each), -ENODATA when it has none
 * (stripped), or another negative errno. */
int np_dwarf_fields(const char *path, const struct np_field_query *queries, size_t n,
                    struct np_field *out);

#endif
