/* frames.h - what is read out of a frame's text (docs/output-formats.md,
 * "Frames"), for the report and the writers: its kind, a Python frame's
 * parts, the function part of native, inlined and Python frames, a frame
 * without its line number, --function names, the op types of an
 * `[NCCL]Send+Recv` frame and the capture site of a CUDA graph replay's
 * stack. The spellings are include/ncclprobe/recording.h's. */
#ifndef NP_RECORDING_FRAMES_H
#define NP_RECORDING_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum np_frame_kind {
    NP_FRAME_KIND_NATIVE,
    NP_FRAME_KIND_INLINED,   /* "f [inlined]" */
    NP_FRAME_KIND_PYTHON,    /* "qualname (file:LINE)" */
    NP_FRAME_KIND_NCCL,      /* "[NCCL]AllReduce" */
    NP_FRAME_KIND_GPU,       /* a GPU leaf: "[GPU_Kernel]k", "[GPU_Launch_Pending]", ... */
    NP_FRAME_KIND_SYNTHETIC, /* "[unknown]", "[lib.so+0x1f2]", "[truncated]", ... */
    NP_FRAME_KIND_COUNT
};

enum np_frame_kind np_frame_kind(const char *frame);

/* "qualname (file:LINE)" or "qualname (file)" (len bytes): the qualname's
 * length, the file, and the line (0 when none); false for any other frame. */
bool np_frame_python(const char *text, size_t len, size_t *qual_len, const char **file,
                     size_t *file_len, int64_t *line);

/* Whether the len bytes at text are "f [inlined]". */
bool np_frame_inlined(const char *text, size_t len);

/* Whether the frames name the same call (same text but for the line). */
bool np_frame_same_call(const char *a, const char *b);

/* Whether --function NAME names this frame: its function part is NAME, or,
 * for a Python frame, the last dotted component of its qualname is. */
bool np_frame_matches(const char *frame, const char *name);

/* The op types of an "[NCCL]A+B" frame ("A+B"), NULL for any other frame. */
const char *np_frame_nccl_ops(const char *frame);

/* The last "[NCCL]..." frame of a stack, or NULL. */
const char *np_frames_last_nccl(const char *const *frames, size_t n);

/* Whether frame is "[NCCL]A+B+..." with op among A, B, ... (any case). */
bool np_frame_nccl_has_op(const char *frame, const char *op);

/* The line that captured the kernel of a graph replay, in its composed stack
 * "replay;API;[graph capture];capture frames": the innermost Python frame of
 * the capture part (the frames after [graph capture]), else the frame that
 * called the capture's launch API (its last frame but [NCCL] ones). NULL when
 * the stack has no [graph capture] frame, or its capture part is the launch
 * API frame alone (the caller is then one of the replay's frames, not told
 * which). */
const char *np_frames_capture_site(const char *const *frames, size_t n);

#endif
