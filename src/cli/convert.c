/* convert.c - `ncclprobe convert DIR [--format LIST]` (convert.h): the
 * command line; the writers are run by np_formats_write (writers/formats.c),
 * each reading the directory through src/recording/. */
#include "cli/convert.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/util.h"
#include "writers/formats.h"

#define USAGE "usage: ncclprobe convert DIR [--format LIST]\n"

/* 0, 1 after --help, -EINVAL on a bad command line (said). */
static int parse_options(int argc, char **argv, const char **dir, unsigned *formats) {
    *formats = NP_FORMATS_DEFAULT;
    *dir = NULL;
    for (int i = 1; i < argc; i++) {
        char why[256];
        if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            if (np_formats_parse(argv[++i], formats, why, sizeof(why)) < 0) {
                np_err("--format: %s", why);
                return -EINVAL;
            }
        } else if (argv[i][0] != '-' && !*dir) {
            *dir = argv[i];
        } else {
            bool help = strcmp(argv[i], "--help") == 0;
            fprintf(help ? stdout : stderr,
                    USAGE "Makes the derived outputs (%s) of a recording directory.\n",
                    NP_FORMATS_HELP);
            return help ? 1 : -EINVAL;
        }
    }
    if (!*dir) {
        fprintf(stderr, USAGE);
        return -EINVAL;
    }
    return 0;
}

static int check_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) < 0) {
        int err = -errno;
        np_err("cannot read %s: %s", dir, strerror(-err));
        return err;
    }
    if (!S_ISDIR(st.st_mode)) {
        np_err("%s is not a recording directory", dir);
        return -ENOTDIR;
    }
    return 0;
}

int np_cmd_convert(int argc, char **argv) {
    const char *dir;
    unsigned formats;
    int r = parse_options(argc, argv, &dir, &formats);
    if (r)
        return r > 0 ? 0 : 2;
    if (check_dir(dir) < 0)
        return 1;
    return np_formats_write(dir, formats) ? 1 : 0;
}
