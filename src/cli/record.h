/* record.h - `ncclprobe record`: attach to processes (or start one), stream
 * their launches through the pipeline into a recording directory. */
#ifndef NP_RECORD_H
#define NP_RECORD_H

/* Returns the process exit code: 0 ok, 1 failure, 2 usage. */
int np_cmd_record(int argc, char **argv);

#endif
