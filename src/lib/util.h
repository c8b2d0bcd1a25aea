/* util.h - logging, growable strings and arrays, and small helpers shared
 * by every part of ncclprobe. Errors are returned as negative errno
 * throughout; these helpers follow the same rule. */
#ifndef NP_UTIL_H
#define NP_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* The struct that holds member `member` at ptr (a typed way back from a
 * part handed to a lower stage to the whole). */
#define np_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

enum np_log_level { NP_LOG_ERROR = 0, NP_LOG_WARN, NP_LOG_INFO, NP_LOG_DEBUG };

void np_log_set_level(enum np_log_level level);
/* Prints "ncclprobe: [error: |warning: ]..." to stderr; errno is left as it was. */
void np_log(enum np_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* How many errors were logged (printed or not): a command that logged one
 * exits non-zero (main.c), the rule the manual states. */
unsigned np_log_errors(void);

/* Room for `needed` items of `size` bytes: array itself when it has it,
 * else a bigger copy (capacity doubled, from 16), *cap updated; NULL when out
 * of memory (array is still valid then). */
void *np_grow_array(void *array, size_t *cap, size_t needed, size_t size);

/* kernel.perf_event_max_stack (frames bpf_get_stack returns at most), or -errno. */
long np_perf_event_max_stack(void);
#define np_err(...) np_log(NP_LOG_ERROR, __VA_ARGS__)
#define np_warn(...) np_log(NP_LOG_WARN, __VA_ARGS__)
#define np_info(...) np_log(NP_LOG_INFO, __VA_ARGS__)
#define np_debug(...) np_log(NP_LOG_DEBUG, __VA_ARGS__)

/* A growable, always NUL-terminated string. A failed allocation latches
 * `failed`; the string keeps what fitted. A string can also borrow text it
 * does not own (np_str_borrow: cap 0, buf set): it is read in place, and
 * copied into a buffer of its own at the first change. */
struct np_str {
    char *buf;
    size_t len;
    size_t cap;
    bool failed;
};

void np_str_init(struct np_str *s);
void np_str_free(struct np_str *s);
void np_str_reset(struct np_str *s);
void np_str_append(struct np_str *s, const char *text);
void np_str_append_n_slow(struct np_str *s, const char *text, size_t n);
static inline void np_str_append_n(struct np_str *s, const char *text, size_t n) {
    if (s->len + n + 1 > s->cap) { /* also: a borrowed text, and no buffer yet */
        np_str_append_n_slow(s, text, n);
        return;
    }
    __builtin_memcpy(s->buf + s->len, text, n);
    s->len += n;
    s->buf[s->len] = '\0';
}
/* s reads text[0..len] (NUL-terminated) in place, until it is changed or
 * reset; text must outlive that. s's own buffer is freed. */
void np_str_borrow(struct np_str *s, const char *text, size_t len);
void np_str_appendf(struct np_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The hot writers' number formatting, without printf: decimal ("%" PRIu64,
 * "%" PRId64) and lower-case hex without a prefix ("%" PRIx64). */
void np_str_append_u64(struct np_str *s, uint64_t v);
void np_str_append_i64(struct np_str *s, int64_t v);
void np_str_append_hex(struct np_str *s, uint64_t v);
/* V in lower-case hex, no "0x", NUL-terminated, at the end of BUF: returns
 * where the digits start. */
#define NP_HEX_DIGITS_SIZE 17
const char *np_hex_digits(char buf[NP_HEX_DIGITS_SIZE], uint64_t v);
const char *np_str_cstr(const struct np_str *s);

/* Copies `in` into `out` (at most out_size bytes incl. NUL) keeping only
 * characters that are safe in a folded-stack frame: no ';', no control
 * characters or newlines; spaces become '_' when `no_spaces`. Cut short,
 * it ends before a UTF-8 character that does not fit whole. */
void np_sanitize_frame(char *out, size_t out_size, const char *in, bool no_spaces);

uint64_t np_monotonic_ns(void);
uint64_t np_realtime_ns(void);
/* A CLOCK_REALTIME time in UTC: "2026-11-22T16:11:07Z", or compact
 * "20261122T161107Z" (for file names). */
void np_format_utc(char *out, size_t size, uint64_t realtime_ns, bool compact);

/* Parses a non-negative decimal number of seconds ("2", "0.5"); -EINVAL on junk. */
int np_parse_seconds(const char *text, double *out);
/* Parses a decimal integer in [min, max]; -EINVAL / -ERANGE otherwise. */
int np_parse_long(const char *text, long min, long max, long *out);
/* The same for unsigned 64-bit values (digits only: no sign, no spaces). */
int np_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* Copies len bytes at addr in process pid (process_vm_readv): 0, or -EFAULT
 * when not all of it is mapped, -ESRCH when the process is gone. */
int np_read_process(int pid, uint64_t addr, void *buf, size_t len);

/* Continues a process that BPF stopped (bpf_send_signal(SIGSTOP)). From a
 * uprobe the kernel may deliver that signal a little later (irq_work):
 * wait, at most timeout_ms, for the process to be stopped first, so that
 * the stop does not arrive after the SIGCONT and hold it for good. */
void np_continue_stopped(int pid, int timeout_ms);

/* Writes path through path.tmp, renamed over path once fill(f, ctx) - which
 * writes the content - returned 0: readers never see half a file. 0 or
 * -errno (fill's); the temporary file is removed on failure. */
int np_write_atomic(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx);

/* Reads a whole small file (e.g. under /proc) into a NUL-terminated buffer. */
int np_read_file(const char *path, char **out, size_t *out_len);

/* This process's resident set size in bytes (/proc/self/statm); 0 if unreadable. */
uint64_t np_self_rss_bytes(void);

#endif
