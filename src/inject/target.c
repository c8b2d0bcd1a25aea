/* target.c - finds, in a target that is not touched yet, the functions the
 * stub needs, the loader's code, the code cave and our library if it is
 * already loaded; and writes target memory (see target.h). */
#define _GNU_SOURCE
#include "inject/target.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <unistd.h>

#include "attach/elfscan.h"
#include "lib/util.h"

#define RTLD_DLOPEN_PRIVATE 0x80000000 /* glibc's __RTLD_DLOPEN, for __libc_dlopen_mode */

/* glibc's x86-64 __restore_rt: mov $15, %rax; syscall (rt_sigreturn). */
static const unsigned char restore_rt_code[] = {0x48, 0xc7, 0xc0, 0x0f, 0x00,
                                                0x00, 0x00, 0x0f, 0x05};

static void say(char *msg, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *msg, size_t size, const char *fmt, ...) {
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
}

int np_inj_mem_write(pid_t pid, uint64_t addr, const void *buf, size_t len) {
    struct iovec local = {(void *)buf, len}, remote = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);

    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EFAULT;
}

static int poke_code(pid_t tid, uint64_t addr, const unsigned char *buf, size_t len) {
    size_t done = 0;

    while (done < len) {
        uint64_t at = (addr + done) & ~7ULL, word;
        size_t skip = (addr + done) - at, n = 8 - skip < len - done ? 8 - skip : len - done;
        errno = 0;
        word = (uint64_t)ptrace(PTRACE_PEEKDATA, tid, (void *)(uintptr_t)at, NULL);
        if (errno)
            return -errno;
        memcpy((unsigned char *)&word + skip, buf + done, n);
        if (ptrace(PTRACE_POKEDATA, tid, (void *)(uintptr_t)at, (void *)(uintptr_t)word) < 0)
            return -errno;
        done += n;
    }
    return 0;
}

int np_inj_code_write(pid_t pid, pid_t tid, uint64_t addr, const void *buf, size_t len) {
    char path[64];
    int fd, err = 0;

    snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
    fd = open(path, O_RDWR | O_CLOEXEC);
    err = fd < 0 ? -errno : 0;
    if (fd >= 0) {
        ssize_t n = pwrite(fd, buf, len, (off_t)addr);
        err = n < 0 ? -errno : (size_t)n == len ? 0 : -EIO;
        close(fd);
        if (!err)
            return 0;
    }
    np_debug("inject: write to /proc/%d/mem refused (%s): PTRACE_POKEDATA", (int)pid,
             strerror(-err));
    return poke_code(tid, addr, buf, len);
}

int np_inj_open_mapped(pid_t pid, const struct np_mapping *m) {
    char path[4200];
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/map_files/%lx-%lx", (int)pid, (unsigned long)m->start,
             (unsigned long)m->end);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 || m->path[0] != '/')
        return fd >= 0 ? fd : -errno;
    snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, m->path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static bool is_libc(const char *path) {
    const char *b = base_name(path);
    return strcmp(b, "libc.so.6") == 0 || strcmp(b, "libc.so") == 0 ||
           (strncmp(b, "libc-", 5) == 0 && strstr(b, ".so"));
}

static bool is_ldso(const char *path) {
    const char *b = base_name(path);
    return strncmp(b, "ld-linux", 8) == 0 || strncmp(b, "ld-2.", 5) == 0 ||
           strcmp(b, "ld.so") == 0 || strncmp(b, "ld64.so", 7) == 0;
}

/* /lib/ld-musl-x86_64.so.1, /usr/lib/x86_64-linux-musl/libc.so, Alpine's
 * /lib/libc.musl-x86_64.so.1 */
static bool is_musl(const char *path) {
    const char *b = base_name(path);
    return strncmp(b, "ld-musl", 7) == 0 || strncmp(b, "libc.musl", 9) == 0 ||
           (strstr(path, "-musl/") && strncmp(b, "libc.so", 7) == 0);
}

/* The mapping of path's file offset 0 (its ELF header). */
static const struct np_mapping *file_head(const struct np_maps *maps, const char *path) {
    for (size_t i = 0; i < maps->count; i++)
        if (maps->items[i].offset == 0 && strcmp(maps->items[i].path, path) == 0)
            return &maps->items[i];
    return NULL;
}

/* Opens the ELF file mapped as path and computes its load bias. */
static int open_elf(const struct np_inj_target *t, const char *path, int *fd_out, uint64_t *base) {
    const struct np_mapping *head = file_head(&t->maps, path);
    int fd, err;

    if (!head)
        return -ENOENT;
    fd = np_inj_open_mapped(t->pid, head);
    if (fd < 0)
        return fd;
    err = np_elf_load_bias(fd, head->start, head->offset, base);
    if (err) {
        close(fd);
        return err == -EINVAL ? -ENOEXEC : err;
    }
    *fd_out = fd;
    return 0;
}

/* dlopen & co in libc (glibc >= 2.34), else in libdl, else glibc's private
 * __libc_dlopen_mode/__libc_dlsym/__libc_dlclose. */
enum { S_DLOPEN, S_DLSYM, S_DLERROR, S_DLCLOSE, S_ERRNO, S_PDLOPEN, S_PDLSYM, S_PDLCLOSE, S_GLIBC };
static const char *const libc_names[] = {
    [S_DLOPEN] = "dlopen",
    [S_DLSYM] = "dlsym",
    [S_DLERROR] = "dlerror",
    [S_DLCLOSE] = "dlclose",
    [S_ERRNO] = "__errno_location",
    [S_PDLOPEN] = "__libc_dlopen_mode",
    [S_PDLSYM] = "__libc_dlsym",
    [S_PDLCLOSE] = "__libc_dlclose",
    [S_GLIBC] = "gnu_get_libc_version",
};
#define NLIBC_NAMES NP_ARRAY_SIZE(libc_names)

/* Looks the first n of libc_names up in the .dynsym of the ELF open on fd:
 * v[i] = base + its value, or 0 when absent. */
static int dynsyms(int fd, uint64_t base, size_t n, uint64_t *v) {
    struct np_elf_symbol_query q[NLIBC_NAMES];

    memset(q, 0, sizeof(q));
    for (size_t i = 0; i < n; i++)
        q[i].name = libc_names[i];
    int err = np_elf_read_dynsyms(fd, q, n);
    for (size_t i = 0; i < n; i++)
        v[i] = !err && q[i].err == 0 ? base + q[i].vaddr : 0;
    return err;
}

static void set_dl_functions(struct np_inj_target *t, const uint64_t *v, int first) {
    t->fn_dlopen = v[first];
    t->fn_dlsym = v[first + 1];
    t->fn_dlerror = first == S_DLOPEN ? v[S_DLERROR] : 0;
    t->fn_dlclose = first == S_DLOPEN ? v[S_DLCLOSE] : v[S_PDLCLOSE];
}

/* dlopen, dlsym, dlerror, dlclose from libdl (glibc < 2.34), if mapped. */
static bool find_in_libdl(struct np_inj_target *t) {
    for (size_t i = 0; i < t->maps.count; i++) {
        const char *b = base_name(t->maps.items[i].path);
        uint64_t v[S_DLCLOSE + 1], base;
        int fd;
        if ((strncmp(b, "libdl.so", 8) != 0 && strncmp(b, "libdl-", 6) != 0) ||
            open_elf(t, t->maps.items[i].path, &fd, &base) < 0)
            continue;
        int err = dynsyms(fd, base, NP_ARRAY_SIZE(v), v);
        close(fd);
        if (!err && v[S_DLOPEN] && v[S_DLSYM]) {
            set_dl_functions(t, v, S_DLOPEN);
            return true;
        }
    }
    return false;
}

static int find_libc_functions(struct np_inj_target *t, char *msg, size_t msg_size) {
    uint64_t v[NLIBC_NAMES], base = 0, rt = 0;
    int fd, err = open_elf(t, t->libc_path, &fd, &base);

    if (err) {
        say(msg, msg_size, "cannot read the target's C library %s: %s", t->libc_path,
            strerror(-err));
        return err;
    }
    err = dynsyms(fd, base, NLIBC_NAMES, v);
    if (np_elf_find_code(fd, restore_rt_code, sizeof(restore_rt_code), &rt) == 0)
        t->restore_rt = base + rt;
    close(fd);
    if (err < 0) {
        say(msg, msg_size, "cannot read the symbols of %s: %s", t->libc_path, strerror(-err));
        return err;
    }
    if (!v[S_GLIBC]) {
        say(msg, msg_size, "the target's C library %s is not glibc: not supported", t->libc_path);
        return -ENOTSUP;
    }
    t->fn_errno_location = v[S_ERRNO];
    if (v[S_DLOPEN] && v[S_DLSYM]) {
        set_dl_functions(t, v, S_DLOPEN);
        return 0;
    }
    if (find_in_libdl(t))
        return 0;
    if (v[S_PDLOPEN] && v[S_PDLSYM]) {
        set_dl_functions(t, v, S_PDLOPEN);
        t->dlopen_extra_flags = (int)RTLD_DLOPEN_PRIVATE;
        return 0;
    }
    say(msg, msg_size, "no dlopen in the target's C library %s", t->libc_path);
    return -ENOTSUP;
}

static int find_libc(struct np_inj_target *t, char *msg, size_t msg_size) {
    for (size_t i = 0; i < t->maps.count; i++) {
        const struct np_mapping *m = &t->maps.items[i];
        if (is_musl(m->path)) {
            say(msg, msg_size, "the target uses musl (%s): only glibc targets are supported",
                m->path);
            return -ENOTSUP;
        }
        if (is_ldso(m->path) && m->exec) {
            t->ldso_start = m->start;
            t->ldso_end = m->end;
        }
        if (!t->libc_path[0] && is_libc(m->path))
            snprintf(t->libc_path, sizeof(t->libc_path), "%s", m->path);
    }
    if (!t->libc_path[0]) {
        say(msg, msg_size,
            "no dynamic C library in the target (statically linked?): nothing can dlopen there");
        return -ENOTSUP;
    }
    return find_libc_functions(t, msg, msg_size);
}

/* Are the bytes [from, to) of the target zero, but for our stub at `at`
 * (*has_stub then)? 0, -ENOSPC when not. */
static int padding_free(const struct np_inj_target *t, uint64_t from, uint64_t to, uint64_t at,
                        bool *has_stub) {
    size_t len = to - from;
    unsigned char *buf = malloc(len);
    int err;

    if (!buf)
        return -ENOMEM;
    err = np_read_process(t->pid, from, buf, len);
    if (!err) {
        const unsigned char *c = buf + (at - from);
        *has_stub = memcmp(c, np_stub_blob, NP_STUB_SIZE) == 0;
        for (size_t i = 0; i < len && !err; i++) {
            bool in_stub = *has_stub && i >= at - from && i < at - from + NP_STUB_SIZE;
            if (!in_stub && buf[i])
                err = -ENOSPC;
        }
    }
    free(buf);
    return err;
}

/* The zero padding after the text segment of one r-x mapping: where the
 * segment's file bytes end and the page ends. *has_stub when our stub is
 * already there. -ENOSPC when too small or not zero (and not our stub). */
static int cave_in(const struct np_inj_target *t, const struct np_mapping *m, uint64_t *cave,
                   bool *has_stub) {
    struct np_elf_segment text;
    uint64_t base = 0;
    int fd, err = open_elf(t, m->path, &fd, &base);

    if (err)
        return err;
    err = np_elf_exec_segment(fd, &text);
    close(fd);
    if (err)
        return -ENOSPC;
    uint64_t end = base + text.vaddr + text.filesz;
    uint64_t at = (end + 63) & ~63ULL;
    if (text.memsz != text.filesz || end < m->start || end >= m->end ||
        at + NP_STUB_SIZE + 64 > m->end)
        return -ENOSPC;
    err = padding_free(t, end, m->end, at, has_stub);
    if (!err)
        *cave = at;
    return err;
}

static bool cave_pass_wants(const struct np_inj_target *t, int pass, const char *path) {
    bool libc = strcmp(path, t->libc_path) == 0;
    return pass == 0 ? libc : pass == 1 ? is_ldso(path) : !is_ldso(path) && !libc;
}

/* libc first, then the loader, then any other private r-x file mapping. */
static int find_cave(struct np_inj_target *t, char *msg, size_t msg_size) {
    for (int pass = 0; pass < 3; pass++) {
        for (size_t i = 0; i < t->maps.count; i++) {
            const struct np_mapping *m = &t->maps.items[i];
            if (strcmp(m->perms, "r-xp") != 0 || m->path[0] != '/' ||
                !cave_pass_wants(t, pass, m->path) ||
                cave_in(t, m, &t->cave, &t->cave_has_stub) < 0)
                continue;
            snprintf(t->cave_path, sizeof(t->cave_path), "%s", m->path);
            np_debug("inject: code cave at 0x%lx in %s%s", (unsigned long)t->cave, m->path,
                     t->cave_has_stub ? " (stub already there)" : "");
            return 0;
        }
    }
    say(msg, msg_size, "no code cave of %zu zero bytes after any executable segment", NP_STUB_SIZE);
    return -ENOSPC;
}

/* Our library, loaded by an earlier injection (its memfd name) or by CUDA
 * (its file name): a mapping whose name contains match. */
static int find_loaded(struct np_inj_target *t, const char *match, const char *symbol, char *msg,
                       size_t msg_size) {
    const struct np_mapping *head = NULL;

    for (size_t i = 0; i < t->maps.count && !head; i++)
        if (t->maps.items[i].offset == 0 && strstr(t->maps.items[i].path, match))
            head = &t->maps.items[i];
    if (!head)
        return 0;
    snprintf(t->loaded_path, sizeof(t->loaded_path), "%s", head->path);
    t->loaded = true;

    struct np_elf_symbol_query q = {.name = symbol};
    uint64_t base = 0;
    int fd, err = open_elf(t, head->path, &fd, &base);
    if (err) {
        say(msg, msg_size, "cannot read the loaded library %s: %s", head->path, strerror(-err));
        return err;
    }
    err = np_elf_read_dynsyms(fd, &q, 1);
    close(fd);
    if (err || q.err) {
        say(msg, msg_size, "the loaded library %s has no %s", head->path, symbol);
        return err ? err : -ENOENT;
    }
    t->loaded_fn = base + q.vaddr;
    return 0;
}

int np_inj_target_open(pid_t pid, const char *match, const char *symbol, struct np_inj_target *t,
                       char *msg, size_t msg_size) {
    int err;

    memset(t, 0, sizeof(*t));
    t->pid = pid;
    err = np_maps_read_all(pid, &t->maps);
    if (err) {
        say(msg, msg_size, "cannot read /proc/%d/maps: %s", (int)pid, strerror(-err));
        return err;
    }
    err = find_libc(t, msg, msg_size);
    if (!err)
        err = find_loaded(t, match, symbol, msg, msg_size);
    if (!err)
        err = find_cave(t, msg, msg_size);
    if (err)
        np_inj_target_close(t);
    return err;
}

void np_inj_target_close(struct np_inj_target *t) {
    np_maps_free(&t->maps);
}
