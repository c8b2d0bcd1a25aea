/* stub_entry.S - the first and last instructions the hijacked thread runs
 * in the stub: it saves the FP/SSE/AVX state (xsave, mask from the block),
 * calls np_stub_main (stub.c), then restores the FP state, every general
 * register and rflags from the block and returns to the interrupted code
 * with one `ret $NP_STUB_RET_GAP`, which sets rip and rsp together (a signal
 * can never land between the two). The resume address is read from the
 * frame at the top of the block, never from the red zone.
 *
 * Entry state (set by the injector with PTRACE_SETREGS): rdi = the block,
 * rsp = 16-byte aligned just below it, every other register as it was. The
 * code is position independent and needs no relocation: it is copied into
 * a code cave of the target. It begins with a jump over a signature, so a
 * cave holding it is recognisable. */
#include "inject/stub_abi.h"

    .section .text.entry, "ax"
    .globl np_stub_entry
    .type np_stub_entry, @function
np_stub_entry:
    jmp 1f
    .ascii "ncclprobe-inject-stub-v1\0"
    .balign 8
1:
    cld
    mov %rdi, %rbx
    mov NP_OFF_XSAVE_PTR(%rbx), %rcx
    mov NP_OFF_XSAVE_MASK(%rbx), %eax
    mov NP_OFF_XSAVE_MASK+4(%rbx), %edx
    xsave64 (%rcx)
    mov %rbx, %rdi
    call np_stub_main

    mov NP_OFF_XSAVE_PTR(%rbx), %rcx
    mov NP_OFF_XSAVE_MASK(%rbx), %eax
    mov NP_OFF_XSAVE_MASK+4(%rbx), %edx
    xrstor64 (%rcx)

    /* From here on rsp is the block: all data we still need is at or above
     * rsp, where a signal frame can never be written. */
    mov %rbx, %rsp
    mov NP_OFF_R15(%rsp), %r15
    mov NP_OFF_R14(%rsp), %r14
    mov NP_OFF_R13(%rsp), %r13
    mov NP_OFF_R12(%rsp), %r12
    mov NP_OFF_RBP(%rsp), %rbp
    mov NP_OFF_RBX(%rsp), %rbx
    mov NP_OFF_R11(%rsp), %r11
    mov NP_OFF_R10(%rsp), %r10
    mov NP_OFF_R9(%rsp), %r9
    mov NP_OFF_R8(%rsp), %r8
    mov NP_OFF_RAX(%rsp), %rax
    mov NP_OFF_RCX(%rsp), %rcx
    mov NP_OFF_RDX(%rsp), %rdx
    mov NP_OFF_RSI(%rsp), %rsi
    mov NP_OFF_RDI(%rsp), %rdi
    add NP_OFF_FRAME(%rsp), %rsp
    popfq
    ret $NP_STUB_RET_GAP
    .size np_stub_entry, . - np_stub_entry
    .section .note.GNU-stack, "", @progbits
