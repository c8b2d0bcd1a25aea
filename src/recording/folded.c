/* folded.c - reads folded-stack lines (folded.h): the one parser of the
 * format for the pprof writer, the flame graph and their commands. */
#define _GNU_SOURCE
#include "recording/folded.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

#define MAX_SAID 5 /* malformed lines said one by one; the rest only counted */

static void init(struct np_folded *r, FILE *f, const char *name, bool owned) {
    memset(r, 0, sizeof(*r));
    r->f = f;
    r->name = name;
    r->owned = owned;
    r->max_weight = UINT64_MAX;
}

int np_folded_open(struct np_folded *r, const char *path) {
    init(r, fopen(path, "re"), path, true);
    return r->f ? 0 : -errno;
}

void np_folded_attach(struct np_folded *r, FILE *f, const char *name) {
    init(r, f, name, false);
}

void np_folded_close(struct np_folded *r) {
    if (r->f && r->owned)
        fclose(r->f);
    free(r->buf);
    memset(r, 0, sizeof(*r));
}

/* Parses a line (its newline removed) in place: 1 taken, 0 blank, -EBADMSG. */
static int parse(const struct np_folded *r, char *line, size_t len, struct np_folded_line *out) {
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        line[--len] = '\0';
    if (len == 0)
        return 0;
    char *space = strrchr(line, ' ');
    if (!space || np_parse_u64(space + 1, 0, r->max_weight, &out->weight) < 0)
        return -EBADMSG;
    while (space > line && space[-1] == ' ')
        space--;
    if (space == line)
        return -EBADMSG;
    *space = '\0';
    out->stack = line;
    out->len = (size_t)(space - line);
    return 1;
}

static void malformed(struct np_folded *r) {
    if (r->malformed++ < MAX_SAID)
        np_warn("%s:%ld: not a \"frame;...;frame WEIGHT\" line", r->name, r->line);
}

int np_folded_next(struct np_folded *r, struct np_folded_line *out) {
    for (;;) {
        errno = 0;
        ssize_t len = r->f ? getline(&r->buf, &r->cap, r->f) : -1;
        if (len < 0)
            break;
        r->line++;
        if (len > 0 && r->buf[len - 1] == '\n')
            r->buf[--len] = '\0';
        int got = memchr(r->buf, '\0', (size_t)len) ? -EBADMSG : parse(r, r->buf, (size_t)len, out);
        if (got > 0)
            return 1;
        if (got < 0)
            malformed(r);
    }
    if (errno == ENOMEM)
        return -ENOMEM;
    if (r->f && ferror(r->f)) {
        int err = errno ? -errno : -EIO;
        np_err("cannot read %s: %s", r->name, strerror(-err));
        return err;
    }
    return 0;
}
