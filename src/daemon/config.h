/* config.h - the configuration file of `ncclprobe daemon`
 * (/etc/ncclprobe/ncclprobe.conf; docs/daemon.md, "Configuration"): its
 * parser, built-in defaults and the process filter it describes.
 *
 * Syntax: `key = value` per line, '#' comments (a whole line, or after
 * whitespace), blank lines; a value may be double-quoted ("..." with \" and
 * \\; '#' is then literal). CRLF line ends are accepted. Each key at most
 * once; an unknown key is an error. Durations: "90", "1.5s", "500ms", "10m",
 * "2h", "7d" (plain = seconds). Sizes: "4096", "512K", "64M", "10G", "1T"
 * (binary; "MiB" spellings too). Lists: whitespace-separated fnmatch globs. */
#ifndef NP_DAEMON_CONFIG_H
#define NP_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "session/settings.h" /* struct np_daemon_config, its keys (np_settings_table) */

#define NP_CONFIG_DEFAULT_PATH "/etc/ncclprobe/ncclprobe.conf"
/* A file larger than this is refused (-EFBIG): no configuration is. */
#define NP_CONFIG_MAX_FILE_BYTES (1u << 20)

/* Fills *c with the built-in defaults (np_settings_table's, as in docs/daemon.md),
 * without freeing what *c held. 0, or -ENOMEM (then *c holds no memory). */
int np_config_defaults(struct np_daemon_config *c);

/* Parses text[0..len) (NUL bytes in it are an error). `filename` only names
 * the file in messages. *out must be zeroed or hold a configuration (from
 * np_config_defaults or an earlier parse). Keys the text does not set take
 * their defaults, not *out's values.
 * 0: *out's old contents freed, *out the new configuration.
 * Error: *out untouched; -EINVAL with err = "FILE:LINE: KEY: what is wrong
 * (what is allowed)", or -ENOMEM. */
int np_config_parse(const char *text, size_t len, const char *filename,
                    struct np_daemon_config *out, char *err, size_t errlen);

/* Reads and parses the file at path, as np_config_parse. A file that cannot
 * be read gives -errno (-ENOENT, -EACCES, -EISDIR; -EINVAL: not a regular
 * file; -EFBIG: over NP_CONFIG_MAX_FILE_BYTES) with err = "PATH: reason". */
int np_config_load(const char *path, struct np_daemon_config *out, char *err, size_t errlen);

/* Frees what *c holds and zeroes it (safe on a zeroed struct). */
void np_config_free(struct np_daemon_config *c);

/* What a process is filtered on. NULL strings count as "". container is ""
 * for host processes. */
struct np_process_labels {
    const char *comm, *exe, *cgroup, *container;
};

/* Whether a process is traced: for each of comm, exe, cgroup and container,
 * the include list is empty or one of its patterns matches, and no pattern
 * of the exclude list matches. Patterns are fnmatch(3) globs matched with
 * flags 0 on every label: no FNM_PATHNAME, so '*' and '?' match '/' too
 * (the exe pattern "/opt/" + "*" matches "/opt/conda/bin/python", and
 * "*" + "/python3*" any python3 in any directory), and no FNM_PERIOD. */
bool np_config_selects(const struct np_daemon_config *c, const struct np_process_labels *p);

#endif
