/* options.c - `ncclprobe record`'s command line (see options.h). */
#define _GNU_SOURCE
#include "cli/options.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lib/util.h"
#include "ncclprobe/events.h"
#include "ncclprobe/gpu_wire.h"
#include "symbolize/symbolize.h"
#include "writers/formats.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ncclprobe record [options] --pid PID[,PID...]\n"
            "       ncclprobe record [options] -- CMD [ARGS...]\n"
            "       ncclprobe --pid PID            (same as record --pid)\n"
            "\n"
            "Records every CUDA kernel launch and NCCL call of the targets with its call\n"
            "stack, without restarting them.\n"
            "\n"
            "options:\n"
            "  -p, --pid PID[,PID...]   attach to running processes (all their threads)\n"
            "  -o, --output DIR         recording directory (default ncclprobe-YYYYmmdd-HHMMSS)\n"
            "  -d, --duration SEC       stop after SEC seconds (default: Ctrl-C, SIGTERM or\n"
            "                           when every target has exited)\n"
            "      --no-wait            fail instead of waiting when a target has no CUDA or\n"
            "                           NCCL library loaded yet\n"
            "      --ring-buffer-mb N   BPF ring buffer size, a power of two (default 64)\n"
            "      --wakeup-kb N        wake the reader once N KiB are queued (default 256)\n"
            "      --unwind MODE        auto (default): DWARF CFI unwinding of a copy of the\n"
            "                           stack, frame pointers where code has no CFI;\n"
            "                           dwarf: CFI only; fp: frame pointers only (cheapest,\n"
            "                           incomplete through code built without them)\n"
            "      --inline             inlined functions (from debug info, marked \"[inlined]\")\n"
            "                           in the folded files too; stacks.jsonl always has them\n"
            "      --debuginfo-path P   where to find separate debug files (libdw syntax,\n"
            "                           default :.debug:/usr/lib/debug with build-id dirs)\n"
            "      --stack-bytes N      user stack copied per launch for DWARF unwinding\n"
            "                           (default 16384, at most 65536)\n"
            "      --python MODE        Python frames of CPython 3.10+ targets: merge\n"
            "                           (default) puts them where the interpreter ran\n"
            "                           them, in place of its own frames; raw keeps\n"
            "                           every interpreter frame beside them; off\n"
            "      --python-depth N     Python frames kept per launch, innermost first\n"
            "                           (default 128, at most 1024); deeper stacks end\n"
            "                           in \"[python truncated]\"\n"
            "      --cupti-socket PATH  where targets running libncclprobe_cupti.so\n"
            "                           (CUDA_INJECTION64_PATH) send GPU records (default\n"
            "                           " NP_WIRE_DEFAULT_SOCKET ")\n"
            "      --cupti              with -- CMD: run CMD with our CUPTI library injected\n"
            "                           (GPU kernels and times joined to each launch)\n"
            "      --gpu-timeout-ms MS  a launch without GPU records after MS ms is written\n"
            "                           as [GPU_Launch_Pending] (default 5000)\n"
            "      --no-gpu             do not listen for GPU records\n"
            "      --raw-dump FILE      also write every BPF record as received (for\n"
            "                           bench/unwind_bench and bug reports)\n"
            "      --format LIST        outputs made from the recording at the end: pprof\n"
            "                           (profile.pb.gz), perfetto (trace.json), svg\n"
            "                           (flamegraph*.svg), all (default) or none\n"
            "  -v, --verbose            more diagnostics\n"
            "  -h, --help               this text\n");
}

static int parse_pids(const char *text, struct options *opt) {
    char *copy = strdup(text), *save = NULL;
    if (!copy)
        return -ENOMEM;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long pid;
        if (np_parse_long(tok, 1, 0x3fffffff, &pid) < 0) {
            np_err("invalid pid '%s': expected a positive number", tok);
            free(copy);
            return -EINVAL;
        }
        pid_t *pids = realloc(opt->pids, (opt->npids + 1) * sizeof(*pids));
        if (!pids) {
            free(copy);
            return -ENOMEM;
        }
        opt->pids = pids;
        opt->pids[opt->npids++] = (pid_t)pid;
    }
    free(copy);
    return 0;
}

int np_record_parse_options(int argc, char **argv, struct options *opt) {
    enum {
        OPT_NO_WAIT = 256,
        OPT_RING_MB,
        OPT_WAKEUP_KB,
        OPT_UNWIND,
        OPT_STACK_BYTES,
        OPT_INLINE,
        OPT_DEBUGINFO,
        OPT_RAW_DUMP,
        OPT_PYTHON,
        OPT_PYTHON_DEPTH,
        OPT_CUPTI_SOCKET,
        OPT_CUPTI,
        OPT_GPU_TIMEOUT,
        OPT_NO_GPU,
        OPT_FORMAT
    };
    static const struct option longopts[] = {
        {"pid", required_argument, NULL, 'p'},
        {"output", required_argument, NULL, 'o'},
        {"duration", required_argument, NULL, 'd'},
        {"no-wait", no_argument, NULL, OPT_NO_WAIT},
        {"ring-buffer-mb", required_argument, NULL, OPT_RING_MB},
        {"wakeup-kb", required_argument, NULL, OPT_WAKEUP_KB},
        {"unwind", required_argument, NULL, OPT_UNWIND},
        {"stack-bytes", required_argument, NULL, OPT_STACK_BYTES},
        {"inline", no_argument, NULL, OPT_INLINE},
        {"debuginfo-path", required_argument, NULL, OPT_DEBUGINFO},
        {"raw-dump", required_argument, NULL, OPT_RAW_DUMP},
        {"python", required_argument, NULL, OPT_PYTHON},
        {"python-depth", required_argument, NULL, OPT_PYTHON_DEPTH},
        {"cupti-socket", required_argument, NULL, OPT_CUPTI_SOCKET},
        {"cupti", no_argument, NULL, OPT_CUPTI},
        {"gpu-timeout-ms", required_argument, NULL, OPT_GPU_TIMEOUT},
        {"no-gpu", no_argument, NULL, OPT_NO_GPU},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;

    opt->ring_mb = 64; /* rides out reader stalls (first symbol loads) at 100k+ launches/s */
    opt->wakeup_kb = 256;
    opt->stack_bytes = DEFAULT_STACK_BYTES;
    opt->python_depth = DEFAULT_PYTHON_DEPTH;
    opt->cupti_socket = NP_WIRE_DEFAULT_SOCKET;
    opt->gpu_timeout_ms = DEFAULT_GPU_TIMEOUT_MS;
    opt->formats = NP_FORMATS_DEFAULT;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+p:o:d:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (parse_pids(optarg, opt) < 0)
                return -EINVAL;
            break;
        case 'o':
            free(opt->output_dir);
            opt->output_dir = strdup(optarg);
            break;
        case 'd':
            if (np_parse_seconds(optarg, &opt->duration_s) < 0 || opt->duration_s <= 0) {
                np_err("invalid --duration '%s': expected a positive number of seconds", optarg);
                return -EINVAL;
            }
            break;
        case OPT_NO_WAIT:
            opt->no_wait = true;
            break;
        case OPT_RING_MB:
            if (np_parse_long(optarg, 1, 1024, &opt->ring_mb) < 0 ||
                (opt->ring_mb & (opt->ring_mb - 1))) {
                np_err("invalid --ring-buffer-mb '%s': expected a power of two, 1-1024", optarg);
                return -EINVAL;
            }
            break;
        case OPT_WAKEUP_KB:
            if (np_parse_long(optarg, 0, 1 << 20, &opt->wakeup_kb) < 0) {
                np_err("invalid --wakeup-kb '%s'", optarg);
                return -EINVAL;
            }
            break;
        case OPT_UNWIND:
            if (strcmp(optarg, "auto") == 0)
                opt->unwind = UNWIND_AUTO;
            else if (strcmp(optarg, "dwarf") == 0)
                opt->unwind = UNWIND_DWARF;
            else if (strcmp(optarg, "fp") == 0)
                opt->unwind = UNWIND_FP;
            else {
                np_err("invalid --unwind '%s': expected auto, dwarf or fp", optarg);
                return -EINVAL;
            }
            break;
        case OPT_STACK_BYTES:
            if (np_parse_long(optarg, 512, NP_MAX_STACK_BYTES, &opt->stack_bytes) < 0) {
                np_err("invalid --stack-bytes '%s': expected 512 to %d", optarg,
                       NP_MAX_STACK_BYTES);
                return -EINVAL;
            }
            break;
        case OPT_INLINE:
            opt->inline_frames = true;
            break;
        case OPT_PYTHON:
            if (strcmp(optarg, "merge") == 0)
                opt->python = NP_PYTHON_MERGE;
            else if (strcmp(optarg, "raw") == 0)
                opt->python = NP_PYTHON_RAW;
            else if (strcmp(optarg, "off") == 0)
                opt->python = NP_PYTHON_OFF;
            else {
                np_err("invalid --python '%s': expected merge, raw or off", optarg);
                return -EINVAL;
            }
            break;
        case OPT_PYTHON_DEPTH:
            if (np_parse_long(optarg, 1, NP_PY_MAX_FRAMES, &opt->python_depth) < 0) {
                np_err("invalid --python-depth '%s': expected 1 to %d", optarg, NP_PY_MAX_FRAMES);
                return -EINVAL;
            }
            break;
        case OPT_CUPTI_SOCKET:
            if (!optarg[0] || strlen(optarg) >= 108) {
                np_err("invalid --cupti-socket '%s': expected a path shorter than 108 bytes",
                       optarg);
                return -EINVAL;
            }
            opt->cupti_socket = optarg;
            break;
        case OPT_CUPTI:
            opt->inject_cupti = true;
            break;
        case OPT_GPU_TIMEOUT:
            if (np_parse_long(optarg, 1, 3600 * 1000, &opt->gpu_timeout_ms) < 0) {
                np_err("invalid --gpu-timeout-ms '%s': expected 1 to 3600000", optarg);
                return -EINVAL;
            }
            break;
        case OPT_NO_GPU:
            opt->no_gpu = true;
            break;
        case OPT_RAW_DUMP:
            opt->raw_dump = optarg;
            break;
        case OPT_FORMAT: {
            char why[256];
            if (np_formats_parse(optarg, &opt->formats, why, sizeof(why)) < 0) {
                np_err("--format: %s", why);
                return -EINVAL;
            }
            break;
        }
        case OPT_DEBUGINFO:
            opt->debuginfo_path = optarg;
            np_symbolizer_set_debuginfo_path(optarg);
            break;
        case 'v':
            np_log_set_level(NP_LOG_DEBUG);
            opt->verbose = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind < argc)
        opt->command = &argv[optind];
    if (!opt->npids && !opt->command) {
        np_err("nothing to record: give --pid PID or -- CMD");
        usage(stderr);
        return -EINVAL;
    }
    if (opt->npids && opt->command) {
        np_err("give either --pid or -- CMD, not both");
        return -EINVAL;
    }
    if (opt->inject_cupti && (!opt->command || opt->no_gpu)) {
        np_err("--cupti needs -- CMD (a running process cannot be injected) and no --no-gpu");
        return -EINVAL;
    }
    return 0;
}

char *np_default_output_dir(void) {
    char name[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(name, sizeof(name), "ncclprobe-%Y%m%d-%H%M%S", &tm);
    struct stat st;
    for (int i = 2; stat(name, &st) == 0 && i < 1000; i++) {
        size_t base = strlen("ncclprobe-YYYYmmdd-HHMMSS");
        snprintf(name + base, sizeof(name) - base, "-%d", i);
    }
    return strdup(name);
}
