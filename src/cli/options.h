/* options.h - the command line of `ncclprobe record`: what can be asked
 * for, its defaults, and the checks that turn bad input into a clear error
 * and exit code 2 before anything is loaded. */
#ifndef NP_OPTIONS_H
#define NP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "ingest/ingest.h"

struct options {
    pid_t *pids;
    size_t npids;
    char *output_dir;
    double duration_s; /* 0: until stopped */
    bool no_wait;
    long ring_mb;
    long wakeup_kb;
    enum unwind_mode { UNWIND_AUTO, UNWIND_DWARF, UNWIND_FP } unwind;
    bool inline_frames;
    const char *debuginfo_path;
    const char *raw_dump;
    long stack_bytes;
    enum np_python_mode python;
    long python_depth;
    const char *cupti_socket; /* where libncclprobe_cupti.so sends GPU records */
    bool inject_cupti;        /* --cupti: CUDA_INJECTION64_PATH for -- CMD */
    bool no_gpu;
    long gpu_timeout_ms;
    bool verbose;
    unsigned formats; /* --format: enum np_format bits */
    char **command;   /* argv after "--", NULL-terminated */
};

#define DEFAULT_STACK_BYTES 16384
#define DEFAULT_PYTHON_DEPTH 128
#define DEFAULT_GPU_TIMEOUT_MS 5000

/* Parses argv (argv[0] is "record" or the program); 0, or -EINVAL after
 * printing what is wrong. --help prints the usage and exits 0. */
int np_record_parse_options(int argc, char **argv, struct options *opt);
/* "ncclprobe-YYYYmmdd-HHMMSS" in the current directory, made unique. */
char *np_default_output_dir(void);

#endif
