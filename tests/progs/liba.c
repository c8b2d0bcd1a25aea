/* liblaunch_a.so: the first library frame of the launcher's call chain
 * (launcher: run_worker -> liba_submit -> liblaunch_b.so: libb_launch -> CUDA). */
#include "launch_api.h"
#include "progs_common.h"

NOINLINE int liba_submit(int variant) {
    int status = libb_launch(variant);
    KEEP_FRAME();
    return status;
}
