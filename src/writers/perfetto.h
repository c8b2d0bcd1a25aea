/* perfetto.h - trace.json: a recording directory as a Chrome Trace Event
 * Format file, the JSON that ui.perfetto.dev and chrome://tracing load.
 *
 *   - each process's threads with their launches: an "X" slice per outermost
 *     launch (named by its API, e.g. cudaLaunchKernel), an instant "i" per
 *     nested launch and per NCCL API call (nccl.jsonl), args holding what
 *     launches.jsonl / nccl.jsonl say (kernel, grid, block, stream, nccl
 *     plan...) and the stack (frames root first);
 *   - one process per GPU ("GPU 0") with a thread per CUDA stream
 *     ("stream 7"), an "X" slice per kernel, memcpy and memset with its real
 *     start and end, GPU records no launch claimed included (no arrow);
 *   - a flow arrow from each launch to each of its GPU records (a CUDA graph
 *     launch: one arrow per kernel or copy of the replay).
 *
 * Times: "ts" is CLOCK_MONOTONIC (the clock of ts_ns and of the GPU records)
 * in microseconds with three decimals: the exact nanosecond, so traces of
 * one host line up (the viewers show time from the first event). The probes
 * see a call's entry only, so a launch slice lasts a nominal 1 µs (shorter
 * when another launch of the thread starts within it, so slices nest and
 * never overlap, which Perfetto would reject); its flow starts at its entry.
 * GPU records that overlap on one stream (programmatic dependent launch,
 * concurrent graph branches) go to extra tracks "stream 7 (lane 2)".
 *
 * The file is written as it is read, in one pass: memory holds the stacks
 * (stacks.jsonl), one launch line, and a few words per thread and stream. */
#ifndef NP_PERFETTO_H
#define NP_PERFETTO_H

/* Writes DIR/trace.json (through DIR/trace.json.tmp, renamed when complete)
 * from DIR/launches.jsonl and, when present, stacks.jsonl, nccl.jsonl,
 * gpu_unmatched.jsonl and summary.json or window.json (process names).
 * Malformed lines are skipped (the first few said, src/recording/) and
 * counted (a warning, and "skipped_lines" in the file). Returns 0, or -errno
 * (said). A directory with launches.folded but no launches.jsonl (a daemon
 * aggregate set: nothing in it has a time) is skipped (a debug message): 0. */
int np_write_trace_json(const char *dir);

#endif
