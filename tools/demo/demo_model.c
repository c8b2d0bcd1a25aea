/* libdemo_model.so: a toy transformer. A prefill request runs every layer eagerly
 * (model_forward -> attention_block / mlp_block -> launch_* in libdemo_kernels.so); a decode step
 * replays a captured CUDA graph (model_forward -> launch_decode_graph). */
#include "demo_model.h"
#include "demo_kernels.h"

#define NOINLINE __attribute__((noinline))
#define KEEP_FRAME() __asm__ volatile("" ::: "memory") /* no tail calls: keep every frame */

static struct demo_model_config model = {
    .layers = 4, .hidden = 4096, .heads = 32, .intermediate = 11008};

void model_configure(const struct demo_model_config *config) {
    model = *config;
}

/* rmsnorm -> QKV projection -> flash attention -> output projection -> tensor-parallel allreduce */
NOINLINE unsigned attention_block(const struct demo_request *req) {
    unsigned tokens = req->batch * req->seq_len;
    launch_rmsnorm(req->stream, tokens, model.hidden);
    KEEP_FRAME();
    launch_matmul(req->stream, tokens, 3 * model.hidden, model.hidden);
    KEEP_FRAME();
    launch_attention(req->stream, req->batch, model.heads, req->seq_len);
    KEEP_FRAME();
    launch_matmul(req->stream, tokens, model.hidden, model.hidden);
    KEEP_FRAME();
    launch_allreduce_stub(req->stream, (unsigned long)tokens * model.hidden);
    KEEP_FRAME();
    return 5;
}

/* rmsnorm -> gate/up projection -> SiLU*mul -> down projection -> tensor-parallel allreduce */
NOINLINE unsigned mlp_block(const struct demo_request *req) {
    unsigned tokens = req->batch * req->seq_len;
    launch_rmsnorm(req->stream, tokens, model.hidden);
    KEEP_FRAME();
    launch_matmul(req->stream, tokens, 2 * model.intermediate, model.hidden);
    KEEP_FRAME();
    launch_silu_mul(req->stream, tokens, model.intermediate);
    KEEP_FRAME();
    launch_matmul(req->stream, tokens, model.hidden, model.intermediate);
    KEEP_FRAME();
    launch_allreduce_stub(req->stream, (unsigned long)tokens * model.hidden);
    KEEP_FRAME();
    return 5;
}

NOINLINE unsigned model_forward(const struct demo_request *req) {
    if (req->decode) {
        launch_decode_graph(req->stream, req->batch);
        KEEP_FRAME();
        return 1;
    }
    unsigned launches = 0;
    for (unsigned layer = 0; layer < model.layers; layer++) {
        launches += attention_block(req);
        KEEP_FRAME();
        launches += mlp_block(req);
        KEEP_FRAME();
    }
    return launches;
}
