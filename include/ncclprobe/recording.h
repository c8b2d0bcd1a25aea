/* recording.h - the one definition of a recording directory, what `record`
 * and the daemon write and what report, convert, pprof, the trace.json and
 * flame graph writers read (docs/output-formats.md is its prose): the file
 * names, the synthetic frames and leaf prefixes of the stacks, and the JSON
 * keys and values the readers depend on. Writers and readers spell these
 * names only through this header, so a renamed file or key is one edit. */
#ifndef NCCLPROBE_RECORDING_H
#define NCCLPROBE_RECORDING_H

/* ---- files of a recording directory ---------------------------------------- */

#define NP_REC_STACKS_EXT_FOLDED "stacks.ext.folded"       /* one line per launch */
#define NP_REC_LAUNCHES_FOLDED "launches.folded"           /* stacks counted */
#define NP_REC_LAUNCHES_JSONL "launches.jsonl"             /* every launch, GPU records */
#define NP_REC_NCCL_JSONL "nccl.jsonl"                     /* every NCCL API call */
#define NP_REC_STACKS_JSONL "stacks.jsonl"                 /* stack_id -> frames, locations */
#define NP_REC_MERGED_FOLDED "merged.folded"               /* stacks with GPU leaves, counted */
#define NP_REC_MERGED_GPU_NS_FOLDED "merged.gpu_ns.folded" /* ... weighted by GPU ns */
#define NP_REC_GPU_UNMATCHED_JSONL "gpu_unmatched.jsonl"   /* GPU records no launch claimed */
#define NP_REC_GRAPH_REPLAYS_JSONL "graph_replays.jsonl"   /* replayed kernels by capture site */
#define NP_REC_SUMMARY_JSON "summary.json"                 /* a recording's totals */
#define NP_REC_WINDOW_JSON "window.json"                   /* a daemon output set's window */
/* --nccl-flows (docs/nccl.md, "Flows"): in NP_REC_FLOWS_DIR/comm_<commHash>/, per rank R */
#define NP_REC_FLOWS_DIR "flows"
#define NP_REC_FLOWS_COMM_PREFIX "comm_"
#define NP_REC_PROXY_FLOW_PREFIX "proxy_flow_rank" /* R.jsonl: one proxy op per line */
#define NP_REC_FLOW_STEPS_PREFIX "flow_steps_rank" /* R.jsonl: one step per line */
#define NP_REC_FLOW_RANK_PREFIX "flow_rank"        /* R.json: meta + steps */
#define NP_REC_TOPOLOGY_PREFIX "topology_"         /* <commHash>_rankR.json, in flows/ */
/* Derived outputs (`ncclprobe convert`, --format). */
#define NP_REC_PROFILE_PB_GZ "profile.pb.gz"
#define NP_REC_TRACE_JSON "trace.json"
#define NP_REC_FLAMEGRAPH_SVG "flamegraph.svg"
#define NP_REC_FLAMEGRAPH_GPU_NS_SVG "flamegraph.gpu_ns.svg"
/* Marks a directory the daemon made for an output set (retention deletes only these). */
#define NP_REC_SET_MARKER ".ncclprobe-set"
/* Room held for the aggregates while the per-launch files grow (a full disk). */
#define NP_REC_RESERVE ".ncclprobe-reserve"

/* ---- frames -------------------------------------------------------------------- */

/* Leaves: the GPU work of a launch. A kernel or copy leaf is the prefix and a
 * name ("[GPU_Kernel]vector_add", "[GPU_Memcpy]HtoD"); the others stand alone. */
#define NP_LEAF_GPU_PREFIX "[GPU_" /* any GPU leaf; "[GPU_TYPE]" for other record types */
#define NP_LEAF_KERNEL "[GPU_Kernel]"
#define NP_LEAF_MEMCPY "[GPU_Memcpy]"
#define NP_LEAF_MEMSET "[GPU_Memset]"
#define NP_LEAF_PENDING "[GPU_Launch_Pending]" /* no GPU record within --gpu-timeout-ms */

/* Synthetic frames. */
#define NP_FRAME_NCCL_PREFIX "[NCCL]"                /* "[NCCL]AllReduce", "[NCCL]Send+Recv" */
#define NP_FRAME_NCCL_OP_SEPARATOR '+'               /* between the op types of one launch */
#define NP_FRAME_NO_LAUNCH_STACK "[no launch stack]" /* root of GPU work without a launch */
#define NP_FRAME_TRUNCATED "[truncated]"             /* first frame: the stack copy ran out */
#define NP_FRAME_UNKNOWN "[unknown]"                 /* no module, or could not unwind further */
#define NP_FRAME_PY_TRUNCATED "[python truncated]"   /* more Python frames than --python-depth */
#define NP_FRAME_PY_CODE_PREFIX "[python code 0x"    /* a code object that was gone: "...0x7f..]" */
#define NP_FRAME_INLINED_SUFFIX " [inlined]"     /* "f [inlined]": inlined into the frame before */
#define NP_FRAME_SEPARATOR ';'                   /* between the frames of a folded stack */
#define NP_FRAME_GRAPH_CAPTURE "[graph capture]" /* replay stack;API;[graph capture];capture */

/* Kernel names made up where none is known (the text after NP_LEAF_KERNEL). */
#define NP_KERNEL_GRAPH_PREFIX "<graph "       /* "<graph cudaGraphLaunch>" */
#define NP_KERNEL_UNNAMED_PREFIX "<unnamed 0x" /* "<unnamed 0x7f...>": handle made earlier */
#define NP_KERNEL_NCCL_UNKNOWN "<nccl kernel>" /* an ncclLaunchKernel without a readable plan */
#define NP_KERNEL_NCCL_CE "<nccl copy engine>" /* an ncclLaunchCeColl launch */
#define NP_KERNEL_NCCL_RMA "<nccl rma>"        /* an ncclLaunchRma plan (no kernel) */

/* ---- JSON keys the readers use ------------------------------------------------------ */

/* launches.jsonl */
#define NP_KEY_TS_NS "ts_ns"
#define NP_KEY_PID "pid"
#define NP_KEY_TID "tid"
#define NP_KEY_LAUNCH_ID "launch_id" /* the probe hit's number (launches, nccl.jsonl, flows) */
#define NP_KEY_COMM "comm"           /* the thread's name (in nccl.jsonl: the communicator) */
#define NP_KEY_API "api"
#define NP_KEY_KERNEL "kernel"
#define NP_KEY_STACK_ID "stack_id"
#define NP_KEY_NESTED "nested"
#define NP_KEY_CAPTURED "captured"           /* a launch into a graph being captured: ran nothing */
#define NP_KEY_GRAPH_NODES "graph_nodes"     /* a graph launch: the kernels its replay counted */
#define NP_KEY_GRAPH_UNKNOWN "graph_unknown" /* ... or why its kernels are not known */
/* graph_replays.jsonl: {pid, stack_id (replay;API;[graph capture];capture), replay_stack_id,
 * kernel, count} */
#define NP_KEY_REPLAY_STACK_ID "replay_stack_id"
#define NP_KEY_COUNT "count"
#define NP_KEY_GPU "gpu" /* the launch's GPU records */
#define NP_KEY_GPU_STATUS "gpu_status"
#define NP_GPU_STATUS_MATCHED "matched"
#define NP_GPU_STATUS_PENDING "pending"
#define NP_GPU_STATUS_NONE "none"
#define NP_KEY_NCCL "nccl" /* an NCCL kernel launch's communicator and plan */
#define NP_KEY_NCCL_OPS "ops"
#define NP_KEY_NCCL_OP "op"
#define NP_KEY_COMM_HASH "comm_hash"

/* GPU records ("gpu" of launches.jsonl, lines of gpu_unmatched.jsonl) */
#define NP_KEY_GPU_TYPE "type"
#define NP_GPU_TYPE_KERNEL "kernel"
#define NP_GPU_TYPE_MEMCPY "memcpy"
#define NP_GPU_TYPE_MEMSET "memset"
#define NP_KEY_GPU_NAME "name"       /* kernels */
#define NP_KEY_COPY_KIND "copy_kind" /* memcpys: "HtoD", ... */
#define NP_KEY_START_NS "start_ns"
#define NP_KEY_END_NS "end_ns"
#define NP_KEY_DEVICE "device"
#define NP_KEY_CONTEXT "context"
#define NP_KEY_STREAM "stream"
#define NP_KEY_GRAPH_ID "graph_id"
#define NP_KEY_GRAPH_NODE_ID "graph_node_id"
/* A record of a CUDA graph replay whose capture-time launch is known: the
 * stacks.jsonl id of "replay stack;API;[graph capture];capture frames" (the
 * stack the record is counted under in merged*.folded), and how the record
 * was tied to its node: */
#define NP_KEY_CAPTURE_STACK_ID "capture_stack_id"
#define NP_KEY_CAPTURE_BY "capture_by"
#define NP_CAPTURE_BY_NODE "node"          /* CUPTI's graphNodeId: exact */
#define NP_CAPTURE_BY_ORDER "kernel_order" /* no node ids: kernel name, in capture order */

/* nccl.jsonl (also NP_KEY_TS_NS, _PID, _TID, _STACK_ID, _NCCL_OP) */
#define NP_KEY_THREAD "thread"

/* stacks.jsonl */
#define NP_KEY_FRAMES "frames"
#define NP_KEY_LOCATIONS "locations"
#define NP_KEY_MODULE "module"
#define NP_KEY_BUILD_ID "build_id"
#define NP_KEY_OFFSET "offset" /* hex string: the pc relative to the module's load address */
#define NP_KEY_FILE "file"
#define NP_KEY_LINE "line"

/* summary.json */
#define NP_KEY_START_TIME_UNIX_NS "start_time_unix_ns"
#define NP_KEY_DURATION_S "duration_s"
#define NP_KEY_TARGETS "targets" /* [{pid, comm, ...}] */
#define NP_KEY_FILES "files"
#define NP_KEY_PER_LAUNCH_COMPLETE "per_launch_complete"
#define NP_KEY_RECORDS_WRITTEN "records_written"
#define NP_KEY_RECORDS_CUT "records_cut"
#define NP_KEY_CUT_REASON "cut_reason"

/* window.json */
#define NP_KEY_WINDOW "window"
#define NP_KEY_START_UNIX_NS "start_unix_ns"
#define NP_KEY_END_UNIX_NS "end_unix_ns"
#define NP_KEY_PROCESS "process" /* {pid, comm} */

#endif
