/* inject_testlib.c - the library tests/test_inject.py injects: a stand-in for
 * libncclprobe_cupti.so.
 * Its attach function writes one line on the socket it is given and closes
 * it; the line carries a count of loads (constructor runs) and of attach
 * calls, so the tests see that a wake reaches the same copy. It also
 * leaves a mess behind on purpose - errno, every vector register, MXCSR's
 * status flags - which the stub must hide from the interrupted thread.
 *
 * flags: 1 = sleep 50 ms in attach (to widen kill windows), 2 = return -5.
 * Built with -DNP_TEST_NO_ATTACH it has no attach function at all. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int loads;

__attribute__((constructor)) static void on_load(void) {
    loads++;
}

#ifndef NP_TEST_NO_ATTACH
static int calls;

static void make_a_mess(void) {
#ifdef __AVX__
    __asm__ volatile("vpcmpeqd %%ymm0, %%ymm0, %%ymm0" ::: "xmm0");
#endif
    __asm__ volatile("pcmpeqd %%xmm0, %%xmm0\n\t"
                     "pcmpeqd %%xmm1, %%xmm1\n\t"
                     "pcmpeqd %%xmm7, %%xmm7\n\t"
                     "pcmpeqd %%xmm8, %%xmm8\n\t"
                     "pcmpeqd %%xmm15, %%xmm15" ::
                         : "xmm0", "xmm1", "xmm7", "xmm8", "xmm15");
    volatile double x = 1.0, y = 3.0;
    x = x / y; /* inexact: MXCSR status flag */
    errno = EBADF;
}

__attribute__((visibility("default"))) int ncclprobe_cupti_attach(int sock_fd, unsigned flags) {
    char line[160];

    calls++;
    if (flags & 1) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (flags & 2)
        return -5;
    int n = snprintf(line, sizeof(line), "attach pid=%d tid=%d call=%d loads=%d flags=%u\n",
                     (int)getpid(), (int)gettid(), calls, loads, flags);
    if (write(sock_fd, line, (size_t)n) != n)
        return -errno;
    close(sock_fd);
    make_a_mess();
    return 0;
}
#endif
