/* cupti_api.h - the CUPTI functions libncclprobe_cupti.so uses, resolved
 * with dlopen/dlsym at run time instead of linked: a process whose CUPTI
 * cannot be found keeps running (we log one line and stay out), and the
 * library can be pointed at another CUPTI (NCCLPROBE_CUPTI_LIBRARY). */
#ifndef NP_CUPTI_API_H
#define NP_CUPTI_API_H

#include <stddef.h>

#include <cupti.h>

struct np_cupti_api {
    void *handle;
    char path[512];
    CUptiResult (*GetResultString)(CUptiResult, const char **);
    CUptiResult (*GetVersion)(uint32_t *);
    CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*Subscribe_v2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                                CUpti_SubscriberParams *);
    CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                  CUpti_CallbackId);
    CUptiResult (*ActivityRegisterTimestampCallback)(CUpti_TimestampCallbackFunc);
    CUptiResult (*SetThreadIdType)(CUpti_ActivityThreadIdType);
    CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                             CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
    CUptiResult (*ActivityEnableRuntimeApi)(CUpti_CallbackId, uint8_t);
    CUptiResult (*ActivityEnableDriverApi)(CUpti_CallbackId, uint8_t);
    CUptiResult (*ActivityFlushAll)(uint32_t);
    CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
};

/* Loads CUPTI: a libcupti the process already has, else $NCCLPROBE_CUPTI_LIBRARY,
 * else libcupti.so.13 on the loader's path, beside the process's libcudart,
 * or in the toolkit. 0, or -ENOENT / -ENOSYS with `why` filled in. */
int np_cupti_api_load(struct np_cupti_api *api, char *why, size_t why_size);

/* CUPTI's name for a result code ("CUPTI_ERROR_...") or "error N". */
const char *np_cupti_result(const struct np_cupti_api *api, CUptiResult res, char *buf,
                            size_t size);

#endif
