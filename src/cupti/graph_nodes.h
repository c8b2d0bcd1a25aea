/* graph_nodes.h - CUDA graph nodes as CUPTI announces them, sent on to
 * ncclprobe in GRAPH_NODES frames (gpu_wire.h): which launch API call made
 * each node (stream capture makes it inside the captured launch), and which
 * node each executable graph's copy was cloned from. ncclprobe follows a
 * replayed kernel record's graphNodeId back to the captured launch, and its
 * stack (graph_nodes.c). */
#ifndef NP_CUPTI_GRAPH_NODES_H
#define NP_CUPTI_GRAPH_NODES_H

#include <stdbool.h>
#include <stdint.h>

#include <cupti.h>

#include "cupti/cupti_api.h"

/* The resource callback ids to enable. */
extern const CUpti_CallbackId np_graph_node_cbids[2];

/* At every launch API callback, on the calling thread: the outermost call
 * open on the thread is the one a node created now belongs to. */
void np_graph_nodes_api(CUpti_ApiCallbackSite site, uint32_t correlation_id);

/* A resource callback (CUPTI_CB_DOMAIN_RESOURCE) on the calling thread:
 * GRAPHNODE_CREATED and GRAPHNODE_CLONED are sent to the connection (when
 * there is one); anything else is ignored. Never blocks. */
void np_graph_nodes_resource(const struct np_cupti_api *api, CUpti_CallbackId cbid,
                             const void *data);

#endif
