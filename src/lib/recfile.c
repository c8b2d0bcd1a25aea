/* recfile.c - append-only record files cut at a record boundary (see
 * recfile.h). The buffer holds whole records only; a flush writes it with
 * write(2), and a short or failed write is undone back to the last newline
 * that reached the disk, so a reader never sees half a record. */
#define _GNU_SOURCE
#include "lib/recfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FLUSH_AT (64u << 10) /* bytes buffered before a write */

struct np_recfile {
    int fd;
    char *buf;
    size_t len, cap;
    uint64_t size;    /* bytes on disk: always the end of a record */
    uint64_t records; /* records on disk */
    uint64_t records_cut;
    int error; /* what cut the file; 0 while it is whole */
};

int np_recfile_open(const char *path, struct np_recfile **out) {
    struct np_recfile *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (f->fd < 0) {
        int err = -errno;
        free(f);
        return err;
    }
    *out = f;
    return 0;
}

static uint64_t count_records(const char *text, size_t len) {
    uint64_t n = 0;
    if (!len) /* text may be NULL then (an empty buffer) */
        return 0;
    for (const char *p = text; (p = memchr(p, '\n', len - (size_t)(p - text))) != NULL; p++)
        n++;
    return n;
}

void np_recfile_cut(struct np_recfile *f, int err) {
    if (f->error)
        return;
    f->error = err ? err : -EIO;
    f->records_cut += count_records(f->buf, f->len);
    f->len = 0;
}

/* After n bytes of the buffer reached the disk (n < len): keep what ends
 * in a newline, take back the rest. */
static void undo_partial(struct np_recfile *f, size_t n, int err) {
    size_t whole = 0;
    for (size_t i = n; i > 0; i--)
        if (f->buf[i - 1] == '\n') {
            whole = i;
            break;
        }
    if (ftruncate(f->fd, (off_t)(f->size + whole)) == 0) {
        f->size += whole;
        f->records += count_records(f->buf, whole);
        memmove(f->buf, f->buf + whole, f->len - whole);
        f->len -= whole;
    } /* else: the file keeps its tail; nothing more is written after it */
    np_recfile_cut(f, err);
}

int np_recfile_flush(struct np_recfile *f) {
    size_t done = 0;
    while (!f->error && done < f->len) {
        ssize_t n = write(f->fd, f->buf + done, f->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            undo_partial(f, done, n < 0 ? -errno : -ENOSPC);
            return f->error;
        }
        done += (size_t)n;
    }
    if (!f->error) {
        f->size += done;
        f->records += count_records(f->buf, f->len);
        f->len = 0;
    }
    return f->error;
}

/* Room for len more bytes in the buffer; false when there is none (the
 * file is cut: the caller counts its records). */
static bool make_room(struct np_recfile *f, size_t len) {
    if (f->error)
        return false;
    if (f->len + len <= f->cap)
        return true;
    size_t cap = f->cap ? f->cap : FLUSH_AT * 2;
    while (cap < f->len + len)
        cap *= 2;
    char *buf = realloc(f->buf, cap);
    if (buf) {
        f->buf = buf;
        f->cap = cap;
        return true;
    }
    np_recfile_flush(f);
    if (!f->error && f->len + len <= f->cap)
        return true;
    if (!f->error)
        np_recfile_cut(f, -ENOMEM);
    return false;
}

void np_recfile_append(struct np_recfile *f, const char *text, size_t len) {
    if (!make_room(f, len)) {
        f->records_cut += count_records(text, len);
        return;
    }
    memcpy(f->buf + f->len, text, len);
    f->len += len;
    if (f->len >= FLUSH_AT)
        np_recfile_flush(f);
}

void np_recfile_append_parts(struct np_recfile *f, const struct np_recpart *parts, size_t n) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += parts[i].len;
    if (!make_room(f, len)) {
        for (size_t i = 0; i < n; i++)
            f->records_cut += count_records(parts[i].text, parts[i].len);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(f->buf + f->len, parts[i].text, parts[i].len);
        f->len += parts[i].len;
    }
    if (f->len >= FLUSH_AT)
        np_recfile_flush(f);
}

bool np_recfile_is_cut(const struct np_recfile *f) {
    return f->error != 0;
}

int np_recfile_error(const struct np_recfile *f) {
    return f->error;
}

uint64_t np_recfile_records(const struct np_recfile *f) {
    return f->records;
}

uint64_t np_recfile_records_cut(const struct np_recfile *f) {
    return f->records_cut;
}

int np_recfile_close(struct np_recfile *f) {
    if (!f)
        return 0;
    int err = np_recfile_flush(f);
    if (close(f->fd) < 0 && !err)
        err = -errno;
    free(f->buf);
    free(f);
    return err;
}
