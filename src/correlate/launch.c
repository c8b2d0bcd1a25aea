/* launch.c - kernel names and NCCL totals of decoded launches (see
 * launch.h). */
#define _GNU_SOURCE
#include "correlate/launch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/probes.h"
#include "correlate/kernels.h"
#include "correlate/nccl_comms.h"
#include "ingest/ingest.h"
#include "ingest/launch.h"
#include "ingest/nccl_plan.h"
#include "ncclprobe/recording.h"
#include "symbolize/symbolize.h"

/* nvcc's launch stub is named __device_stub__<mangled kernel>: when the
 * handle's origin was not seen, the stack still names the kernel. */
static const char *kernel_from_stub_frame(const char *stack, char *buf, size_t size) {
    static const char marker[] = "__device_stub__";
    const char *p = strstr(stack, marker);
    if (!p)
        return NULL;
    p += sizeof(marker) - 1;
    size_t n = strcspn(p, ";");
    char mangled[512];
    if (n + 2 >= sizeof(mangled))
        return NULL;
    /* "__device_stub__Z6kernelPf" carries the mangled name minus its '_' */
    snprintf(mangled, sizeof(mangled), "%s%.*s", p[0] == 'Z' ? "_" : "", (int)n, p);
    char *demangled = np_demangle_short(mangled);
    if (!demangled)
        return NULL;
    snprintf(buf, size, "%s", demangled);
    free(demangled);
    return buf;
}

/* The name the launch's own arguments give (graph and NCCL launches: a
 * placeholder when there is none), or NULL. */
static const char *name_from_arguments(const struct np_kernel_names *names,
                                       struct np_symbolizer *sym, const struct np_launch *l,
                                       char *buf, size_t size) {
    switch (l->def->layout) {
    case NP_LAYOUT_GRAPH:
        snprintf(buf, size, NP_KERNEL_GRAPH_PREFIX "%s>", l->def->api);
        return buf;
    case NP_LAYOUT_NCCL_LAUNCH:
        if (strcmp(l->def->api, "ncclLaunchCeColl") == 0 ||
            (l->nccl_plan && l->nccl_plan->copy_engine))
            return NP_KERNEL_NCCL_CE;
        if (strcmp(l->def->api, "ncclLaunchRma") == 0 || (l->nccl_plan && l->nccl_plan->rma))
            return NP_KERNEL_NCCL_RMA;
        if (l->nccl_plan && l->nccl_plan->has_kernel_fn) {
            const char *name = np_kernel_name_from_stub(sym, l->nccl_plan->kernel_fn);
            if (name)
                return name;
        }
        return NP_KERNEL_NCCL_UNKNOWN;
    case NP_LAYOUT_RT_LAUNCH:
    case NP_LAYOUT_RT_LAUNCH_EXC: {
        /* cudaLaunchKernel also accepts a cudaKernel_t since CUDA 12 */
        const char *name = np_kernel_names_lookup(names, l->func);
        return name ? name : np_kernel_name_from_stub(sym, l->func);
    }
    case NP_LAYOUT_RT_LAUNCH_HANDLE:
    case NP_LAYOUT_DRV_LAUNCH:
    case NP_LAYOUT_DRV_LAUNCH_EX:
        return np_kernel_names_lookup(names, l->func);
    default:
        return NULL;
    }
}

const char *np_launch_kernel_name(const struct np_kernel_names *names, struct np_symbolizer *sym,
                                  const struct np_launch *l, const struct np_stack_texts *stack,
                                  char *buf, size_t size) {
    const char *name = name_from_arguments(names, sym, l, buf, size);
    if (name)
        return name;
    if (l->def->layout == NP_LAYOUT_RT_LAUNCH_HANDLE) {
        const char *from_stack = kernel_from_stub_frame(np_str_cstr(&stack->folded), buf, size);
        if (from_stack)
            return from_stack;
    }
    /* "<unnamed 0x...>", for every launch of such a kernel: not printf */
    char hex[NP_HEX_DIGITS_SIZE];
    const char *h = np_hex_digits(hex, l->func);
    size_t plen = sizeof(NP_KERNEL_UNNAMED_PREFIX) - 1, hlen = strlen(h);
    if (plen + hlen + 2 > size) {
        snprintf(buf, size, NP_KERNEL_UNNAMED_PREFIX "%s>", h);
        return buf;
    }
    memcpy(buf, NP_KERNEL_UNNAMED_PREFIX, plen);
    memcpy(buf + plen, h, hlen);
    memcpy(buf + plen + hlen, ">", 2);
    return buf;
}

static void append_frame(struct np_str *s, const char *frame) {
    np_str_append(s, s->len ? ";" : "");
    np_str_append(s, frame);
}

void np_launch_add_nccl_kernel(struct np_nccl_comms *comms, const struct np_launch *l,
                               const char *kernel, struct np_stack_texts *stack) {
    const struct np_nccl_plan *plan = l->nccl_plan;
    if (!plan)
        return;
    char types[256], frame[300];
    np_nccl_plan_op_types(plan, kernel, types, sizeof(types));
    if (types[0]) {
        snprintf(frame, sizeof(frame), NP_FRAME_NCCL_PREFIX "%s", types);
        append_frame(&stack->folded, frame);
        append_frame(&stack->detailed, frame);
        np_ingest_append_location(&stack->locations);
    }
    if (!comms) /* captured into a graph: it ran nothing */
        return;
    struct np_nccl_comm_stats *c = np_nccl_comms_get(comms, l->ev->hdr.pid, plan->comm, &plan->id);
    if (c) {
        c->launches++;
        c->planned_ops += plan->nops;
    }
}

void np_launch_count_nccl_op(struct np_nccl_comms *comms, const struct np_launch *l) {
    int slot = np_nccl_api_slot(l->def->api);
    if (slot < 0 || !l->comm)
        return;
    struct np_nccl_comm_stats *c = np_nccl_comms_get(comms, l->ev->hdr.pid, l->comm, &l->comm_id);
    if (c) {
        c->api[slot].calls++;
        c->api[slot].bytes +=
            l->count * (uint64_t)np_nccl_datatype_bytes(l->nccl_names, l->datatype);
    }
}
