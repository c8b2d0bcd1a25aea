// libunwind_b.so: the C++ end of unwind_chain's call chain, built without frame pointers:
//
//   launcher_entry (extern "C") -> ns::Launcher<float>::go -> ns::launch_impl<float>
//     -> cudaLaunchKernel(unwind_kernel, {2,1,1}, {64,1,1}, args, 0, 0x5020)
//
// The frames reserve real stack (volatile scratch arrays), so the stack pointer moves by hundreds
// of bytes per frame and only CFI describes where each return address is.
#include <stdint.h>

#include "cuda_api.h"
#include "progs_common.h"
#include "unwind_api.h"

extern "C" NOINLINE void unwind_kernel(float *data, int n) {
    for (int i = 0; i < n; i++)
        data[i] *= 2.0f;
}

namespace ns {

// A function template: demangled "ns::launch_impl<float>" once parameters are dropped.
template <typename T> UNWIND_NOINLINE int launch_impl(const void *kernel, T scale, int iter) {
    volatile char scratch[256];
    scratch[0] = static_cast<char>(iter);
    T value = scale;
    T *pvalue = &value;
    int n = 1;
    void *args[] = {&pvalue, &n};
    dim3 grid = {2, 1, 1}, block = {64, 1, 1};
    int status = cudaLaunchKernel(kernel, grid, block, args, 0,
                                  reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x5020)));
    KEEP_FRAME();
    return status + scratch[0] - static_cast<char>(iter);
}

// A class template: its member is demangled "ns::Launcher<float>::go".
template <typename T> class Launcher {
  public:
    explicit Launcher(T scale) : scale_(scale) {}
    UNWIND_NOINLINE int go(int iter);

  private:
    T scale_;
};

template <typename T> int Launcher<T>::go(int iter) {
    volatile char scratch[320];
    scratch[0] = static_cast<char>(iter);
    int status = launch_impl<T>(reinterpret_cast<const void *>(unwind_kernel), scale_, iter);
    KEEP_FRAME();
    return status + scratch[0] - static_cast<char>(iter);
}

template class Launcher<float>;

} // namespace ns

extern "C" UNWIND_NOINLINE int launcher_entry(int iter) {
    ns::Launcher<float> launcher(2.0f);
    int status = launcher.go(iter);
    KEEP_FRAME();
    return status;
}
