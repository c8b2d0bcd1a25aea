/* frames.h - what is read out of a frame's text (docs/output-formats.md),
 * by `ncclprobe report` and the writers: Python frames' parts, the function
 * part of native, inlined and Python frames, a frame without its line
 * number, --function names and the op types of an `[NCCL]Send+Recv` frame. */
#ifndef NP_REPORT_FRAMES_H
#define NP_REPORT_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NP_NCCL_FRAME_PREFIX "[NCCL]"

/* "qualname (file:LINE)" or "qualname (file)" (len bytes): the qualname's
 * length, the file, and the line (0 when none); false for any other frame. */
bool np_frame_python(const char *text, size_t len, size_t *qual_len, const char **file,
                     size_t *file_len, int64_t *line);

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
