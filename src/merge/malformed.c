/* malformed.c - counting and describing the unusable input of one merge
 * input file (malformed.h). */
#include "merge/malformed.h"

#include <string.h>

void np_malformed_init(struct np_malformed_log *log, const char *path, const char *unit) {
    memset(log, 0, sizeof(*log));
    log->path = path;
    log->unit = unit;
    np_str_init(&log->shown);
}

void np_malformed_free(struct np_malformed_log *log) {
    np_str_free(&log->shown);
}

void np_malformed_note(struct np_malformed_log *log, long line, const char *why) {
    if (log->count++ < NP_MALFORMED_SHOWN)
        np_str_appendf(&log->shown, "%s:%ld: skipped %s: %s\n", log->path, line, log->unit, why);
}

void np_malformed_report(const struct np_malformed_log *log) {
    const char *p = np_str_cstr(&log->shown);
    for (const char *nl; (nl = strchr(p, '\n')); p = nl + 1)
        np_warn("%.*s", (int)(nl - p), p);
    if (log->count > NP_MALFORMED_SHOWN)
        np_warn("%s: %zu malformed %ss skipped (the first %d shown)", log->path, log->count,
                log->unit, NP_MALFORMED_SHOWN);
}
