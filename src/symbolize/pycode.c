/* pycode.c - CPython code objects -> name, file, line (see pycode.h).
 * Layout facts (string kinds, table formats) are from
 * ../shared/notes/cpython.md, sections 4 and 5. */
#define _GNU_SOURCE
#include "symbolize/pycode.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "attach/python.h"
#include "lib/hashmap.h"
#include "lib/util.h"

#define MAX_NAME_CHARS 1024
#define MAX_FILENAME_CHARS 4096
#define MAX_LINETABLE_BYTES (1u << 20)
#define HEADER_BYTES 0x100 /* the code-object fields we read all lie below */
#define CACHE_MAX 65536

/* What identifies a code object as the one cached: a reused address would
 * have to repeat all of these to pass. */
struct fingerprint {
    uint64_t type, filename, name, linetable;
    int32_t firstlineno;
};

struct code_entry {
    struct fingerprint fp;
    char *name, *filename;
    uint8_t *linetable;
    size_t linetable_len;
    bool sighted; /* np_pycode_first_sight said so */
    bool freed;   /* np_pycode_freed: read again at the next load */
};

struct np_pycode {
    pid_t pid;
    const struct np_python_layout *l;
    struct np_map codes; /* code address -> struct code_entry */
};

struct np_pycode *np_pycode_new(pid_t pid, const struct np_python_layout *layout) {
    struct np_pycode *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->pid = pid;
    c->l = layout;
    np_map_init(&c->codes);
    return c;
}

static void free_entry(void *p) {
    struct code_entry *e = p;
    if (!e)
        return;
    free(e->name);
    free(e->filename);
    free(e->linetable);
    free(e);
}

void np_pycode_free(struct np_pycode *c) {
    if (!c)
        return;
    np_map_free(&c->codes, free_entry);
    free(c);
}

/* ---- line tables ------------------------------------------------------- */

int np_py_line_310(const uint8_t *table, size_t len, int firstlineno, int addr) {
    int line = firstlineno, end = 0;
    if (addr < 0)
        return firstlineno;
    for (size_t i = 0; i + 1 < len; i += 2) {
        int start = end;
        int ldelta = (int8_t)table[i + 1];
        end += table[i];
        int cur = -1;
        if (ldelta != -128) {
            if (__builtin_add_overflow(line, ldelta, &line))
                return -1; /* a line past INT_MAX: not a real table */
            cur = line;
        }
        if (start == end)
            continue;
        if (start <= addr && addr < end)
            return cur;
    }
    return -1;
}

static unsigned read_varint(const uint8_t *t, size_t len, size_t *pos) {
    unsigned val = 0, shift = 0;
    while (*pos < len) {
        uint8_t b = t[(*pos)++];
        val |= (unsigned)(b & 63) << shift;
        shift += 6;
        if (!(b & 64) || shift > 28)
            break;
    }
    return val;
}

static int read_svarint(const uint8_t *t, size_t len, size_t *pos) {
    unsigned v = read_varint(t, len, pos);
    return (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
}

int np_py_line_311(const uint8_t *table, size_t len, int firstlineno, int addr) {
    int line = firstlineno, end = 0;
    size_t pos = 0;
    if (addr < 0)
        return firstlineno;
    while (pos < len) {
        uint8_t first = table[pos++];
        if (!(first & 0x80))
            return -1; /* not at an entry's first byte: a table we do not understand */
        int kind = (first >> 3) & 15;
        int start = end, cur = line;
        end += ((first & 7) + 1) * 2; /* code units of 2 bytes */
        int delta = 0;
        if (kind == 15) { /* NONE: no line */
            cur = -1;
        } else if (kind == 14) { /* LONG: line delta, end line, column, end column */
            delta = read_svarint(table, len, &pos);
            for (int i = 0; i < 3; i++)
                read_varint(table, len, &pos);
        } else if (kind == 13) { /* NO_COLUMNS */
            delta = read_svarint(table, len, &pos);
        } else if (kind >= 10) { /* ONE_LINE0..2: column, end column */
            delta = kind - 10;
            pos += 2;
        } else { /* SHORT: one byte of columns */
            pos += 1;
        }
        if (kind >= 10 && kind != 15) {
            if (__builtin_add_overflow(line, delta, &line))
                return -1; /* a line past INT_MAX: not a real table */
            cur = line;
        }
        if (start <= addr && addr < end)
            return cur;
    }
    return -1;
}

const char *np_py_short_filename(const char *path) {
    static const char *const roots[] = {"/site-packages/", "/dist-packages/"};
    const char *best = NULL;
    for (size_t i = 0; i < NP_ARRAY_SIZE(roots); i++) {
        const char *p = strstr(path, roots[i]);
        while (p) { /* the last one: a venv inside a site-packages */
            best = p + strlen(roots[i]);
            p = strstr(p + 1, roots[i]);
        }
    }
    if (best && *best)
        return best;
    const char *lib = strstr(path, "/lib/python3.");
    if (lib) {
        const char *slash = strchr(lib + 13, '/');
        if (slash && slash[1])
            return slash + 1;
    }
    const char *base = strrchr(path, '/');
    return base && base[1] ? base + 1 : path;
}

/* ---- reading objects --------------------------------------------------- */

static uint64_t field_u64(const uint8_t *obj, uint32_t off) {
    uint64_t v;
    memcpy(&v, obj + off, sizeof(v));
    return v;
}

static int32_t field_i32(const uint8_t *obj, uint32_t off) {
    int32_t v;
    memcpy(&v, obj + off, sizeof(v));
    return v;
}

/* Appends code point cp to out as UTF-8. */
static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A str object (compact, as code objects' strings are) as malloc'd UTF-8. */
static char *read_str(struct np_pycode *c, uint64_t addr, size_t max_chars) {
    const struct np_python_layout *l = c->l;
    uint8_t head[64];
    if (!addr || np_read_process(c->pid, addr, head, sizeof(head)) != 0)
        return NULL;
    int64_t length = (int64_t)field_u64(head, l->str_length);
    uint32_t state = (uint32_t)field_i32(head, l->str_state);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (length < 0 || (size_t)length > max_chars || !compact ||
        (kind != 1 && kind != 2 && kind != 4))
        return NULL;
    size_t n = (size_t)length, width = ascii ? 1 : kind;
    uint8_t *raw = malloc(n * width + 1);
    char *out = malloc(n * 4 + 1);
    uint64_t data = addr + (ascii ? l->str_ascii_data : l->str_compact_data);
    if (!raw || !out || np_read_process(c->pid, data, raw, n * width) != 0) {
        free(raw);
        free(out);
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = width == 1 ? raw[i]
                      : width == 2
                          ? (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8
                          : (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
                                (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) /* lone surrogates: not UTF-8 */
            cp = 0xfffd;
        o += put_utf8(out + o, cp);
    }
    out[o] = '\0';
    free(raw);
    return out;
}

/* A bytes object's contents. */
static uint8_t *read_bytes(struct np_pycode *c, uint64_t addr, size_t *len) {
    uint8_t head[64];
    if (!addr || np_read_process(c->pid, addr, head, sizeof(head)) != 0)
        return NULL;
    int64_t size = (int64_t)field_u64(head, c->l->bytes_size);
    if (size < 0 || size > (int64_t)MAX_LINETABLE_BYTES)
        return NULL;
    uint8_t *data = malloc((size_t)size + 1);
    if (data && np_read_process(c->pid, addr + c->l->bytes_data, data, (size_t)size) != 0) {
        free(data);
        return NULL;
    }
    *len = (size_t)size;
    return data;
}

static int read_fingerprint(struct np_pycode *c, uint64_t code, struct fingerprint *fp) {
    const struct np_python_layout *l = c->l;
    uint8_t head[HEADER_BYTES];
    int err = np_read_process(c->pid, code, head, sizeof(head));
    if (err)
        return err;
    uint32_t name_off = l->co_qualname != NP_PY_NO_FIELD ? l->co_qualname : l->co_name;
    *fp = (struct fingerprint){
        .type = field_u64(head, 8), /* ob_type */
        .filename = field_u64(head, l->co_filename),
        .name = field_u64(head, name_off),
        .linetable = field_u64(head, l->co_linetable),
        .firstlineno = field_i32(head, l->co_firstlineno),
    };
    if (l->code_type && fp->type != l->code_type)
        return -EINVAL;
    return 0;
}

static bool same_code(const struct fingerprint *a, const struct fingerprint *b) {
    return a->type == b->type && a->filename == b->filename && a->name == b->name &&
           a->linetable == b->linetable && a->firstlineno == b->firstlineno;
}

static struct code_entry *load_entry(struct np_pycode *c, const struct fingerprint *fp) {
    struct code_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->fp = *fp;
    e->name = read_str(c, fp->name, MAX_NAME_CHARS);
    e->filename = read_str(c, fp->filename, MAX_FILENAME_CHARS);
    e->linetable = read_bytes(c, fp->linetable, &e->linetable_len);
    return e;
}

int np_pycode_load(struct np_pycode *c, uint64_t code) {
    struct fingerprint fp;
    int err = read_fingerprint(c, code, &fp);
    if (err)
        return err;
    struct code_entry *e = np_map_get_u64(&c->codes, code);
    if (e && !e->freed && same_code(&e->fp, &fp))
        return 0;
    if (c->codes.count >= CACHE_MAX) {
        np_map_free(&c->codes, free_entry);
        np_map_init(&c->codes);
        e = NULL;
    }
    struct code_entry *fresh = load_entry(c, &fp);
    if (!fresh)
        return -ENOMEM;
    if (np_map_put_u64(&c->codes, code, fresh) < 0) {
        free_entry(fresh);
        return -ENOMEM;
    }
    if (!e)
        return 0;
    free_entry(e); /* replaced: the address holds another code object now */
    return 1;
}

void np_pycode_freed(struct np_pycode *c, uint64_t code) {
    struct code_entry *e = np_map_get_u64(&c->codes, code);
    if (e)
        e->freed = true;
}

bool np_pycode_first_sight(struct np_pycode *c, uint64_t code) {
    struct code_entry *e = np_map_get_u64(&c->codes, code);
    if (!e || e->sighted)
        return false;
    e->sighted = true;
    return true;
}

int np_pycode_locate(struct np_pycode *c, uint64_t code, int32_t instr,
                     struct np_py_location *out) {
    struct code_entry *e = np_map_get_u64(&c->codes, code);
    if (!e) {
        int err = np_pycode_load(c, code); /* not cached: nothing replaced */
        if (err < 0)
            return err;
        e = np_map_get_u64(&c->codes, code);
    }
    out->name = e->name;
    out->filename = e->filename;
    out->line = -1;
    if (e->linetable)
        out->line = c->l->linetable_310
                        ? np_py_line_310(e->linetable, e->linetable_len, e->fp.firstlineno, instr)
                        : np_py_line_311(e->linetable, e->linetable_len, e->fp.firstlineno, instr);
    return 0;
}
