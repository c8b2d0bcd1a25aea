/* libunwind_a.so: the middle of unwind_chain's call chain and the only object of it built WITH
 * frame pointers (app_step -> mid_dispatch -> mid_forward -> launcher_entry in libunwind_b.so).
 * Sitting between two objects without frame pointers, it lets a frame-pointer walk start but not
 * get through. */
#include "progs_common.h"
#include "unwind_api.h"

UNWIND_NOINLINE int mid_forward(int iter) {
    volatile char scratch[160];
    scratch[0] = (char)iter;
    int status = launcher_entry(iter);
    KEEP_FRAME();
    return status + scratch[0] - (char)iter;
}

UNWIND_NOINLINE int mid_dispatch(int iter) {
    int status = mid_forward(iter);
    KEEP_FRAME();
    return status;
}
