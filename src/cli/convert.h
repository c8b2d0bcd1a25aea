/* convert.h - `ncclprobe convert DIR [--format LIST]`: the derived outputs
 * (profile.pb.gz, trace.json, flamegraph*.svg) of a closed recording or
 * daemon output set; the daemon runs it, exec'd, for each set it writes. */
#ifndef NP_CLI_CONVERT_H
#define NP_CLI_CONVERT_H

/* argv[0] is "convert". Returns the exit status: 0, 1 (a writer failed, or
 * DIR is not a directory), 2 (usage error). */
int np_cmd_convert(int argc, char **argv);

#endif
