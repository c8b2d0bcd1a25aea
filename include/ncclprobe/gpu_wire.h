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
 *
 * NAMES frames carry `count` variable-size np_wire_name: the kernel name of
 * a launch handle (CUfunction, CUkernel, a runtime launch's func) the
 * library saw for the first time on this connection. A handle's NAMES entry
 * is sent before the ACTIVITY records of the launch that made it known
 * (one stream, in order), so ncclprobe can name launches of handles it
 * never saw being created (a process it attached to late). A thread that
 * launched the handle while another was naming it sends its own entry,
 * the same name again, before its own records.
 *
 * A connection ncclprobe hands to a library it loaded or woke in a running
 * process (ncclprobe_cupti_attach) starts the other way: the library says
 * nothing, and leaves CUPTI as it is, until ncclprobe sends it the one
 * byte NP_WIRE_START - once ncclprobe has probed the library's marker and
 * can take its records (a launch marked before that would lose its GPU
 * records). From then on the stream is as above, HELLO first; ncclprobe
 * sends nothing more. A connection the library makes itself (its socket
 * path) needs no START.
 *
 * A CUPTI frame (struct np_wire_cupti) follows every HELLO once the
 * library tried to turn CUPTI on: which libcupti it loaded and why that
 * one, its version, whose record layouts it reads (CUPTI's activity
 * records change with every CUDA release) and what it cannot do with it.
 *
 * GRAPH_NODES frames carry `count` struct np_wire_graph_node: CUDA graph
 * nodes as CUPTI announces them (resource callbacks GRAPHNODE_CREATED and
 * GRAPHNODE_CLONED). A node made by stream capture is created inside the
 * captured launch's API call, so its entry names that call's correlation
 * id - the id whose marker ncclprobe paired with the captured launch and its
 * stack. Instantiating a graph clones its nodes into the executable graph;
 * a replay's kernel records carry the clone's id (graphNodeId). Following
 * clone -> original -> creating call ties every replayed kernel to the line
 * that captured it, exactly. Entries are sent on the creating (cloning)
 * thread, at the callback, so they come before any record of a replay.
 *
 * Version 1 grew NAMES, CUPTI, GRAPH_NODES and the HELLO's origin (formerly padding, so
 * an older library says 0, "loaded at start") without changing the
 * version: the library and ncclprobe ship together, and an older ncclprobe
 * would refuse a NAMES or CUPTI frame as a bad type.
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
#define NP_WIRE_START 'S' /* ncclprobe -> library, once, on a connection handed over */

enum np_wire_type {
    NP_WIRE_HELLO = 1,       /* struct np_wire_hello */
    NP_WIRE_ACTIVITY = 2,    /* struct np_wire_activity + records */
    NP_WIRE_STATS = 3,       /* struct np_wire_stats: totals so far */
    NP_WIRE_NAMES = 4,       /* struct np_wire_names + entries */
    NP_WIRE_CUPTI = 5,       /* struct np_wire_cupti: the CUPTI in use */
    NP_WIRE_GRAPH_NODES = 6, /* struct np_wire_graph_nodes + entries */
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
    NP_HELLO_NO_DRIVER = 3,    /* no usable CUDA driver: CUPTI was not called at all */
    NP_HELLO_UNSUPPORTED = 4,  /* a CUPTI whose record layouts the library does not know */
};

/* How the library came into the process. Other values: unknown. */
enum np_hello_origin {
    NP_ORIGIN_START = 0,    /* CUDA_INJECTION64_PATH: loaded by CUDA at cuInit */
    NP_ORIGIN_INJECTED = 1, /* loaded into the running process (ncclprobe_cupti_attach) */
};

struct np_wire_hello {
    struct np_wire_header hdr;
    uint32_t status;        /* enum np_hello_status */
    uint32_t origin;        /* enum np_hello_origin (was padding: older libraries send 0) */
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
    uint64_t records_unknown;    /* CUPTI records not forwarded: kinds not read, API records
                                  * of a callback id that is no launch API of this CUPTI */
};

/* Whose record layouts the library reads (struct np_wire_cupti.support). */
enum np_cupti_support {
    NP_CUPTI_KNOWN = 0,       /* that CUPTI version's own, from its headers */
    NP_CUPTI_ASSUMED = 1,     /* an unknown version: an older one's, its record sizes checked */
    NP_CUPTI_UNSUPPORTED = 2, /* none: the version is not known and cannot be assumed */
    NP_CUPTI_NOT_ASKED = 3,   /* CUPTI loaded but not called: no CUDA driver */
    NP_CUPTI_NOT_LOADED = 4,  /* no libcupti could be loaded */
};

/* The records whose layouts the library reads, in np_wire_cupti's arrays. */
enum np_cupti_record {
    NP_CUPTI_REC_KERNEL, /* KERNEL and CONCURRENT_KERNEL */
    NP_CUPTI_REC_MEMCPY,
    NP_CUPTI_REC_MEMSET,
    NP_CUPTI_REC_API, /* RUNTIME and DRIVER */
    NP_CUPTI_RECORDS
};

#define NP_WIRE_CUPTI_TEXT 64

/* The CUPTI the library uses (after every HELLO, once it tried CUPTI). The
 * strings are NUL-terminated. */
struct np_wire_cupti {
    struct np_wire_header hdr;
    uint32_t support;                       /* enum np_cupti_support */
    uint32_t api_version;                   /* cuptiGetVersion (0: not asked, or it failed) */
    uint32_t layouts_version;               /* the API version whose layouts are read (0: none) */
    int32_t driver_version;                 /* cuDriverGetVersion (0: no usable driver) */
    uint32_t record_size[NP_CUPTI_RECORDS]; /* bytes of each record: fields beyond are absent */
    uint32_t size_confirmed; /* bit per record: cuptiActivityGetStructSize said its size */
    uint32_t pad;
    char cuda[16];                          /* "12.4": the CUDA release of layouts_version */
    char path[256];                         /* the libcupti loaded (or the last one tried) */
    char chosen_by[NP_WIRE_CUPTI_TEXT];     /* why that one ("already loaded", ...) */
    char record_type[NP_CUPTI_RECORDS][32]; /* "CUpti_ActivityKernel9", ... */
    char degraded[768];                     /* what is lost and why, one item a line; "" nothing */
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

struct np_wire_names {
    struct np_wire_header hdr;
    uint32_t count; /* entries that follow */
    uint32_t pad;
};

/* One entry of a NAMES frame, 8-byte aligned; its size is
 * np_wire_name_size(name_len). */
struct np_wire_name {
    uint64_t handle;   /* the launch's function handle as the process sees it (never 0) */
    uint16_t name_len; /* bytes of name[] (no NUL), 1..NP_WIRE_MAX_NAME */
    uint16_t pad[3];
    char name[];
};

#define NP_WIRE_NAME_FIXED ((uint32_t)sizeof(struct np_wire_name))

struct np_wire_graph_nodes {
    struct np_wire_header hdr;
    uint32_t count; /* entries that follow */
    uint32_t pad;
};

enum np_graph_node_event {
    NP_GRAPH_NODE_CREATED = 1, /* GRAPHNODE_CREATED: by capture, or cuGraphAdd*Node */
    NP_GRAPH_NODE_CLONED = 2,  /* GRAPHNODE_CLONED: instantiation, graph cloning */
};

/* One entry of a GRAPH_NODES frame (fixed size). */
struct np_wire_graph_node {
    uint64_t node_id;          /* cuptiGetGraphNodeId: what replayed records' graph_node_id say */
    uint64_t original_node_id; /* CLONED: the node it is a copy of; CREATED: 0 */
    uint32_t correlation_id;   /* CREATED: the launch API call in progress on the creating
                                * thread (the outermost), 0: none (a node added explicitly) */
    uint32_t graph_id;         /* cuptiGetGraphId of the graph holding the node (0: unknown) */
    uint32_t event;            /* enum np_graph_node_event */
    uint32_t node_type;        /* CUgraphNodeType (0: kernel) */
};

/* ACTIVITY, NAMES and GRAPH_NODES frames share their head (header, count, pad). */
_Static_assert(sizeof(struct np_wire_names) == sizeof(struct np_wire_activity) &&
                   __builtin_offsetof(struct np_wire_names, count) ==
                       __builtin_offsetof(struct np_wire_activity, count) &&
                   sizeof(struct np_wire_graph_nodes) == sizeof(struct np_wire_activity) &&
                   __builtin_offsetof(struct np_wire_graph_nodes, count) ==
                       __builtin_offsetof(struct np_wire_activity, count),
               "ACTIVITY, NAMES and GRAPH_NODES frames have one head");
_Static_assert(sizeof(struct np_wire_graph_node) == 32, "a graph node entry is 32 bytes");

/* A memcpy record's copy_kind as CUPTI names it ("HtoD", ...). */
static inline const char *np_gpu_copy_kind_name(uint8_t kind) {
    static const char *const names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "Unknown";
}

static inline uint32_t np_gpu_record_size(uint32_t name_len) {
    return (NP_GPU_RECORD_FIXED + name_len + 7u) & ~7u;
}

static inline uint32_t np_wire_name_size(uint32_t name_len) {
    return (NP_WIRE_NAME_FIXED + name_len + 7u) & ~7u;
}

#endif /* NCCLPROBE_GPU_WIRE_H */
