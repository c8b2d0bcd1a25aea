/* libdemo_model.so: a toy transformer "model" whose forward pass issues kernel launches through
 * libdemo_kernels.so. */
#ifndef NCCLPROBE_DEMO_MODEL_H
#define NCCLPROBE_DEMO_MODEL_H

/* One inference request as the server hands it to the model. */
struct demo_request {
    unsigned id;
    unsigned batch;
    unsigned seq_len;
    int decode;   /* 0: prefill (eager launches), 1: decode step (CUDA graph replay) */
    void *stream; /* the serving thread's stream */
};

/* Model shape; set once before serving. */
struct demo_model_config {
    unsigned layers;
    unsigned hidden;
    unsigned heads;
    unsigned intermediate;
};

void model_configure(const struct demo_model_config *config);

/* Runs one forward pass; returns the number of kernel launches it issued. */
unsigned model_forward(const struct demo_request *req);

#endif
