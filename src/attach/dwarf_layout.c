/* dwarf_layout.c - struct member offsets and enumerators from DWARF (see
 * dwarf_layout.h). Only the top level of each compile unit (and the
 * namespaces in it) is searched for the struct, enum and typedef
 * definitions: that is where C and C++ put named types, and it keeps a
 * 36 MB .debug_info (libnccl 2.32) to one pass that stops once every
 * asked-for type was found. */
#define _GNU_SOURCE
#include "attach/dwarf_layout.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* The member called `name` of struct/union `parent`, looking through
 * anonymous members; *offset gets its offset from the parent's start. */
static bool find_member(Dwarf_Die *parent, const char *name, size_t name_len, Dwarf_Die *out,
                        int64_t *offset);

static int64_t member_location(Dwarf_Die *member) {
    Dwarf_Attribute attr;
    Dwarf_Word loc;
    if (!dwarf_attr(member, DW_AT_data_member_location, &attr))
        return 0; /* union members, DWARF 5 bit-fields */
    return dwarf_formudata(&attr, &loc) == 0 ? (int64_t)loc : -1;
}

static bool peel_to_struct(Dwarf_Die *member, Dwarf_Die *type) {
    Dwarf_Attribute attr;
    if (!dwarf_attr_integrate(member, DW_AT_type, &attr) || !dwarf_formref_die(&attr, type) ||
        dwarf_peel_type(type, type) != 0)
        return false;
    int tag = dwarf_tag(type);
    return tag == DW_TAG_structure_type || tag == DW_TAG_class_type || tag == DW_TAG_union_type;
}

static bool find_member(Dwarf_Die *parent, const char *name, size_t name_len, Dwarf_Die *out,
                        int64_t *offset) {
    Dwarf_Die child;
    if (dwarf_child(parent, &child) != 0)
        return false;
    do {
        if (dwarf_tag(&child) != DW_TAG_member)
            continue;
        const char *child_name = dwarf_diename(&child);
        int64_t loc = member_location(&child);
        if (loc < 0)
            continue;
        if (child_name && strlen(child_name) == name_len &&
            memcmp(child_name, name, name_len) == 0) {
            *out = child;
            *offset = loc;
            return true;
        }
        Dwarf_Die anon;
        int64_t inner;
        if (!child_name && peel_to_struct(&child, &anon) &&
            find_member(&anon, name, name_len, out, &inner)) {
            *offset = loc + inner;
            return true;
        }
    } while (dwarf_siblingof(&child, &child) == 0);
    return false;
}

static bool attr_udata(Dwarf_Die *die, unsigned int name, Dwarf_Word *out) {
    Dwarf_Attribute attr;
    return dwarf_attr(die, name, &attr) && dwarf_formudata(&attr, out) == 0;
}

/* A bit-field's byte (little-endian) and shift. base: the offset of the
 * member (DWARF 4) or of the struct holding it (DWARF 5). */
static void bitfield_position(Dwarf_Die *member, int64_t base, struct np_field *f) {
    Dwarf_Word bits, bit_offset, unit;
    int64_t lsb;
    if (!attr_udata(member, DW_AT_bit_size, &bits))
        return;
    if (attr_udata(member, DW_AT_data_bit_offset, &bit_offset)) /* DWARF 5: from the LSB */
        lsb = base * 8 + (int64_t)bit_offset;
    else if (attr_udata(member, DW_AT_bit_offset, &bit_offset) &&
             (attr_udata(member, DW_AT_byte_size, &unit) || (unit = f->size) > 0))
        lsb = base * 8 + (int64_t)(unit * 8 - bit_offset - bits); /* DWARF 4: from the MSB */
    else {
        f->offset = -1; /* a bit-field we cannot place is no field */
        return;
    }
    f->bit_size = (uint8_t)bits;
    f->offset = lsb / 8;
    f->bit_shift = (uint8_t)(lsb % 8);
}

/* Follows a dotted path from struct `die`; fills *f or leaves offset -1. */
static void resolve_path(Dwarf_Die *die, const char *path, struct np_field *f) {
    Dwarf_Die cur = *die, member;
    int64_t total = 0;
    for (const char *p = path;;) {
        size_t len = strcspn(p, ".");
        int64_t off;
        if (!find_member(&cur, p, len, &member, &off))
            return;
        total += off;
        if (p[len] == '\0')
            break;
        if (!peel_to_struct(&member, &cur))
            return;
        p += len + 1;
    }
    Dwarf_Die type;
    Dwarf_Attribute attr;
    if (dwarf_attr_integrate(&member, DW_AT_type, &attr) && dwarf_formref_die(&attr, &type) &&
        dwarf_peel_type(&type, &type) == 0) {
        Dwarf_Word size;
        f->size = dwarf_aggregate_size(&type, &size) == 0 ? (uint32_t)size : 0;
    }
    f->offset = total;
    bitfield_position(&member, total, f);
}

/* The struct itself (an empty path): offset 0, its size (an array's stride). */
static void whole_struct(Dwarf_Die *die, struct np_field *f) {
    Dwarf_Word size;
    if (dwarf_aggregate_size(die, &size) != 0 || size > UINT32_MAX)
        return;
    f->offset = 0;
    f->size = (uint32_t)size;
}

static bool is_definition(Dwarf_Die *die) {
    Dwarf_Attribute attr;
    bool decl = false;
    if (dwarf_attr(die, DW_AT_declaration, &attr))
        dwarf_formflag(&attr, &decl);
    return !decl && dwarf_hasattr(die, DW_AT_byte_size);
}

struct search {
    struct np_dwarf_request *req;
    bool *found;      /* per field query: its struct was seen */
    bool *enum_found; /* per enum */
    size_t nenums;    /* enums asked for (0 without a callback) */
    size_t left;
};

static void use_struct(Dwarf_Die *die, struct search *s) {
    const char *name = dwarf_diename(die);
    if (!name || !is_definition(die))
        return;
    for (size_t i = 0; i < s->req->nfields; i++) {
        if (s->found[i] || strcmp(s->req->fields[i].type, name) != 0)
            continue;
        s->found[i] = true;
        s->left--;
        if (s->req->fields[i].path[0] == '\0')
            whole_struct(die, &s->req->out[i]);
        else
            resolve_path(die, s->req->fields[i].path, &s->req->out[i]);
    }
}

static bool attr_sdata(Dwarf_Die *die, unsigned int name, int64_t *out) {
    Dwarf_Attribute attr;
    Dwarf_Sword sv;
    Dwarf_Word uv;
    if (!dwarf_attr(die, name, &attr))
        return false;
    if (dwarf_formsdata(&attr, &sv) == 0)
        *out = (int64_t)sv;
    else if (dwarf_formudata(&attr, &uv) == 0)
        *out = (int64_t)uv;
    else
        return false;
    return true;
}

/* The enumeration a DIE names: itself, or what a typedef stands for. */
static bool enum_definition(Dwarf_Die *die, Dwarf_Die *out) {
    Dwarf_Attribute attr;
    Dwarf_Die child;
    *out = *die;
    if (dwarf_tag(die) == DW_TAG_typedef &&
        (!dwarf_attr_integrate(die, DW_AT_type, &attr) || !dwarf_formref_die(&attr, out) ||
         dwarf_peel_type(out, out) != 0))
        return false;
    return dwarf_tag(out) == DW_TAG_enumeration_type && dwarf_child(out, &child) == 0;
}

static void report_enumerators(Dwarf_Die *def, size_t index, struct np_dwarf_request *req) {
    Dwarf_Die child;
    if (dwarf_child(def, &child) != 0)
        return;
    do {
        int64_t value;
        const char *name = dwarf_diename(&child);
        if (dwarf_tag(&child) == DW_TAG_enumerator && name &&
            attr_sdata(&child, DW_AT_const_value, &value))
            req->on_enumerator(req->ctx, index, name, value);
    } while (dwarf_siblingof(&child, &child) == 0);
}

static void use_enum(Dwarf_Die *die, struct search *s) {
    const char *name = dwarf_diename(die);
    Dwarf_Die def;
    if (!name)
        return;
    for (size_t i = 0; i < s->nenums; i++) {
        if (s->enum_found[i] || strcmp(s->req->enums[i], name) != 0 || !enum_definition(die, &def))
            continue;
        s->enum_found[i] = true;
        s->left--;
        report_enumerators(&def, i, s->req);
    }
}

static void scan_scope(Dwarf_Die *scope, struct search *s) {
    Dwarf_Die child;
    if (dwarf_child(scope, &child) != 0)
        return;
    do {
        int tag = dwarf_tag(&child);
        if (tag == DW_TAG_structure_type || tag == DW_TAG_class_type)
            use_struct(&child, s);
        else if (tag == DW_TAG_enumeration_type || tag == DW_TAG_typedef)
            use_enum(&child, s);
        else if (tag == DW_TAG_namespace)
            scan_scope(&child, s);
    } while (s->left > 0 && dwarf_siblingof(&child, &child) == 0);
}

static void scan_units(Dwarf *dw, struct search *s) {
    Dwarf_Off off = 0, next;
    size_t header;
    Dwarf_Half version;
    while (s->left > 0 &&
           dwarf_next_unit(dw, off, &next, &header, &version, NULL, NULL, NULL, NULL, NULL) == 0) {
        Dwarf_Die cu;
        if (!s->req->dwarf_version)
            s->req->dwarf_version = version;
        if (dwarf_offdie(dw, off + header, &cu))
            scan_scope(&cu, s);
        off = next;
    }
}

Dwarf *np_dwarf_open(const char *path, int *fd, int *err) {
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        *err = -errno;
        return NULL;
    }
    Dwarf *dw = dwarf_begin(*fd, DWARF_C_READ);
    if (!dw) {
        close(*fd);
        *fd = -1;
        *err = -ENODATA;
    }
    return dw;
}

void np_dwarf_close(Dwarf *dw, int fd) {
    dwarf_end(dw);
    close(fd);
}

int np_dwarf_read(const char *path, struct np_dwarf_request *req) {
    size_t nf = req->nfields, ne = req->on_enumerator ? req->nenums : 0;
    bool found[nf > 0 ? nf : 1], enum_found[ne > 0 ? ne : 1];
    for (size_t i = 0; i < nf; i++) {
        req->out[i] = (struct np_field){.offset = -1};
        found[i] = false;
    }
    for (size_t i = 0; i < ne; i++)
        enum_found[i] = false;
    req->dwarf_version = 0;
    int fd, err;
    Dwarf *dw = np_dwarf_open(path, &fd, &err);
    if (!dw)
        return err;
    struct search s = {
        .req = req, .found = found, .enum_found = enum_found, .nenums = ne, .left = nf + ne};
    scan_units(dw, &s);
    np_dwarf_close(dw, fd);
    return 0;
}

int np_dwarf_fields(const char *path, const struct np_field_query *queries, size_t n,
                    struct np_field *out) {
    struct np_dwarf_request req = {.fields = queries, .nfields = n, .out = out};
    return np_dwarf_read(path, &req);
}
