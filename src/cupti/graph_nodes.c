/* graph_nodes.c - CUDA graph nodes for ncclprobe (see graph_nodes.h).
 *
 * Each thread keeps the launch API call it is inside (the outermost: a
 * runtime launch that calls the driver is one launch to ncclprobe), set at
 * ENTER and cleared at the matching EXIT. A node CUPTI says was created
 * while one is open was made by that call: stream capture turns the
 * captured launch into a node right there. A node created outside any
 * launch call (cuGraphAddKernelNode) goes with correlation id 0: ncclprobe
 * has no stack for it.
 *
 * One entry per frame, queued on the thread that made the node, so it is on
 * the wire before any record of a replay of that node: instantiation
 * (cloning) comes before the first launch of the executable graph. While no
 * ncclprobe listens nothing is sent (the entries are lost, and replays of
 * those nodes are matched by kernel order instead: docs/gpu.md). */
#define _GNU_SOURCE
#include "cupti/graph_nodes.h"

#include <string.h>

#include "cupti/sink.h"
#include "ncclprobe/gpu_wire.h"

const CUpti_CallbackId np_graph_node_cbids[2] = {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
                                                 CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED};

/* The thread's open launch calls: how deep, and the outermost's id. */
static __thread uint32_t open_calls;
static __thread uint32_t outermost_id;

void np_graph_nodes_api(CUpti_ApiCallbackSite site, uint32_t correlation_id) {
    if (site == CUPTI_API_ENTER) {
        if (open_calls++ == 0)
            outermost_id = correlation_id;
    } else if (open_calls > 0 && --open_calls == 0) { /* (an EXIT of a call entered before we
                                                         came is no call of ours) */
        outermost_id = 0;
    }
}

static uint64_t node_id(const struct np_cupti_api *api, CUgraphNode node) {
    uint64_t id = 0;
    if (!node || api->GetGraphNodeId(node, &id) != CUPTI_SUCCESS)
        return 0;
    return id;
}

static uint32_t graph_id(const struct np_cupti_api *api, CUgraph graph) {
    uint32_t id = 0;
    if (!graph || !api->GetGraphId || api->GetGraphId(graph, &id) != CUPTI_SUCCESS)
        return 0;
    return id;
}

static void send_node(const struct np_wire_graph_node *entry) {
    struct np_frame *f =
        np_frame_new(NP_WIRE_GRAPH_NODES, sizeof(struct np_wire_graph_nodes) + sizeof(*entry));
    if (!f)
        return;
    memcpy(f->data + f->len, entry, sizeof(*entry));
    f->len += sizeof(*entry);
    f->count = 1;
    np_sink_submit(f);
}

void np_graph_nodes_resource(const struct np_cupti_api *api, CUpti_CallbackId cbid,
                             const void *data) {
    bool created = cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED;
    if ((!created && cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) || !api->GetGraphNodeId ||
        !data || !np_sink_connection())
        return;
    const CUpti_ResourceData *rd = data;
    const CUpti_GraphData *gd = rd->resourceDescriptor;
    if (!gd)
        return;
    struct np_wire_graph_node e;
    memset(&e, 0, sizeof(e));
    e.node_id = node_id(api, gd->node);
    if (!e.node_id)
        return;
    e.event = created ? NP_GRAPH_NODE_CREATED : NP_GRAPH_NODE_CLONED;
    e.graph_id = graph_id(api, gd->graph);
    e.node_type = (uint32_t)gd->nodeType;
    if (created) {
        e.correlation_id = outermost_id;
    } else {
        e.original_node_id = node_id(api, gd->originalNode);
        if (!e.original_node_id)
            return;
    }
    send_node(&e);
}
