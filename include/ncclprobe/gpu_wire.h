/* gpu_wire.h - the records libncclprobe_cupti.so (src/cupti/) sends to
 * ncclprobe (record or the daemon) over its Unix socket: GPU activity
 * (kernels, memcpys, memsets) in a compact form of our own, so ncclprobe
 * needs no CUPTI headers and never trusts a CUPTI struct layout from a
 * client.
 *
 * The stream is a sequence of frames. Every frame starts with struct
 * np_wire_header; `size` counts the whole frame. The first frame of a
 * connection is a HELLO; ncclprobe checks its pid against the socket's
 * peer credentials. ACTIVITY frames carry `count` variable-size
 * np_gpu_record, each 8-byte aligned and carrying its own size. The
 * correlation id joins a record to the launch on the CPU side: the library
 * hands the same id to ncclprobe_cupti_marker() on the launching thread,
 * which ncclprobe uprobes (struct np_marker_event in events.h).
 */
#ifndef NCCLPROBE_GPU_WIRE_H
#define NCCLPROBE_GPU_WIRE_H

#include <stdint.h>

#define NP_WIRE_MAGIC 0x5543504eu /* "NPCU" little-endian */
#define NP_WIRE_VERSION 1
#define NP_WIRE_MAX_FRAME (1u << 20) /* larger frames are rejected */
#define NP_WIRE_MAX_NAME 4096        /* kernel names are cut here */
#define NP_WIRE_DEFAULT_SOCKET "/run/ncclprobe/cupti.sock"
#define NP_WIRE_SOCKET_ENV "NCCLPROBE_CUPTI_SOCKET"
#define NP_MARKER_SYMBOL "ncclprobe_cupti_marker"

enum np_wire_type {
    NP_WIRE_HELLO = 1,    /* struct np_wire_hello */
    NP_WIRE_ACTIVITY = 2, /* struct np_wire_activity + records */
    NP_WIRE_STATS = 3,    /* struct np_wire_stats: totals so far */
};

struct np_wire_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type; /* enum np_wire_type */
    uint32_t size; /* bytes of the frame, header included */
    uint32_t pid;  /* the sender's pid as it sees itself (getpid()) */
};

enum np_hello_status {
    NP_HELLO_ACTIVE = 0,       /* CUPTI subscribed, activity enabled */
    NP_HELLO_CUPTI_BUSY = 1,   /* another CUPTI subscriber (profiler) holds CUPTI */
    NP_HELLO_CUPTI_FAILED = 2, /* libcupti missing or a CUPTI call failed */
};

struct np_wire_hello {
    struct np_wire_header hdr;
    uint32_t status; /* enum np_hello_status */
    uint32_t pad;
    uint64_t clock_mono_ns; /* CLOCK_MONOTONIC when sent, in the sender's time namespace */
    char message[256];      /* NUL-terminated: why not active, or the CUPTI library path */
};

struct np_wire_stats {
    struct np_wire_header hdr;
    uint64_t records_sent;       /* records handed to the socket so far */
    uint64_t dropped_by_cupti;   /* cuptiActivityGetNumDroppedRecords, summed */
    uint64_t dropped_queue_full; /* records dropped: the daemon did not keep up */
    uint64_t dropped_no_daemon;  /* records dropped while no daemon was connected */
    uint64_t dropped_no_buffer;  /* buffer requests refused (memory cap) */
    uint64_t records_unknown;    /* CUPTI records of kinds we do not forward */
};

enum np_gpu_kind {
    NP_GPU_KERNEL = 1,
    NP_GPU_MEMCPY = 2,
    NP_GPU_MEMSET = 3,
    NP_GPU_API_RUNTIME = 4, /* a launch API call as CUPTI timed it (file mode only) */
    NP_GPU_API_DRIVER = 5,
};

struct np_wire_activity {
    struct np_wire_header hdr;
    uint32_t count; /* records that follow */
    uint32_t pad;
};

struct np_gpu_record {
    uint16_t size;     /* bytes of this record, name included, multiple of 8 */
    uint8_t kind;      /* enum np_gpu_kind */
    uint8_t copy_kind; /* memcpy: CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH, 8 DtoD, ...) */
    uint32_t correlation_id;
    uint64_t start_ns; /* CLOCK_MONOTONIC (0: CUPTI could not time it) */
    uint64_t end_ns;
    uint32_t device;
    uint32_t context;
    uint32_t stream;
    uint32_t graph_id; /* 0: not launched from a graph */
    uint64_t graph_node_id;
    uint64_t bytes;   /* memcpy / memset */
    uint32_t grid[3]; /* kernels */
    uint32_t block[3];
    uint32_t cbid;      /* API records: the callback id */
    uint32_t thread_id; /* API records: the calling thread (gettid() in its namespace) */
    uint16_t name_len;  /* bytes of name[] (no NUL): kernel or API name */
    uint16_t pad[3];
    char name[];
};

#define NP_GPU_RECORD_FIXED ((uint32_t)sizeof(struct np_gpu_record))

/* A memcpy record's copy_kind as CUPTI names it ("HtoD", ...). */
static inline const char *np_gpu_copy_kind_name(uint8_t kind) {
    static const char *const names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "Unknown";
}

static inline uint32_t np_gpu_record_size(uint32_t name_len) {
    return (NP_GPU_RECORD_FIXED + name_len + 7u) & ~7u;
}

#endif /* NCCLPROBE_GPU_WIRE_H */
