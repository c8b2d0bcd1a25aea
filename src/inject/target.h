/* target.h - the injector's view of a target process before anything is
 * changed in it: its C library and the functions the stub calls there
 * (dlopen, dlsym, dlerror, __errno_location), glibc's signal-return
 * trampoline (to spot threads inside a signal handler), the dynamic
 * loader's code (never hijacked there), the code cave the stub will live
 * in, and whether our library is already loaded (and its attach function).
 * Also writing target memory. The ELF reading is attach/elfscan.c's, on the
 * files the target maps, opened through /proc/PID/map_files: they need not
 * exist in our mount namespace. */
#ifndef NP_INJECT_TARGET_H
#define NP_INJECT_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach/procmaps.h"

struct np_inj_target {
    pid_t pid;
    struct np_maps maps; /* every mapping (np_maps_read_all) */
    char libc_path[256];
    uint64_t fn_dlopen, fn_dlsym, fn_dlerror, fn_dlclose, fn_errno_location;
    int dlopen_extra_flags; /* __RTLD_DLOPEN when only __libc_dlopen_mode exists */
    uint64_t restore_rt;    /* glibc's __restore_rt, 0 when not found */
    uint64_t ldso_start, ldso_end;
    uint64_t cave;       /* where the stub goes */
    char cave_path[256]; /* in the mapping of this file */
    bool cave_has_stub;  /* it is already there (an earlier injection) */
    bool loaded;         /* a mapping's name contains the library's match string */
    uint64_t loaded_fn;  /* its attach function */
    char loaded_path[256];
};

/* Reads what the injection needs. On failure msg says why, in one line:
 * -ENOTSUP (static binary, musl, no dlopen), -ENOSPC (no code cave),
 * -ENOENT (the loaded library has no such symbol), -ESRCH (gone). */
int np_inj_target_open(pid_t pid, const char *match, const char *symbol, struct np_inj_target *t,
                       char *msg, size_t msg_size);
void np_inj_target_close(struct np_inj_target *t);

/* process_vm_writev of len bytes (reads: lib/util.h's np_read_process): 0,
 * -EFAULT (partly unmapped or not writable: only the stack is), -ESRCH. */
int np_inj_mem_write(pid_t pid, uint64_t addr, const void *buf, size_t len);

/* Writes into read-only code (the cave) of the stopped thread tid's
 * process: /proc/PID/mem, else PTRACE_POKEDATA (we are its tracer). The
 * page becomes a private copy; the file is never changed. */
int np_inj_code_write(pid_t pid, pid_t tid, uint64_t addr, const void *buf, size_t len);

/* Opens the file behind a mapping of pid (map_files, else /proc/PID/root). */
int np_inj_open_mapped(pid_t pid, const struct np_mapping *m);

/* The stub, as built (stub_blob.S). */
extern const unsigned char np_stub_blob[];
extern const unsigned char np_stub_blob_end[];
#define NP_STUB_SIZE ((size_t)(np_stub_blob_end - np_stub_blob))

#endif
