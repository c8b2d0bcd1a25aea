/* Interface of libkern.so (kern.cu): a real nvcc-compiled kernel launched with <<<>>>. */
#ifndef NCCLPROBE_PROGS_KERN_H
#define NCCLPROBE_PROGS_KERN_H

#ifdef __cplusplus
extern "C" {
#endif

/* Launches scale_kernel<<<dim3(3,1,1), dim3(64,1,1), 0, (cudaStream_t)0x5007>>>(nullptr, 4),
 * which nvcc 13 turns into __cudaPushCallConfiguration + the device stub + __cudaLaunchKernel.
 * Returns cudaGetLastError() afterwards (an error without a GPU). */
int kern_launch_scale(void);

#ifdef __cplusplus
}
#endif

#endif
