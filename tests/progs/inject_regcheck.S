/* inject_regcheck.S - the register checks of inject_target.c: runs one
 * system call (or one call of np_rc_work) with known values in every
 * register the kernel and the ABI must preserve, then checks them: rbx,
 * rbp, r12-r15, the syscall argument registers, ymm0-15 (xmm0-15 without
 * AVX), MXCSR's control bits and the direction flag (set across the call
 * when asked). A hijack that restores anything wrongly is seen here. See
 * struct np_rc in inject_target.c for the layout. */

#define RC_VEC 0
#define RC_NR 512
#define RC_ARGS 520
#define RC_MAGIC 568
#define RC_BAD 616
#define RC_DF 620
#define RC_MXCSR 624
#define RC_AVX 628
#define RC_RET 632
#define RC_MODE 640

    .text
    .globl np_rc_run
    .type np_rc_run, @function
/* long np_rc_run(struct np_rc *c) */
np_rc_run:
    push %rbx
    push %rbp
    push %r12
    push %r13
    push %r14
    push %r15
    sub $24, %rsp              /* 0: c, 8: caller's mxcsr, 12: mxcsr after, 16: pad */
    mov %rdi, 0(%rsp)
    stmxcsr 8(%rsp)
    mov %rdi, %rax
    ldmxcsr RC_MXCSR(%rax)
    cmpl $0, RC_AVX(%rax)
    je 1f
    vmovdqu RC_VEC+0*32(%rax), %ymm0
    vmovdqu RC_VEC+1*32(%rax), %ymm1
    vmovdqu RC_VEC+2*32(%rax), %ymm2
    vmovdqu RC_VEC+3*32(%rax), %ymm3
    vmovdqu RC_VEC+4*32(%rax), %ymm4
    vmovdqu RC_VEC+5*32(%rax), %ymm5
    vmovdqu RC_VEC+6*32(%rax), %ymm6
    vmovdqu RC_VEC+7*32(%rax), %ymm7
    vmovdqu RC_VEC+8*32(%rax), %ymm8
    vmovdqu RC_VEC+9*32(%rax), %ymm9
    vmovdqu RC_VEC+10*32(%rax), %ymm10
    vmovdqu RC_VEC+11*32(%rax), %ymm11
    vmovdqu RC_VEC+12*32(%rax), %ymm12
    vmovdqu RC_VEC+13*32(%rax), %ymm13
    vmovdqu RC_VEC+14*32(%rax), %ymm14
    vmovdqu RC_VEC+15*32(%rax), %ymm15
    jmp 2f
1:
    movdqu RC_VEC+0*32(%rax), %xmm0
    movdqu RC_VEC+1*32(%rax), %xmm1
    movdqu RC_VEC+2*32(%rax), %xmm2
    movdqu RC_VEC+3*32(%rax), %xmm3
    movdqu RC_VEC+4*32(%rax), %xmm4
    movdqu RC_VEC+5*32(%rax), %xmm5
    movdqu RC_VEC+6*32(%rax), %xmm6
    movdqu RC_VEC+7*32(%rax), %xmm7
    movdqu RC_VEC+8*32(%rax), %xmm8
    movdqu RC_VEC+9*32(%rax), %xmm9
    movdqu RC_VEC+10*32(%rax), %xmm10
    movdqu RC_VEC+11*32(%rax), %xmm11
    movdqu RC_VEC+12*32(%rax), %xmm12
    movdqu RC_VEC+13*32(%rax), %xmm13
    movdqu RC_VEC+14*32(%rax), %xmm14
    movdqu RC_VEC+15*32(%rax), %xmm15
2:
    mov RC_MAGIC+0(%rax), %rbx
    mov RC_MAGIC+8(%rax), %rbp
    mov RC_MAGIC+16(%rax), %r12
    mov RC_MAGIC+24(%rax), %r13
    mov RC_MAGIC+32(%rax), %r14
    mov RC_MAGIC+40(%rax), %r15
    mov RC_ARGS+0(%rax), %rdi
    mov RC_ARGS+8(%rax), %rsi
    mov RC_ARGS+16(%rax), %rdx
    mov RC_ARGS+24(%rax), %r10
    mov RC_ARGS+32(%rax), %r8
    mov RC_ARGS+40(%rax), %r9
    cmpl $0, RC_MODE(%rax)
    jne 3f
    cmpl $0, RC_DF(%rax)
    je 4f
    std
4:
    mov RC_NR(%rax), %rax
    syscall
    jmp 5f
3:
    call np_rc_work            /* preserves all but rax, rcx, rdx, rsi, r8-r11 (and rdi) */
    mov 0(%rsp), %rcx
    mov RC_ARGS+0(%rcx), %rdi  /* np_rc_work may use rdi, rsi, rdx, r8-r10: not checked */
    mov RC_ARGS+8(%rcx), %rsi
    mov RC_ARGS+16(%rcx), %rdx
    mov RC_ARGS+24(%rcx), %r10
    mov RC_ARGS+32(%rcx), %r8
    mov RC_ARGS+40(%rcx), %r9
5:
    pushfq
    cld
    mov 8(%rsp), %rcx          /* c */
    mov %rax, RC_RET(%rcx)
    xor %r11d, %r11d
    mov (%rsp), %rax           /* rflags: DF is bit 10 */
    shr $10, %rax
    and $1, %eax
    cmpl $0, RC_MODE(%rcx)
    jne 6f
    cmp RC_DF(%rcx), %eax
    je 6f
    or $1, %r11d
6:
    cmp RC_MAGIC+0(%rcx), %rbx
    je 7f
    or $2, %r11d
7:  cmp RC_MAGIC+8(%rcx), %rbp
    je 7f
    or $4, %r11d
7:  cmp RC_MAGIC+16(%rcx), %r12
    je 7f
    or $8, %r11d
7:  cmp RC_MAGIC+24(%rcx), %r13
    je 7f
    or $16, %r11d
7:  cmp RC_MAGIC+32(%rcx), %r14
    je 7f
    or $32, %r11d
7:  cmp RC_MAGIC+40(%rcx), %r15
    je 7f
    or $64, %r11d
7:  cmp RC_ARGS+0(%rcx), %rdi
    je 7f
    or $128, %r11d
7:  cmp RC_ARGS+8(%rcx), %rsi
    je 7f
    or $256, %r11d
7:  cmp RC_ARGS+16(%rcx), %rdx
    je 7f
    or $512, %r11d
7:  cmp RC_ARGS+24(%rcx), %r10
    je 7f
    or $1024, %r11d
7:  cmp RC_ARGS+32(%rcx), %r8
    je 7f
    or $2048, %r11d
7:  cmp RC_ARGS+40(%rcx), %r9
    je 7f
    or $4096, %r11d
7:
    stmxcsr 20(%rsp)           /* 12(%rsp) before the pushfq */
    mov 20(%rsp), %eax
    xor RC_MXCSR(%rcx), %eax
    and $0xffc0, %eax          /* control bits only: the flags are sticky status */
    je 7f
    or $8192, %r11d
7:
    cmpl $0, RC_AVX(%rcx)
    je 8f
#define CHECK_YMM(i)                                   \
    vpcmpeqb RC_VEC+i*32(%rcx), %ymm##i, %ymm##i;      \
    vpmovmskb %ymm##i, %eax;                           \
    cmp $-1, %eax;                                     \
    je 9f;                                             \
    or $(1 << (14 + i)), %r11d;                        \
9:
    CHECK_YMM(0)
    CHECK_YMM(1)
    CHECK_YMM(2)
    CHECK_YMM(3)
    CHECK_YMM(4)
    CHECK_YMM(5)
    CHECK_YMM(6)
    CHECK_YMM(7)
    CHECK_YMM(8)
    CHECK_YMM(9)
    CHECK_YMM(10)
    CHECK_YMM(11)
    CHECK_YMM(12)
    CHECK_YMM(13)
    CHECK_YMM(14)
    CHECK_YMM(15)
    vzeroupper
    jmp 10f
8:
#define CHECK_XMM2(i)                                  \
    pcmpeqb RC_VEC+i*32(%rcx), %xmm##i;                \
    pmovmskb %xmm##i, %eax;                            \
    cmp $0xffff, %eax;                                 \
    je 9f;                                             \
    or $(1 << (14 + i)), %r11d;                        \
9:
    /* pcmpeqb needs 16-byte aligned memory: the vectors are 32-byte aligned */
    CHECK_XMM2(0)
    CHECK_XMM2(1)
    CHECK_XMM2(2)
    CHECK_XMM2(3)
    CHECK_XMM2(4)
    CHECK_XMM2(5)
    CHECK_XMM2(6)
    CHECK_XMM2(7)
    CHECK_XMM2(8)
    CHECK_XMM2(9)
    CHECK_XMM2(10)
    CHECK_XMM2(11)
    CHECK_XMM2(12)
    CHECK_XMM2(13)
    CHECK_XMM2(14)
    CHECK_XMM2(15)
10:
    mov %r11d, RC_BAD(%rcx)
    mov RC_RET(%rcx), %rax
    add $8, %rsp               /* the pushed rflags */
    ldmxcsr 8(%rsp)
    add $24, %rsp
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbp
    pop %rbx
    ret
    .size np_rc_run, . - np_rc_run

/* uint64_t np_rc_work(uint64_t seed in rdi, uint64_t rounds in rsi):
 * integer-only mixing, mirrored in C by rc_work_expect(). */
    .globl np_rc_work
    .type np_rc_work, @function
np_rc_work:
    mov %rdi, %rax
    mov %rsi, %rcx
    test %rcx, %rcx
    je 2f
1:
    mov %rax, %rdx
    shl $13, %rdx
    xor %rdx, %rax
    mov %rax, %rdx
    shr $7, %rdx
    xor %rdx, %rax
    mov %rax, %rdx
    shl $17, %rdx
    xor %rdx, %rax
    mov $0x9e3779b9, %edx
    add %rdx, %rax
    dec %rcx
    jne 1b
2:
    ret
    .size np_rc_work, . - np_rc_work
    .section .note.GNU-stack, "", @progbits
