/* frames.h - what `ncclprobe report` reads out of a frame's text
 * (docs/output-formats.md): the function part of native, inlined and Python
 * frames, a frame without its line number, --function names and the op
 * types of an `[NCCL]Send+Recv` frame. */
#ifndef NP_REPORT_FRAMES_H
#define NP_REPORT_FRAMES_H

#include <stdbool.h>
#include <stddef.h>

#define NP_NCCL_FRAME_PREFIX "[NCCL]"

/* Bytes of the function part: the text before a Python frame's " (file:LINE)"
 * or before " [inlined]"; the whole text for other frames. */
size_t np_frame_func_len(const char *frame);

/* Bytes of the frame without a Python frame's line: "f (m.py:40)" -> "f (m.py".
 * Two frames of one function call whose line moved have the same key. */
size_t np_frame_key_len(const char *frame);

/* Whether the frames name the same call (same text but for the line). */
bool np_frame_same_call(const char *a, const char *b);

/* Whether --function NAME names this frame: its function part is NAME, or,
 * for a Python frame, the last dotted component of its qualname is. */
bool np_frame_matches(const char *frame, const char *name);

/* Whether frame is "[NCCL]A+B+..." with op among A, B, ... (any case). */
bool np_nccl_frame_has_op(const char *frame, const char *op);

/* Whether needle occurs in hay, ignoring ASCII case. */
bool np_contains_nocase(const char *hay, const char *needle);

#endif
