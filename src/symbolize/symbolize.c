/* symbolize.c - libdw-based symbolization of one process (see symbolize.h).
 * Driven the way elfutils' stack tool and perf's unwind-libdw.c drive it:
 * dwfl_linux_proc_report for the module list, dwfl_module_addrinfo for the
 * symbol. */
#define _GNU_SOURCE
#include "symbolize/symbolize.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/hashmap.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"

struct np_symbolizer {
    pid_t pid;
    Dwfl *dwfl;
    struct np_map cache;     /* pc (with return-address bit) -> struct np_frame * */
    struct np_map build_ids; /* Dwfl_Module * -> its build id in hex (modules are only
                                added, never freed, while the Dwfl lives) */
    uint64_t last_refresh_ns;
    /* Held around every use of dwfl and the caches: the reader's worker
     * threads (ingest/workers.h) unwind a process while the session's
     * thread may name one of its kernels. */
    pthread_mutex_t lock;
};

/* libdw's find_elf callback has no per-Dwfl context; the symbolizer that is
 * calling into libdw sets this for the duration of the call, on its own
 * thread. */
static _Thread_local pid_t resolving_pid;

static int find_elf_in_target_root(Dwfl_Module *mod, void **userdata, const char *module_name,
                                   Dwarf_Addr base, char **file_name, Elf **elfp) {
    if (module_name[0] == '/' && resolving_pid > 0) {
        char path[4200];
        snprintf(path, sizeof(path), "/proc/%d/root%s", (int)resolving_pid, module_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            *file_name = strdup(path);
            return fd;
        }
    }
    return dwfl_linux_proc_find_elf(mod, userdata, module_name, base, file_name, elfp);
}

/* Where separate debug files are looked for: NULL is libdw's default
 * (":.debug:/usr/lib/debug", build-id directories included). */
static char *debuginfo_path = NULL;

/* The user's directories are searched first, then libdw's default ones. */
void np_symbolizer_set_debuginfo_path(const char *path) {
    static char joined[4096];
    snprintf(joined, sizeof(joined), "%s:.debug:/usr/lib/debug", path);
    debuginfo_path = joined;
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = find_elf_in_target_root,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

static void free_frame(void *p) {
    struct np_frame *f = p;
    if (!f)
        return;
    free((char *)f->name);
    free((char *)f->module);
    free((char *)f->module_path);
    free((char *)f->src.file);
    for (int i = 0; i < f->n_inlined; i++)
        free((char *)f->inlined_src[i].file);
    free(f->inlined_src);
    free((char *)f->inlined);
    free(f);
}

static int open_module_files(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
                             void *arg) {
    Dwarf_Addr bias;
    (void)userdata, (void)name, (void)start, (void)arg;
    dwfl_module_getelf(mod, &bias);
    return DWARF_CB_OK;
}

/* np_symbolizer_refresh; the lock is held. */
static int refresh_locked(struct np_symbolizer *s) {
    resolving_pid = s->pid;
    dwfl_report_begin_add(s->dwfl);
    int err = dwfl_linux_proc_report(s->dwfl, s->pid);
    dwfl_report_end(s->dwfl, NULL, NULL);
    if (err == 0)
        dwfl_getmodules(s->dwfl, open_module_files, NULL, 0);
    resolving_pid = 0;
    s->last_refresh_ns = np_monotonic_ns();
    if (err > 0)
        return -err;
    return err < 0 ? -ESRCH : 0;
}

int np_symbolizer_refresh(struct np_symbolizer *s) {
    np_symbolizer_lock(s);
    int err = refresh_locked(s);
    np_symbolizer_unlock(s);
    return err;
}

void np_symbolizer_lock(struct np_symbolizer *s) {
    pthread_mutex_lock(&s->lock);
}

void np_symbolizer_unlock(struct np_symbolizer *s) {
    pthread_mutex_unlock(&s->lock);
}

int np_symbolizer_new(pid_t pid, struct np_symbolizer **out) {
    struct np_symbolizer *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->pid = pid;
    pthread_mutex_init(&s->lock, NULL);
    np_map_init(&s->cache);
    np_map_init(&s->build_ids);
    s->dwfl = dwfl_begin(&callbacks);
    if (!s->dwfl) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return -ENOMEM;
    }
    int err = np_symbolizer_refresh(s);
    if (err) {
        np_symbolizer_free(s);
        return err;
    }
    *out = s;
    return 0;
}

void np_symbolizer_free(struct np_symbolizer *s) {
    if (!s)
        return;
    np_map_free(&s->cache, free_frame);
    np_map_free(&s->build_ids, free);
    dwfl_end(s->dwfl);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static const char *basename_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

struct Dwfl_Module *np_symbolizer_module(struct np_symbolizer *s, uint64_t pc) {
    resolving_pid = s->pid;
    Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, pc);
    /* A module mapped since the last refresh: look again, at most every
     * 100 ms so a stream of wild addresses cannot make us spin. */
    if (!mod && np_monotonic_ns() - s->last_refresh_ns > 100000000ull) {
        refresh_locked(s);
        resolving_pid = s->pid;
        mod = dwfl_addrmodule(s->dwfl, pc);
    }
    return mod;
}

/* The name of an inlined subroutine: its origin's linkage name, demangled
 * and shortened, or its plain name. */
static char *inlined_name(Dwarf_Die *die) {
    Dwarf_Attribute attr;
    const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
    if (!name)
        name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
    return np_demangle_short(name ? name : "[inlined]");
}

/* A scope's call site (DW_AT_call_file/line) in its compile unit; file copied. */
static struct np_src_pos call_site(Dwarf_Die *scope, Dwarf_Die *cudie) {
    struct np_src_pos pos = {0};
    Dwarf_Attribute attr;
    Dwarf_Word file = 0, line = 0;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    if (dwarf_formudata(dwarf_attr(scope, DW_AT_call_line, &attr), &line) == 0)
        pos.line = (int)line;
    if (dwarf_formudata(dwarf_attr(scope, DW_AT_call_file, &attr), &file) == 0 &&
        dwarf_getsrcfiles(cudie, &files, &nfiles) == 0 && file < nfiles) {
        const char *name = dwarf_filesrc(files, file, NULL, NULL);
        pos.file = name ? strdup(name) : NULL;
    }
    return pos;
}

/* The inlined subroutines covering pc, outermost first: f->inlined as
 * "f [inlined];g [inlined]", and each one's call site - the position in
 * the frame it was inlined into - in calls[] (n of them, max of them). */
static void inlined_frames(Dwfl_Module *mod, uint64_t pc, struct np_frame *f,
                           struct np_src_pos **calls, int *n_calls) {
    Dwarf_Addr bias = 0;
    Dwarf_Die *cudie = dwfl_module_addrdie(mod, pc, &bias);
    Dwarf_Die *scopes = NULL;
    int n = cudie ? dwarf_getscopes(cudie, pc - bias, &scopes) : 0;
    struct np_str out;

    /* Past an inlined instance, dwarf_getscopes follows the inlined
     * function's own (abstract) definition; the concrete nesting - which
     * function it was inlined into - is the chain of DIEs containing the
     * innermost scope (an inlined instance, or a lexical block in one). */
    if (n > 0) {
        Dwarf_Die innermost = scopes[0];
        free(scopes);
        scopes = NULL;
        n = dwarf_getscopes_die(&innermost, &scopes);
    }
    *calls = n > 0 ? calloc((size_t)n, sizeof(**calls)) : NULL;
    *n_calls = 0;
    np_str_init(&out);
    for (int i = n - 1; i >= 0 && *calls; i--) {
        if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine)
            continue;
        char *name = inlined_name(&scopes[i]);
        char clean[1024];
        np_sanitize_frame(clean, sizeof(clean), name ? name : "[inlined]", false);
        free(name);
        np_str_appendf(&out, "%s%s" NP_FRAME_INLINED_SUFFIX, out.len ? ";" : "", clean);
        (*calls)[(*n_calls)++] = call_site(&scopes[i], cudie);
    }
    free(scopes);
    if (out.failed || !out.len)
        np_str_free(&out);
    else
        f->inlined = out.buf;
}

/* The module's GNU build id in hex ("" without one), once per module. */
static const char *build_id_of(struct np_symbolizer *s, Dwfl_Module *mod) {
    char *hex = np_map_get_u64(&s->build_ids, (uint64_t)(uintptr_t)mod);
    if (hex)
        return hex;
    const unsigned char *bits = NULL;
    GElf_Addr vaddr;
    int n = dwfl_module_build_id(mod, &bits, &vaddr);
    hex = malloc(n > 0 ? (size_t)n * 2 + 1 : 1);
    if (!hex)
        return NULL;
    hex[0] = '\0';
    for (int i = 0; i < n; i++)
        sprintf(hex + 2 * i, "%02x", bits[i]);
    if (np_map_put_u64(&s->build_ids, (uint64_t)(uintptr_t)mod, hex) < 0) {
        free(hex);
        return NULL;
    }
    return hex;
}

/* pc's source position in the module's DWARF line table; file copied. */
static struct np_src_pos line_table_pos(Dwfl_Module *mod, uint64_t pc) {
    struct np_src_pos pos = {0};
    Dwfl_Line *line = dwfl_module_getsrc(mod, pc);
    int lineno = 0;
    const char *file = line ? dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL) : NULL;
    if (file && lineno > 0 && (pos.file = strdup(file)))
        pos.line = lineno;
    return pos;
}

/* Source positions of a frame and of the functions inlined at it: the
 * frame is where the outermost inlined function was called, each inlined
 * function where the next one was, and the innermost at the line table's
 * position of pc. */
static void source_positions(Dwfl_Module *mod, uint64_t pc, struct np_frame *f,
                             struct np_src_pos *calls, int n_calls) {
    struct np_src_pos here = line_table_pos(mod, pc);
    if (n_calls == 0) {
        free(calls);
        f->src = here;
        return;
    }
    f->src = calls[0];
    for (int i = 0; i + 1 < n_calls; i++)
        calls[i] = calls[i + 1];
    calls[n_calls - 1] = here;
    f->inlined_src = calls;
    f->n_inlined = n_calls;
}

static struct np_frame *resolve(struct np_symbolizer *s, uint64_t pc) {
    struct np_frame *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;

    Dwfl_Module *mod = np_symbolizer_module(s, pc);
    if (!mod) {
        f->name = strdup(NP_FRAME_UNKNOWN);
        f->module = strdup("");
        f->module_path = strdup("");
        goto out;
    }
    Dwarf_Addr start = 0;
    const char *mod_name = dwfl_module_info(mod, NULL, &start, NULL, NULL, NULL, NULL, NULL);
    f->module = strdup(basename_of(mod_name ? mod_name : ""));
    f->module_path = strdup(mod_name ? mod_name : "");
    f->module_offset = pc - start;
    f->build_id = build_id_of(s, mod);

    GElf_Off offset = 0;
    GElf_Sym sym;
    const char *versioned = dwfl_module_addrinfo(mod, pc, &offset, &sym, NULL, NULL, NULL);
    char name[1024];
    /* .dynsym names carry their version: "__libc_start_main@@GLIBC_2.34" */
    snprintf(name, sizeof(name), "%.*s", versioned ? (int)strcspn(versioned, "@") : 0,
             versioned ? versioned : "");
    if (name[0]) {
        char *shortname = np_demangle_short(name);
        char buf[1024];
        np_sanitize_frame(buf, sizeof(buf), shortname ? shortname : name, false);
        free(shortname);
        f->name = strdup(buf);
        f->known = true;
        struct np_src_pos *calls = NULL;
        int n_calls = 0;
        inlined_frames(mod, pc, f, &calls, &n_calls);
        source_positions(mod, pc, f, calls, n_calls);
    } else {
        f->src = line_table_pos(mod, pc);
        char buf[512];
        char mod_clean[256];
        np_sanitize_frame(mod_clean, sizeof(mod_clean), f->module ? f->module : "", true);
        snprintf(buf, sizeof(buf), "[%s+0x%" PRIx64 "]", mod_clean, f->module_offset);
        f->name = strdup(buf);
    }
out:
    if (!f->name || !f->module || !f->module_path || (mod && !f->build_id)) {
        free_frame(f);
        return NULL;
    }
    return f;
}

const struct np_frame *np_symbolize(struct np_symbolizer *s, uint64_t pc, bool is_return_address) {
    static const struct np_frame oom = {.name = NP_FRAME_UNKNOWN, .module = "", .module_path = ""};
    uint64_t lookup = is_return_address && pc ? pc - 1 : pc;

    np_symbolizer_lock(s);
    struct np_frame *f = np_map_get_u64(&s->cache, lookup);
    if (!f) {
        resolving_pid = s->pid;
        f = resolve(s, lookup);
        resolving_pid = 0;
        if (f && np_map_put_u64(&s->cache, lookup, f) < 0) {
            free_frame(f);
            f = NULL;
        }
    }
    np_symbolizer_unlock(s);
    /* Frames are freed only with the symbolizer: the pointer outlives the lock. */
    return f ? f : &oom;
}
