/* util.c - logging, growable strings and arrays, and the small helpers of
 * util.h: clocks, parsing, files, reading a target's memory. */
#define _GNU_SOURCE
#include "lib/util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static enum np_log_level log_level = NP_LOG_INFO;
static unsigned log_errors; /* "error:" lines printed: main() exits non-zero then */

void np_log_set_level(enum np_log_level level) {
    log_level = level;
}

/* Writes all of TEXT to stderr, retrying short writes and EINTR. */
static void write_stderr(const char *text, size_t len) {
    while (len) {
        ssize_t n = write(STDERR_FILENO, text, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        text += n;
        len -= (size_t)n;
    }
}

/* Leaves errno as it was: callers say what failed, then return -errno.
 * The line goes out in one write(): the reader thread, the main loop and a
 * traced child (its CUPTI library) share the one stderr, and a line written
 * in pieces comes out cut in two by theirs. */
void np_log(enum np_log_level level, const char *fmt, ...) {
    static const char *const prefix[] = {"error: ", "warning: ", "", "debug: "};
    int saved_errno = errno;
    char stack_line[1024];
    char *line = stack_line;

    if (level == NP_LOG_ERROR)
        log_errors++;
    if (level > log_level)
        return;
    int head = snprintf(stack_line, sizeof(stack_line), "ncclprobe: %s", prefix[level]);
    va_list ap;
    va_start(ap, fmt);
    int body = vsnprintf(stack_line + head, sizeof(stack_line) - (size_t)head, fmt, ap);
    va_end(ap);
    if (body < 0)
        body = 0;
    size_t len = (size_t)head + (size_t)body;
    if (len + 2 > sizeof(stack_line)) { /* a long line: formatted again, whole */
        char *big = malloc(len + 2);
        if (big) {
            memcpy(big, stack_line, (size_t)head);
            va_start(ap, fmt);
            vsnprintf(big + head, (size_t)body + 1, fmt, ap);
            va_end(ap);
            line = big;
        } else {
            len = sizeof(stack_line) - 2; /* cut, but said */
        }
    }
    line[len++] = '\n';
    write_stderr(line, len);
    if (line != stack_line)
        free(line);
    errno = saved_errno;
}

unsigned np_log_errors(void) {
    return log_errors;
}

void *np_grow_array(void *array, size_t *cap, size_t needed, size_t size) {
    if (needed <= *cap)
        return array;
    size_t new_cap = *cap ? *cap * 2 : 16;
    while (new_cap < needed)
        new_cap *= 2;
    if (new_cap > SIZE_MAX / size)
        return NULL;
    void *bigger = realloc(array, new_cap * size);
    if (bigger)
        *cap = new_cap;
    return bigger;
}

long np_perf_event_max_stack(void) {
    char *text = NULL;
    size_t len = 0;
    int err = np_read_file("/proc/sys/kernel/perf_event_max_stack", &text, &len);
    if (err)
        return err;
    long v = strtol(text, NULL, 10);
    free(text);
    return v > 0 ? v : -EINVAL;
}

void np_str_init(struct np_str *s) {
    memset(s, 0, sizeof(*s));
}

static bool borrowed(const struct np_str *s) {
    return s->buf && !s->cap;
}

void np_str_free(struct np_str *s) {
    if (!borrowed(s))
        free(s->buf);
    np_str_init(s);
}

void np_str_reset(struct np_str *s) {
    s->len = 0;
    s->failed = false;
    if (borrowed(s))
        s->buf = NULL; /* let go of the text: never written */
    else if (s->buf)
        s->buf[0] = '\0';
}

void np_str_borrow(struct np_str *s, const char *text, size_t len) {
    if (!borrowed(s))
        free(s->buf);
    s->buf = (char *)text; /* cap 0: never written, never freed */
    s->len = len;
    s->cap = 0;
    s->failed = false;
}

static bool np_str_reserve(struct np_str *s, size_t extra) {
    if (s->len + extra + 1 <= s->cap)
        return true;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < s->len + extra + 1)
        cap *= 2;
    char *buf;
    if (borrowed(s)) { /* the first change of a borrowed text: a copy of its own */
        buf = malloc(cap);
        if (buf)
            memcpy(buf, s->buf, s->len + 1);
    } else {
        buf = realloc(s->buf, cap);
    }
    if (!buf) {
        s->failed = true;
        return false;
    }
    s->buf = buf;
    s->cap = cap;
    return true;
}

void np_str_append_n_slow(struct np_str *s, const char *text, size_t n) {
    if (!np_str_reserve(s, n))
        return;
    memcpy(s->buf + s->len, text, n);
    s->len += n;
    s->buf[s->len] = '\0';
}

void np_str_append_u64(struct np_str *s, uint64_t v) {
    static const char pairs[] =
        "00010203040506070809101112131415161718192021222324252627282930313233"
        "34353637383940414243444546474849505152535455565758596061626364656667"
        "6869707172737475767778798081828384858687888990919293949596979899";
    char buf[20], *p = buf + sizeof(buf);
    while (v >= 100) { /* two digits a step */
        unsigned d = (unsigned)(v % 100);
        v /= 100;
        p -= 2;
        memcpy(p, pairs + 2 * d, 2);
    }
    if (v >= 10) {
        p -= 2;
        memcpy(p, pairs + 2 * v, 2);
    } else {
        *--p = (char)('0' + v);
    }
    np_str_append_n(s, p, (size_t)(buf + sizeof(buf) - p));
}

void np_str_append_i64(struct np_str *s, int64_t v) {
    if (v < 0) {
        np_str_append_n(s, "-", 1);
        np_str_append_u64(s, (uint64_t)0 - (uint64_t)v);
        return;
    }
    np_str_append_u64(s, (uint64_t)v);
}

const char *np_hex_digits(char buf[NP_HEX_DIGITS_SIZE], uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    char *p = buf + NP_HEX_DIGITS_SIZE;
    *--p = '\0';
    do
        *--p = digits[v & 15];
    while (v >>= 4);
    return p;
}

void np_str_append_hex(struct np_str *s, uint64_t v) {
    char buf[NP_HEX_DIGITS_SIZE];
    const char *digits = np_hex_digits(buf, v);
    np_str_append_n(s, digits, (size_t)(buf + sizeof(buf) - 1 - digits));
}

void np_str_append(struct np_str *s, const char *text) {
    np_str_append_n(s, text, strlen(text));
}

void np_str_appendf(struct np_str *s, const char *fmt, ...) {
    va_list ap;
    size_t room = s->cap > s->len ? s->cap - s->len : 0;

    /* Usually it fits the spare capacity: format once. */
    va_start(ap, fmt);
    int n = vsnprintf(room ? s->buf + s->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < room) {
        s->len += (size_t)n;
        return;
    }
    if (!np_str_reserve(s, (size_t)n)) {
        if (s->buf && !borrowed(s))
            s->buf[s->len] = '\0'; /* undo the truncated attempt */
        return;
    }
    va_start(ap, fmt);
    vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    s->len += (size_t)n;
}

const char *np_str_cstr(const struct np_str *s) {
    return s->buf ? s->buf : "";
}

void np_sanitize_frame(char *out, size_t out_size, const char *in, bool no_spaces) {
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)in;

    if (out_size == 0)
        return;
    for (; *p && o + 1 < out_size; p++) {
        unsigned char c = *p;
        if (c == ';' || c < 0x20 || c == 0x7f)
            c = '_';
        else if (no_spaces && c == ' ')
            c = '_';
        out[o++] = (char)c;
    }
    if (*p) { /* cut short: not in the middle of a UTF-8 character */
        size_t lead = o;
        while (lead > 0 && o - lead < 3 && ((unsigned char)out[lead - 1] & 0xc0) == 0x80)
            lead--;
        unsigned char c = lead > 0 ? (unsigned char)out[lead - 1] : 0;
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        if (c >= 0xc0 && o - (lead - 1) < need)
            o = lead - 1;
    }
    out[o] = '\0';
}

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t np_monotonic_ns(void) {
    return clock_ns(CLOCK_MONOTONIC);
}

uint64_t np_realtime_ns(void) {
    return clock_ns(CLOCK_REALTIME);
}

void np_format_utc(char *out, size_t size, uint64_t realtime_ns, bool compact) {
    time_t sec = (time_t)(realtime_ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&sec, &tm);
    strftime(out, size, compact ? "%Y%m%dT%H%M%SZ" : "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int np_parse_seconds(const char *text, double *out) {
    char *end = NULL;

    if (!text || !*text)
        return -EINVAL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || v != v || v < 0 || v > 1e9)
        return -EINVAL;
    *out = v;
    return 0;
}

int np_parse_long(const char *text, long min, long max, long *out) {
    char *end = NULL;

    if (!text || !*text)
        return -EINVAL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int np_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out) {
    char *end = NULL;

    if (!text || *text < '0' || *text > '9') /* strtoull would take "-5" and " 5" */
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int np_read_file(const char *path, char **out, size_t *out_len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;

    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    for (;;) {
        if (len + 1 >= cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                close(fd);
                return -ENOMEM;
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int err = -errno;
            free(buf);
            close(fd);
            return err;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    *out = buf;
    if (out_len)
        *out_len = len;
    return 0;
}

int np_read_process(int pid, uint64_t addr, void *buf, size_t len) {
    struct iovec local = {.iov_base = buf, .iov_len = len};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
    ssize_t n = process_vm_readv((pid_t)pid, &local, 1, &remote, 1, 0);
    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EFAULT;
}

/* 'T' (stopped) or 't' (stopped, traced: we hold our child with ptrace) */
static bool process_stopped(int pid) {
    char path[64], *text = NULL;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if (np_read_file(path, &text, NULL) != 0)
        return true; /* gone: nothing to wait for */
    const char *paren = strrchr(text, ')');
    bool stopped = !paren || paren[1] == '\0' || paren[2] == 'T' || paren[2] == 't';
    free(text);
    return stopped;
}

void np_continue_stopped(int pid, int timeout_ms) {
    uint64_t deadline = np_monotonic_ns() + (uint64_t)timeout_ms * 1000000u;
    while (!process_stopped(pid) && np_monotonic_ns() < deadline) {
        struct timespec pause = {0, 50000};
        nanosleep(&pause, NULL);
    }
    kill(pid, SIGCONT);
}

int np_write_atomic(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx) {
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", path) < 0)
        return -ENOMEM;
    FILE *f = fopen(tmp, "we");
    int err = f ? fill(f, ctx) : -errno;
    if (f && !err && ferror(f))
        err = -EIO;
    if (f && fclose(f) != 0 && !err)
        err = -errno;
    if (!err && rename(tmp, path) != 0)
        err = -errno;
    if (err)
        unlink(tmp);
    free(tmp);
    return err;
}

uint64_t np_self_rss_bytes(void) {
    char *text = NULL;
    size_t len;
    long pages = 0;
    if (np_read_file("/proc/self/statm", &text, &len) == 0) {
        if (sscanf(text, "%*s %ld", &pages) != 1 || pages < 0)
            pages = 0;
        free(text);
    }
    return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}
