/* config_fuzz.c - the daemon's configuration file (src/daemon/config.c).
 * Contract: 0 and a configuration, or -EINVAL with a "FILE:LINE: ..." message,
 * or -ENOMEM; a failed parse leaves the previous configuration untouched. */
#include <errno.h>
#include <string.h>

#include "daemon/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct np_daemon_config c;
    char err[512] = "";
    memset(&c, 0, sizeof(c));
    FUZZ_CHECK(np_config_defaults(&c) == 0);
    int rc = np_config_parse((const char *)data, size, "fuzz.conf", &c, err, sizeof(err));
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc == -EINVAL)
        FUZZ_CHECK(strncmp(err, "fuzz.conf:", 10) == 0);
    struct np_process_labels labels = {"python3", "/usr/bin/python3", "/system.slice/x", "ctr"};
    (void)np_config_selects(&c, &labels);
    np_config_free(&c);
    return 0;
}
