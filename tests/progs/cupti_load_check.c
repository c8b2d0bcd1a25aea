/* cupti_load_check.c - libncclprobe_cupti.so with a REAL libcupti in a process that has no CUDA
 * driver, loaded the way CUDA loads it. Compiled and run by tests/test_runtimes_cupti.py (not by
 * the progs Makefile), once per CUPTI of the runtimes cache.
 *
 *   cupti_load_check AGENT [CUDART]
 *
 * dlopen()s CUDART first when given (a libcudart by name, found on LD_LIBRARY_PATH: the process
 * then has the libcudart of one CUDA major, which picks the CUPTI), then AGENT, and calls its
 * InitializeInjection. The library connects to NCCLPROBE_CUPTI_SOCKET at once (the test listens
 * there) and says what it loaded and why it stays out. Prints "InitializeInjection N" and exits
 * 0; a crash in CUPTI (13.2 without a driver) fails the test. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: cupti_load_check AGENT [CUDART]\n");
        return 2;
    }
    if (argc > 2 && !dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "cupti_load_check: %s\n", dlerror());
        return 2;
    }
    void *agent = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!agent) {
        fprintf(stderr, "cupti_load_check: %s\n", dlerror());
        return 2;
    }
    int (*initialize)(void);
    *(void **)&initialize = dlsym(agent, "InitializeInjection");
    if (!initialize) {
        fprintf(stderr, "cupti_load_check: no InitializeInjection in %s\n", argv[1]);
        return 2;
    }
    printf("InitializeInjection %d\n", initialize());
    return 0;
}
