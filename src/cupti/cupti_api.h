/* cupti_api.h - the CUPTI functions libncclprobe_cupti.so uses, resolved
 * with dlopen/dlsym at run time instead of linked: a process whose CUPTI
 * cannot be found keeps running (we log one line and stay out), the library
 * can be pointed at another CUPTI (NCCLPROBE_CUPTI_LIBRARY), and one build
 * serves CUPTI 12.x (libcupti.so.12) and 13.x (libcupti.so.13). Functions
 * some versions lack are optional: NULL, and what that costs is said. The
 * signatures are the CUDA 13.0 headers'; the ones used are the same in
 * every version from 12.4 on. */
#ifndef NP_CUPTI_API_H
#define NP_CUPTI_API_H

#include <stddef.h>

#include <cupti.h>

struct np_cupti_api {
    void *handle;
    char path[256];     /* the library loaded, or the last one tried */
    char chosen_by[64]; /* why that one: "already loaded", "NCCLPROBE_CUPTI_LIBRARY", ... */
    int cudart_major;   /* the process's libcudart (12, 13), 0: none found */
    CUptiResult (*GetResultString)(CUptiResult, const char **);
    CUptiResult (*GetVersion)(uint32_t *);
    CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                  CUpti_CallbackId);
    CUptiResult (*ActivityRegisterTimestampCallback)(CUpti_TimestampCallbackFunc);
    CUptiResult (*SetThreadIdType)(CUpti_ActivityThreadIdType);
    CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                             CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
    CUptiResult (*ActivityFlushAll)(uint32_t);
    CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
    /* optional: 13.0+ (names the subscriber that holds CUPTI when we cannot) */
    CUptiResult (*Subscribe_v2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                                CUpti_SubscriberParams *);
    /* optional: 12.6+ (API records for the trace file) */
    CUptiResult (*ActivityEnableRuntimeApi)(CUpti_CallbackId, uint8_t);
    CUptiResult (*ActivityEnableDriverApi)(CUpti_CallbackId, uint8_t);
    /* optional: 13.2+ (a record's size as this CUPTI writes it; version 0: its own) */
    CUptiResult (*ActivityGetStructSize)(CUpti_ActivityKind, uint32_t, size_t *);
    /* optional (every CUPTI we serve has them; a stand-in may not): the ids
     * that replayed records' graphNodeId/graphId carry (graph_nodes.c) */
    CUptiResult (*GetGraphNodeId)(CUgraphNode, uint64_t *);
    CUptiResult (*GetGraphId)(CUgraph, uint32_t *);
};

/* Loads CUPTI, the first of:
 *   - a libcupti the process already has (libcupti.so.13 or .so.12; the
 *     major of its libcudart first): two CUPTIs in one process would fight
 *     over the driver;
 *   - $NCCLPROBE_CUPTI_LIBRARY (asked for: no other);
 *   - the major of the process's libcudart (its SONAME, libcudart.so.N):
 *     libcupti.so.N beside it (the same directory: a toolkit's lib64, pip's
 *     nvidia/cu13/lib; pip's nvidia/cuda_cupti/lib for cu12; the toolkit's
 *     extras/CUPTI/lib64), on the loader's path, then in the toolkit; a
 *     CUPTI of another major is not tried;
 *   - without a libcudart: libcupti.so.13, then .so.12, by name and in the
 *     toolkit.
 * Resolves what every version has. 0, or -ENOENT / -ENOSYS with `why`
 * filled in. Calls nothing in CUPTI. */
int np_cupti_api_load(struct np_cupti_api *api, char *why, size_t why_size);

/* CUPTI's name for a result code ("CUPTI_ERROR_...") or "error N". */
const char *np_cupti_result(const struct np_cupti_api *api, CUptiResult res, char *buf,
                            size_t size);

/* What the optional functions this CUPTI lacks cost, one line each, into
 * out ("" when none is missing). */
void np_cupti_api_missing(const struct np_cupti_api *api, char *out, size_t size);

#endif
