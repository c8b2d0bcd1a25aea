/* names.h - late names: the kernel name of each launch handle, sent to
 * ncclprobe in a NAMES frame (gpu_wire.h) the first time the handle is
 * launched on a connection, so ncclprobe can name launches of handles it
 * never saw being created (names.c). */
#ifndef NP_CUPTI_NAMES_H
#define NP_CUPTI_NAMES_H

#include <stdint.h>

#include "cupti/launch_api.h"

/* Finds the driver's own name queries (cuFuncGetName, cuKernelGetName;
 * CUDA 12.3+) in the libcuda the process has loaded. Once CUPTI goes on,
 * before any launch is seen; later calls do nothing. */
void np_names_init(void);

/* At a launch's ENTER callback, on the launching thread: if fn->handle was
 * not named on connection `connection` yet (np_sink_connection(), not 0),
 * queues its name - symbol_name (CUPTI's) when there is one, else the
 * driver's - before anything of this launch can be queued. Never blocks. */
void np_names_note(uint32_t connection, const struct np_launch_fn *fn, const char *symbol_name);

#endif
