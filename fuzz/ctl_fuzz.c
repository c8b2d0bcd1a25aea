/* ctl_fuzz.c - one request line of the daemon's control socket
 * (np_ctl_parse_request). Contract: 0 and a known command, or -EINVAL with a
 * message for the client; a duration only on start, within its bounds. */
#include <errno.h>

#include "daemon/ctl.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct np_ctl_request req = {0};
    char err[256] = "";
    int rc = np_ctl_parse_request((const char *)data, size, &req, err, sizeof(err));
    FUZZ_CHECK(rc == 0 || rc == -EINVAL);
    if (rc == -EINVAL) {
        FUZZ_CHECK(err[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(np_ctl_cmd_name(req.cmd) != NULL);
    FUZZ_CHECK(req.duration_s >= 0 && req.duration_s <= NP_CTL_MAX_DURATION_S);
    FUZZ_CHECK(req.duration_s == 0 || req.cmd == NP_CTL_START);
    return 0;
}
