/* daemon.h - `ncclprobe daemon`: the system-wide service (docs/daemon.md). */
#ifndef NP_DAEMON_H
#define NP_DAEMON_H

int np_cmd_daemon(int argc, char **argv);

#endif
