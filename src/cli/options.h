/* options.h - the command line of `ncclprobe record`: its flags are the rows
 * of np_settings_table (session/settings.h: what can be asked for, its
 * defaults and checks), read before anything is loaded; bad input is a
 * clear error and exit code 2. */
#ifndef NP_OPTIONS_H
#define NP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "session/settings.h"

/* Parses argv (argv[0] is "record" or the program); 0, or -EINVAL after
 * printing what is wrong. --help prints the usage and exits 0. */
int np_record_parse_options(int argc, char **argv, struct np_settings *opt);
/* "ncclprobe-YYYYmmdd-HHMMSS" in the current directory, made unique. */
char *np_default_output_dir(void);

#endif
