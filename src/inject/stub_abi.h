/* stub_abi.h - the data block shared by the injector (inject.c, hijack.c)
 * and the machine-code stub that runs inside the target (stub.c,
 * stub_entry.S). It is the only contract between the two: the injector
 * writes the whole block onto the hijacked thread's stack, below its red
 * zone, before redirecting the thread; the stub reads its orders from it,
 * publishes what it created and what happened, and finally restores the
 * thread from it. Offsets used by the assembly are fixed here and checked
 * against the C layout with static asserts.
 *
 * Memory picture, on the hijacked thread's stack (addresses grow up):
 *
 *   rsp0 ────────────────────────────── the thread's rsp when stopped
 *   rsp0 - 128 .. rsp0                  red zone: never touched
 *   rsp0 - 256 .. rsp0 - 128            gap
 *   F = rsp0 - 16 - NP_STUB_RET_GAP     frame: rflags, resume rip
 *   ...                                 xsave area (64-byte aligned)
 *   D                                   struct np_stub_block (D + frame_off = F)
 *   D & ~15  ───────────────────────── rsp at stub entry; the stub's C code,
 *                                       dlopen and signal handlers run below
 *
 * The stub ends with "add frame_off(%rsp), %rsp; popfq; ret $GAP": rip and
 * rsp are restored by one instruction and nothing is written near rsp0. */
#ifndef NP_INJECT_STUB_ABI_H
#define NP_INJECT_STUB_ABI_H

/* Bytes between the end of the frame and the hijacked rsp: above the
 * 128-byte red zone, which may hold live data of the interrupted function. */
#define NP_STUB_RET_GAP 256

/* Offsets of the fields the assembly uses. */
#define NP_OFF_R15 0
#define NP_OFF_R14 8
#define NP_OFF_R13 16
#define NP_OFF_R12 24
#define NP_OFF_RBP 32
#define NP_OFF_RBX 40
#define NP_OFF_R11 48
#define NP_OFF_R10 56
#define NP_OFF_R9 64
#define NP_OFF_R8 72
#define NP_OFF_RAX 80
#define NP_OFF_RCX 88
#define NP_OFF_RDX 96
#define NP_OFF_RSI 104
#define NP_OFF_RDI 112
#define NP_OFF_FRAME 120
#define NP_OFF_XSAVE_PTR 128
#define NP_OFF_XSAVE_MASK 136

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

#define NP_STUB_MAGIC 0x4e50494e4a535442ULL /* "NPINJSTB" */
#define NP_STUB_VERSION 1

enum np_stub_mode {
    NP_STUB_LOAD = 1, /* memfd + dlopen + dlsym + attach */
    NP_STUB_WAKE = 2, /* the library is there: attach at fn_attach */
};

/* How the interrupted thread goes on once the stub is done (chosen by the
 * injector from the stop; the stub may turn a re-issue into EINTR when a
 * real signal for the thread arrived meanwhile, see stub.c). */
enum np_stub_resume {
    NP_RESUME_RETURN = 1,        /* rip = sys_ip, rax = sys_ret: the syscall had finished */
    NP_RESUME_REISSUE = 2,       /* rip = sys_ip - 2, rax = sys_nr: same call again */
    NP_RESUME_RESTART_BLOCK = 3, /* rip = sys_ip - 2, rax = __NR_restart_syscall */
    NP_RESUME_ENTRY = 4,         /* caught at syscall entry: rip = sys_ip - 2, rax = sys_nr */
};

/* What the stub says happened (out.resumed). */
enum np_stub_resumed {
    NP_RESUMED_AS_PLANNED = 1,
    NP_RESUMED_EINTR = 2, /* a handler ran: the call returns EINTR as the kernel would */
};

/* The stub's progress, for messages (out.stage). */
enum np_stub_stage {
    NP_STAGE_ENTERED = 1,
    NP_STAGE_MEMFD,
    NP_STAGE_SOCKETPAIR,
    NP_STAGE_WAIT_GO,
    NP_STAGE_DLOPEN,
    NP_STAGE_DLSYM,
    NP_STAGE_ATTACH,
    NP_STAGE_DONE,
};

/* Timestamps (CLOCK_MONOTONIC ns) taken by the stub, out.t[]. */
enum np_stub_time {
    NP_T_ENTRY,
    NP_T_READY,
    NP_T_GO,
    NP_T_DLOPEN,
    NP_T_DLOPEN_END,
    NP_T_ATTACH_END,
    NP_T_EXIT,
    NP_T_MAX
};

/* The control socketpair (ctl_stub in the stub, ctl_np taken by ncclprobe):
 * ncclprobe sends these bytes; the stub answers with its results, one
 * struct np_stub_out, just before it restores the thread. The library's
 * socket carries nothing of ours. */
#define NP_STUB_MSG_FETCHED 'F' /* ncclprobe holds its copies: the stub closes its own */
#define NP_STUB_MSG_GO 'G'      /* the memfd is filled (or nothing to fill): go on */
#define NP_STUB_MSG_ABORT 'A'   /* give up and restore */

/* Written by the stub. The fds and `ready` are read by the injector from
 * the block (process_vm_readv) while the stub waits; the whole struct is
 * then sent on the control socket at the end (the block itself may be
 * overwritten by the thread's own stack use as soon as it resumes). */
struct np_stub_out {
    int32_t memfd;    /* in the target: the library's memfd (LOAD) or the busy marker */
    int32_t sock_lib; /* the library's end of the socketpair */
    int32_t sock_np;  /* ncclprobe's end (the target's copy is closed after 'F') */
    int32_t ctl_stub; /* the stub's end of the control socketpair */
    int32_t ctl_np;   /* ncclprobe's end of it */
    uint32_t ready;   /* 1: the fds above are published; 2: failed (status) */
    int32_t status;   /* 0, or -errno of the step that failed */
    int32_t stage;    /* enum np_stub_stage reached */
    int32_t attach_ret;
    uint32_t resumed; /* enum np_stub_resumed */
    uint64_t handle;  /* dlopen's handle (LOAD) */
    uint64_t fn_attach;
    uint64_t t[NP_T_MAX];
    char error[192]; /* dlerror(), NUL-terminated */
    uint64_t sum;    /* checksum over the fields above, keyed by nonce */
    uint64_t done;   /* == nonce */
};

struct np_stub_block {
    /* The thread's registers at the stop: the stub restores them last. */
    uint64_t r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi;
    uint64_t frame_off;  /* F - D */
    uint64_t xsave_ptr;  /* absolute, 64-byte aligned, inside the block */
    uint64_t xsave_mask; /* XCR0 components saved (AMX tiles excluded) */
    uint64_t magic;
    uint64_t nonce;
    uint32_t version;
    uint32_t mode; /* enum np_stub_mode */
    uint32_t attach_flags;
    int32_t timeout_ms; /* the stub waits at most this for ncclprobe's 'G' */
    /* Functions in the target. */
    uint64_t fn_dlopen, fn_dlsym, fn_dlerror, fn_dlclose, fn_errno_location, fn_attach;
    int32_t dlopen_flags;
    uint32_t resume; /* enum np_stub_resume */
    /* The interrupted system call. */
    int64_t sys_nr;
    int64_t sys_ret;
    uint64_t sys_ip;      /* the instruction after its `syscall` */
    uint64_t sys_sigmask; /* the thread's own signal mask (restored at the end) */
    char memfd_name[32];
    char symbol[64];
    struct np_stub_out out;
};

#define NP_STUB_ASSERT_OFF(field, off)                                                             \
    _Static_assert(offsetof(struct np_stub_block, field) == (off), #field " offset")
NP_STUB_ASSERT_OFF(r15, NP_OFF_R15);
NP_STUB_ASSERT_OFF(r14, NP_OFF_R14);
NP_STUB_ASSERT_OFF(r13, NP_OFF_R13);
NP_STUB_ASSERT_OFF(r12, NP_OFF_R12);
NP_STUB_ASSERT_OFF(rbp, NP_OFF_RBP);
NP_STUB_ASSERT_OFF(rbx, NP_OFF_RBX);
NP_STUB_ASSERT_OFF(r11, NP_OFF_R11);
NP_STUB_ASSERT_OFF(r10, NP_OFF_R10);
NP_STUB_ASSERT_OFF(r9, NP_OFF_R9);
NP_STUB_ASSERT_OFF(r8, NP_OFF_R8);
NP_STUB_ASSERT_OFF(rax, NP_OFF_RAX);
NP_STUB_ASSERT_OFF(rcx, NP_OFF_RCX);
NP_STUB_ASSERT_OFF(rdx, NP_OFF_RDX);
NP_STUB_ASSERT_OFF(rsi, NP_OFF_RSI);
NP_STUB_ASSERT_OFF(rdi, NP_OFF_RDI);
NP_STUB_ASSERT_OFF(frame_off, NP_OFF_FRAME);
NP_STUB_ASSERT_OFF(xsave_ptr, NP_OFF_XSAVE_PTR);
NP_STUB_ASSERT_OFF(xsave_mask, NP_OFF_XSAVE_MASK);

/* The checksum the stub writes into out.sum: a stale or half-overwritten
 * block (the thread reused its stack before we read it) fails it. */
static inline uint64_t np_stub_out_sum(const struct np_stub_out *o, uint64_t nonce) {
    const unsigned char *p = (const unsigned char *)o;
    uint64_t h = 0xcbf29ce484222325ULL ^ nonce;
    for (size_t i = 0; i < offsetof(struct np_stub_out, sum); i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#endif /* __ASSEMBLER__ */

#endif
