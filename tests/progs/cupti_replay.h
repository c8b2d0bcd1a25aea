/* libcupti_replay.so: a TEST DOUBLE of NVIDIA's CUPTI (libcupti.so.13), for machines without a
 * GPU, where the CUDA driver never calls a CUPTI subscriber. It exports the CUPTI functions that
 * libncclprobe_cupti.so uses, with the real signatures and record structs (the toolkit's cupti.h),
 * and behaves as those headers document; what the driver and the GPU would do (API callbacks,
 * kernel/memcpy/memset records, lost records) is scripted by a test program through the
 * cupti_replay_* functions declared here. Everything is process-wide and thread-safe. */
#ifndef NCCLPROBE_PROGS_CUPTI_REPLAY_H
#define NCCLPROBE_PROGS_CUPTI_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

/* Environment variable: when set to NAME, cuptiSubscribe/_v2 fail with
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and _v2 reports NAME as the old subscriber, as
 * when torch.profiler or Nsight already holds CUPTI. */
#define CUPTI_REPLAY_BUSY_ENV "CUPTI_REPLAY_BUSY"

/* Environment variable: milliseconds cuptiSubscribe/_v2 take before answering, as the real CUPTI
 * may when it initializes in a process whose CUDA contexts exist (lazy attach). */
#define CUPTI_REPLAY_SUBSCRIBE_DELAY_ENV "CUPTI_REPLAY_SUBSCRIBE_DELAY_MS"

/* Environment variable: milliseconds cuptiActivityEnable takes after the kind is on, as the real
 * CUPTI's may (its first CONCURRENT_KERNEL enable sets up every context): launches meanwhile are
 * reported and recorded while the subscriber is still turning CUPTI on. */
#define CUPTI_REPLAY_ENABLE_DELAY_ENV "CUPTI_REPLAY_ENABLE_DELAY_MS"

/* The CUPTI the double presents itself as: cuptiGetVersion says the CUPTI_API_VERSION of the
 * headers it is built with (the toolkit's: 130001 for CUDA 13.0), whose newest record structs
 * (CUpti_ActivityKernel10, Memcpy6, Memset4, API) are the ones it writes. This environment
 * variable makes it say another version (a test of an unknown or unsupported CUPTI); the records
 * stay those structs. */
#define CUPTI_REPLAY_API_VERSION_ENV "CUPTI_REPLAY_API_VERSION"

/* Environment variable: when set, cuptiActivityGetStructSize (CUPTI 13.2+; the 13.0 the double
 * plays has none, so it answers CUPTI_ERROR_NOT_SUPPORTED otherwise) states the sizes of the
 * records the double writes. */
#define CUPTI_REPLAY_STRUCT_SIZES_ENV "CUPTI_REPLAY_STRUCT_SIZES"

/* Records per buffer that cuptiActivityFlushAll uses until cupti_replay_set_flush_order. */
#define CUPTI_REPLAY_DEFAULT_RECORDS_PER_BUFFER 64

/* The driver calling the subscriber around API call `cbid` on this thread: ENTER then EXIT
 * callback (when enabled), a fresh correlation id (1, 2, 3... process-wide), and a
 * CUpti_ActivityAPI record (start at ENTER, end at EXIT) when that API's activity is enabled.
 * functionName/symbolName go into CUpti_CallbackData (functionParams is NULL, the return value
 * 0). Returns the correlation id. Same as cupti_replay_api_enter then cupti_replay_api_exit. */
uint32_t cupti_replay_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const char *function_name, const char *symbol_name);

/* cupti_replay_api with the API's parameter struct (e.g. a cudaLaunchKernel_v7000_params, passed
 * as CUpti_CallbackData.functionParams) and its return value (functionReturnValue at EXIT and
 * CUpti_ActivityAPI.returnValue). */
uint32_t cupti_replay_api_ex(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const char *function_name, const char *symbol_name, const void *params,
                             int return_value);

/* The same call in two halves, for a call that does something between its callbacks (a captured
 * launch makes its graph node there: cupti_replay_resource) or that encloses another call (a
 * runtime call around the driver call it makes). _enter does the ENTER callback (when enabled)
 * and returns the call's fresh correlation id; _exit does the EXIT callback of that call (with
 * `return_value`) and queues its API record when that API's activity is enabled (start at ENTER,
 * end at EXIT). Calls nest on a thread, at most CUPTI_REPLAY_MAX_OPEN_CALLS deep (a deeper _enter
 * makes no call: it says so on stderr and returns 0); _exit must name the innermost open call of
 * this thread, else it does nothing but say so on stderr. The CUpti_CallbackData of both
 * callbacks is one object, as CUPTI's (correlationData written at ENTER is there at EXIT). */
#define CUPTI_REPLAY_MAX_OPEN_CALLS 8
uint32_t cupti_replay_api_enter(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const char *function_name, const char *symbol_name,
                                const void *params);
void cupti_replay_api_exit(uint32_t corr, int return_value);

/* The driver telling the subscriber about a resource on this thread: one callback of domain
 * CUPTI_CB_DOMAIN_RESOURCE, `cbid` (when that callback is enabled), whose CUpti_ResourceData holds
 * `context`, resourceHandle.stream NULL and `resource_descriptor` (for the graph cbids, e.g.
 * CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED and _CLONED, a CUpti_GraphData). */
void cupti_replay_resource(CUpti_CallbackId cbid, CUcontext context, void *resource_descriptor);

/* What cuptiGetGraphNodeId / cuptiGetGraphId answer for a handle (CUPTI's unique ids, which
 * the records' graphNodeId / graphId carry); registering a handle again replaces its id. These
 * are the driver's: cuptiFinalize keeps them. An unregistered or NULL handle (or a NULL out
 * pointer) is CUPTI_ERROR_INVALID_PARAMETER. */
void cupti_replay_set_graph_node_id(CUgraphNode node, uint64_t id);
void cupti_replay_set_graph_id(CUgraph graph, uint32_t id);

/* Queue one kernel / memcpy / memset record (only when its kind is enabled: else return -1).
 * Kernel records are CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL (KIND_KERNEL when only that kind is
 * enabled); `name` is interned: every record of one kernel name shares one pointer. */
int cupti_replay_kernel(uint32_t corr, const char *name, uint64_t start_ns, uint64_t end_ns,
                        uint32_t device, uint32_t stream, uint32_t graph_id,
                        uint64_t graph_node_id);
int cupti_replay_memcpy(uint32_t corr, uint8_t copy_kind, uint64_t bytes, uint64_t start_ns,
                        uint64_t end_ns, uint32_t device, uint32_t stream, uint32_t graph_id,
                        uint64_t graph_node_id);
int cupti_replay_memset(uint32_t corr, uint64_t bytes, uint64_t start_ns, uint64_t end_ns,
                        uint32_t device, uint32_t stream, uint32_t graph_id,
                        uint64_t graph_node_id);

/* n records were lost (reported, then reset, by cuptiActivityGetNumDroppedRecords). */
void cupti_replay_drop(uint64_t n);

/* What CUPTI's clock says now: the registered timestamp callback, else CLOCK_REALTIME in ns. */
uint64_t cupti_replay_now(void);

/* Hand the queued records to the subscriber: in buffers of at most records_per_buffer records
 * (0: as many as fit), completed in order (reverse = 0) or last buffer first (reverse = 1:
 * out-of-order buffers). Nothing happens before cuptiActivityRegisterCallbacks. */
void cupti_replay_deliver(size_t records_per_buffer, int reverse);

/* What cuptiActivityFlushAll delivers: by default everything queued, in order, one buffer per
 * 64 records. */
void cupti_replay_set_flush_order(size_t records_per_buffer, int reverse);

/* Records queued and not yet delivered (for tests of the double). */
size_t cupti_replay_pending(void);

/* Whether a subscriber holds CUPTI now (cuptiSubscribe succeeded, no cuptiFinalize since). A
 * subscriber may come at any time, as with the real CUPTI's lazy initialization in a process
 * whose driver already ran (a library loaded into it later): calls scripted before it came
 * reached nobody, and their records were not queued (their kinds were not enabled). */
int cupti_replay_subscribed(void);

/* The thread (gettid) whose cuptiSubscribe succeeded last, 0 before any. */
long cupti_replay_subscriber_tid(void);

#endif
