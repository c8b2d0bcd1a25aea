/* flamegraph.h - `ncclprobe flamegraph`: renders a folded-stacks file as an
 * interactive SVG flame graph (writers/flamegraph.h). */
#ifndef NP_CLI_FLAMEGRAPH_H
#define NP_CLI_FLAMEGRAPH_H

/* argv[0] is "flamegraph". Returns the process exit code: 0 ok, 1 I/O error
 * or no valid line in a non-empty input, 2 usage. */
int np_cmd_flamegraph(int argc, char **argv);

#endif
