/* ctl.h - `ncclprobe ctl`: sends one command (start, stop, status,
 * snapshot) to a running `ncclprobe daemon` over its control socket and
 * prints the reply; `ctl --schema` prints the fields of the status reply
 * (daemon/status_schema.h). */
#ifndef NP_CLI_CTL_H
#define NP_CLI_CTL_H

#include <stdbool.h>
#include <stdio.h>

/* argv[0] is "ctl". Returns the exit status: 0, 1 (the daemon said no,
 * cannot connect, bad reply), 2 (usage error). */
int np_cmd_ctl(int argc, char **argv);

/* Prints the reply line to `cmd` as `ncclprobe ctl` does: the raw line when
 * `json`, else readably; the daemon's error (or what is wrong with the
 * reply) goes to `err`. Any key may be missing or of another type. Returns
 * 0 for {"ok":true,...}, 1 otherwise. */
int np_ctl_print_reply(const char *cmd, const char *line, bool json, FILE *out, FILE *err);

#endif
