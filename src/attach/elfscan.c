/* elfscan.c - symbol scan of one ELF file with libelf (see elfscan.h): the
 * probe points, symbol look-ups, load bias, and for the injector the
 * dynamic symbols, the text segment and a byte pattern in it. */
#define _GNU_SOURCE
#include "attach/elfscan.h"

#include <ctype.h>
#include <elf.h>
#include <elfutils/libdwelf.h>
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/hashmap.h"

int np_decode_thunk(const uint8_t *code, size_t len, uint64_t vaddr, uint64_t *target) {
    static const uint8_t endbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};
    static const uint8_t fp_dance[] = {0x55, 0x48, 0x89, 0xe5, 0x5d}; /* push; mov; pop */
    size_t i = 0;

    if (len >= sizeof(endbr64) && memcmp(code, endbr64, sizeof(endbr64)) == 0)
        i += sizeof(endbr64);
    if (len >= i + sizeof(fp_dance) && memcmp(code + i, fp_dance, sizeof(fp_dance)) == 0)
        i += sizeof(fp_dance);
    if (len >= i + 5 && code[i] == 0xe9) {
        int32_t rel;
        memcpy(&rel, code + i + 1, sizeof(rel));
        *target = vaddr + i + 5 + (int64_t)rel;
        return 1;
    }
    if (len >= i + 2 && code[i] == 0xeb) {
        *target = vaddr + i + 2 + (int8_t)code[i + 1];
        return 1;
    }
    return 0;
}

/* Symbol names we look for, for O(1) checks over millions of symbols. */
static const struct np_map *wanted_names(void) {
    static struct np_map names;
    static int ready;
    if (!ready) {
        size_t n;
        const struct np_probe_def *defs = np_probe_defs(&n);
        np_map_init(&names);
        for (size_t i = 0; i < n; i++)
            if (np_map_put_str(&names, defs[i].symbol, (void *)&defs[i]) < 0)
                return NULL;
        ready = 1;
    }
    return &names;
}

/* Cheap test before walking a symbol table: does its string table mention
 * anything we probe? Most libraries of a Python process do not. */
static int strtab_may_match(Elf_Data *strs) {
    static const char *const needles[] = {"Launch",          "nccl",         "GetKernel", "GetFunc",
                                          "_dl_debug_state", "Py_FinalizeEx"};
    if (!strs->d_buf || !strs->d_size) /* SHT_NOBITS, or an empty table: nothing to match */
        return 0;
    for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++)
        if (memmem(strs->d_buf, strs->d_size, needles[i], strlen(needles[i])))
            return 1;
    return 0;
}

static int vaddr_to_offset(Elf *elf, uint64_t vaddr, uint64_t *offset) {
    size_t nphdr;
    if (elf_getphdrnum(elf, &nphdr) != 0)
        return -EINVAL;
    for (size_t i = 0; i < nphdr; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
            continue;
        if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
            *offset = vaddr - ph.p_vaddr + ph.p_offset;
            return 0;
        }
    }
    return -ENOENT;
}

static int add_match(struct np_elf_scan *out, size_t *cap, const struct np_probe_def *def,
                     uint64_t vaddr, uint64_t offset) {
    for (size_t i = 0; i < out->count; i++)
        if (out->matches[i].vaddr == vaddr)
            return 0; /* an alias (weak/versioned/pnccl) of a function we have */
    if (out->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        struct np_elf_match *m = realloc(out->matches, ncap * sizeof(*m));
        if (!m)
            return -ENOMEM;
        out->matches = m;
        *cap = ncap;
    }
    out->matches[out->count++] = (struct np_elf_match){def, vaddr, offset, -1};
    return 0;
}

/* Strips a ".dynsym" version suffix: "cudaLaunchKernel@@libcudart.so.13". */
static const char *base_name(const char *name, char *buf, size_t size) {
    const char *at = strchr(name, '@');
    if (!at)
        return name;
    size_t n = (size_t)(at - name);
    if (n >= size)
        return name;
    memcpy(buf, name, n);
    buf[n] = '\0';
    return buf;
}

static int scan_symtab(Elf *elf, Elf_Scn *scn, GElf_Shdr *sh, struct np_elf_scan *out,
                       size_t *cap) {
    const struct np_map *names = wanted_names();
    Elf_Scn *str_scn = elf_getscn(elf, sh->sh_link);
    Elf_Data *strs = str_scn ? elf_getdata(str_scn, NULL) : NULL;
    Elf_Data *syms = elf_getdata(scn, NULL);
    char buf[512];

    if (!names)
        return -ENOMEM;
    if (!strs || !syms || sh->sh_entsize == 0 || !strtab_may_match(strs))
        return 0;
    size_t n = sh->sh_size / sh->sh_entsize;
    for (size_t i = 0; i < n; i++) {
        GElf_Sym sym;
        if (!gelf_getsym(syms, (int)i, &sym))
            continue;
        if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || !sym.st_value)
            continue;
        const char *name = elf_strptr(elf, sh->sh_link, sym.st_name);
        if (!name)
            continue;
        const struct np_probe_def *def = np_map_get_str(names, base_name(name, buf, sizeof(buf)));
        if (!def)
            continue;
        uint64_t offset;
        if (vaddr_to_offset(elf, sym.st_value, &offset) < 0)
            continue;
        int err = add_match(out, cap, def, sym.st_value, offset);
        if (err)
            return err;
    }
    return 0;
}

static void find_thunks(Elf *elf, struct np_elf_scan *out) {
    size_t size;
    const uint8_t *image = (const uint8_t *)elf_rawfile(elf, &size);
    if (!image)
        return;
    for (size_t i = 0; i < out->count; i++) {
        struct np_elf_match *m = &out->matches[i];
        uint64_t target;
        if (m->def->role != NP_ROLE_LAUNCH || m->file_offset >= size)
            continue;
        if (!np_decode_thunk(image + m->file_offset, size - m->file_offset, m->vaddr, &target))
            continue;
        for (size_t j = 0; j < out->count; j++)
            if (j != i && out->matches[j].vaddr == target &&
                out->matches[j].def->role == NP_ROLE_LAUNCH)
                m->thunk_target = (int)j;
    }
}

static void read_build_id(Elf *elf, struct np_elf_scan *out) {
    const void *id;
    ssize_t len = dwelf_elf_gnu_build_id(elf, &id);
    out->build_id[0] = '\0';
    if (len <= 0)
        return;
    if (len > 20)
        len = 20;
    for (ssize_t i = 0; i < len; i++)
        snprintf(out->build_id + 2 * i, 3, "%02x", ((const uint8_t *)id)[i]);
}

/* A suffix made only of IPA clone tags: (".isra" | ".constprop") "." digits, repeated. */
static bool clone_suffix(const char *s) {
    static const char *const tags[] = {".isra.", ".constprop."};
    if (*s == '\0')
        return false;
    while (*s) {
        size_t t = 0, len = 0;
        for (; t < sizeof(tags) / sizeof(tags[0]); t++)
            if (strncmp(s, tags[t], len = strlen(tags[t])) == 0)
                break;
        if (t == sizeof(tags) / sizeof(tags[0]) || !isdigit((unsigned char)s[len]))
            return false;
        for (s += len; isdigit((unsigned char)*s); s++)
            ;
    }
    return true;
}

static bool query_matches(const struct np_elf_symbol_query *q, const char *name) {
    size_t len = strlen(q->name);
    if (strncmp(q->name, name, len) != 0)
        return false;
    return name[len] == '\0' || (q->clones && clone_suffix(name + len));
}

static struct np_elf_symbol_query *find_query(struct np_elf_symbol_query *q, size_t n,
                                              const char *name) {
    for (size_t i = 0; i < n; i++)
        if (q[i].err == -ENOENT && query_matches(&q[i], name))
            return &q[i];
    return NULL;
}

static bool is_x86_64_elf(Elf *elf) {
    GElf_Ehdr eh;
    return elf_kind(elf) == ELF_K_ELF && gelf_getehdr(elf, &eh) && eh.e_machine == EM_X86_64 &&
           gelf_getclass(elf) == ELFCLASS64;
}

/* The ELF open on fd, which must be x86-64 ELF64: -EINVAL when libelf cannot
 * read it at all, -ENOEXEC when it is something else. */
static int begin_x86_64(int fd, Elf **out) {
    elf_version(EV_CURRENT);
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf)
        return -EINVAL;
    if (!is_x86_64_elf(elf)) {
        elf_end(elf);
        return -ENOEXEC;
    }
    *out = elf;
    return 0;
}

/* Does sym answer a query? dynamic_only: only what the loader resolves. */
static bool symbol_wanted(const GElf_Sym *sym, bool dynamic_only) {
    int type = GELF_ST_TYPE(sym->st_info);
    if (sym->st_shndx == SHN_UNDEF)
        return false;
    return !dynamic_only || (sym->st_value && (type == STT_FUNC || type == STT_OBJECT));
}

static bool table_wanted(const GElf_Shdr *sh, bool dynamic_only) {
    return sh->sh_type == SHT_DYNSYM || (!dynamic_only && sh->sh_type == SHT_SYMTAB);
}

static void answer_query(Elf *elf, const GElf_Sym *sym, struct np_elf_symbol_query *hit) {
    size_t size = 0;
    const char *image = elf_rawfile(elf, &size);
    uint64_t offset;

    hit->vaddr = sym->st_value;
    hit->err = 0;
    if (hit->len && (!image || vaddr_to_offset(elf, sym->st_value, &offset) < 0 || offset > size ||
                     size - offset < hit->len))
        hit->err = -ERANGE;
    else if (hit->len)
        memcpy(hit->buf, image + offset, hit->len);
}

static void read_symbols(Elf *elf, struct np_elf_symbol_query *q, size_t n, bool dynamic_only) {
    size_t missing = n;
    for (size_t i = 0; i < n; i++)
        q[i].err = -ENOENT;
    for (Elf_Scn *scn = NULL; missing && (scn = elf_nextscn(elf, scn)) != NULL;) {
        GElf_Shdr sh;
        Elf_Data *syms = elf_getdata(scn, NULL);
        if (!gelf_getshdr(scn, &sh) || !syms || sh.sh_entsize == 0 ||
            !table_wanted(&sh, dynamic_only))
            continue;
        for (size_t i = 0; missing && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym sym;
            const char *sname;
            struct np_elf_symbol_query *hit;
            if (!gelf_getsym(syms, (int)i, &sym) || !symbol_wanted(&sym, dynamic_only) ||
                !(sname = elf_strptr(elf, sh.sh_link, sym.st_name)) ||
                !(hit = find_query(q, n, sname)))
                continue;
            missing--;
            hit->clone = strcmp(hit->name, sname) != 0;
            answer_query(elf, &sym, hit);
        }
    }
}

int np_elf_file_offset(int fd, uint64_t vaddr, uint64_t *offset) {
    Elf *elf = NULL;
    int err = begin_x86_64(fd, &elf);
    if (err)
        return err;
    err = vaddr_to_offset(elf, vaddr, offset);
    elf_end(elf);
    return err;
}

int np_elf_read_symbols(int fd, struct np_elf_symbol_query *q, size_t n) {
    elf_version(EV_CURRENT);
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf)
        return -EINVAL;
    read_symbols(elf, q, n, false);
    elf_end(elf);
    return 0;
}

int np_elf_read_dynsyms(int fd, struct np_elf_symbol_query *q, size_t n) {
    Elf *elf = NULL;
    int err = begin_x86_64(fd, &elf);
    if (err)
        return err;
    read_symbols(elf, q, n, true);
    elf_end(elf);
    return 0;
}

static int exec_segment(Elf *elf, struct np_elf_segment *out) {
    size_t n = 0;
    int err = -ENOENT;
    if (elf_getphdrnum(elf, &n) != 0)
        return -ENOEXEC;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
            continue;
        *out = (struct np_elf_segment){ph.p_vaddr, ph.p_offset, ph.p_filesz, ph.p_memsz};
        err = 0;
    }
    return err;
}

int np_elf_exec_segment(int fd, struct np_elf_segment *out) {
    Elf *elf = NULL;
    int err = begin_x86_64(fd, &elf);
    if (err)
        return err;
    err = exec_segment(elf, out);
    elf_end(elf);
    return err;
}

int np_elf_find_code(int fd, const void *pattern, size_t len, uint64_t *vaddr) {
    struct np_elf_segment text;
    Elf *elf = NULL;
    size_t size = 0;
    int err = begin_x86_64(fd, &elf);
    if (err)
        return err;
    const char *image = elf_rawfile(elf, &size);
    err = exec_segment(elf, &text);
    if (!err && (!image || text.offset > size || size - text.offset < text.filesz))
        err = -ENOEXEC;
    if (!err) {
        const char *hit = memmem(image + text.offset, text.filesz, pattern, len);
        err = hit ? 0 : -ENOENT;
        if (hit)
            *vaddr = text.vaddr + (uint64_t)(hit - (image + text.offset));
    }
    elf_end(elf);
    return err;
}

/* The first NUL-terminated string of data that starts with prefix. */
static void find_string(const char *data, size_t len, const char *prefix, char *text, size_t size) {
    size_t plen = strlen(prefix);
    for (const char *p = data; p && (size_t)(p - data) + plen <= len;) {
        const char *hit = memmem(p, len - (size_t)(p - data), prefix, plen);
        if (!hit)
            return;
        if (hit == data || hit[-1] == '\0') {
            size_t n = strnlen(hit, len - (size_t)(hit - data));
            snprintf(text, size, "%.*s", (int)n, hit);
            return;
        }
        p = hit + 1;
    }
}

int np_elf_describe(int fd, const char *prefix, bool *has_symtab, char *text, size_t size) {
    Elf *elf = NULL;
    size_t shstrndx;
    int err = begin_x86_64(fd, &elf);
    *has_symtab = false;
    text[0] = '\0';
    if (err)
        return err;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0)
        shstrndx = 0;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        const char *name = shstrndx ? elf_strptr(elf, shstrndx, sh.sh_name) : NULL;
        if (sh.sh_type == SHT_SYMTAB)
            *has_symtab = true;
        Elf_Data *data;
        if (!text[0] && name && strcmp(name, ".rodata") == 0 && sh.sh_type == SHT_PROGBITS &&
            (data = elf_getdata(scn, NULL)) && data->d_buf)
            find_string(data->d_buf, data->d_size, prefix, text, size);
    }
    elf_end(elf);
    return 0;
}

int np_elf_read_symbol(int fd, const char *name, uint64_t *vaddr, void *buf, size_t len) {
    struct np_elf_symbol_query q = {.name = name, .buf = buf, .len = len};
    int err = np_elf_read_symbols(fd, &q, 1);
    if (err)
        return err;
    *vaddr = q.vaddr;
    return q.err;
}

int np_elf_load_bias(int fd, uint64_t mapped_start, uint64_t mapped_offset, uint64_t *bias) {
    elf_version(EV_CURRENT);
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    size_t n = 0;
    int err = -ENOENT;
    if (!elf || elf_getphdrnum(elf, &n) != 0) {
        elf_end(elf);
        return -EINVAL;
    }
    for (size_t i = 0; i < n && err; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
            continue;
        /* The loader maps each segment from its file page to its vaddr page
         * (4 KiB pages on x86-64, whatever p_align says): find this
         * mapping's segment. */
        if ((ph.p_offset & ~4095ull) == mapped_offset) {
            *bias = mapped_start - (ph.p_vaddr & ~4095ull);
            err = 0;
        }
    }
    elf_end(elf);
    return err;
}

int np_elf_scan_fd(int fd, struct np_elf_scan *out) {
    size_t cap = 0;
    int err = 0;

    memset(out, 0, sizeof(*out));
    elf_version(EV_CURRENT);
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf)
        return -EINVAL;
    if (!is_x86_64_elf(elf))
        goto done; /* not ours to probe */

    read_build_id(elf, out);
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)
            continue;
        err = scan_symtab(elf, scn, &sh, out, &cap);
        if (err)
            goto done;
    }
    find_thunks(elf, out);
done:
    elf_end(elf);
    if (err)
        np_elf_scan_free(out);
    return err;
}

void np_elf_scan_free(struct np_elf_scan *scan) {
    free(scan->matches);
    scan->matches = NULL;
    scan->count = 0;
}
