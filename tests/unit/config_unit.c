/* config_unit.c - unit tests for the daemon's configuration file
 * (daemon/config.h): defaults, every key with good and bad values and the
 * "FILE:LINE: KEY: ..." of each error, comments, quoting, CRLF, duplicate
 * and unknown keys, overflow, unit suffixes, a failed parse leaving the old
 * configuration as it was, the process filter, np_config_load on files that
 * are not configurations and on packaging/ncclprobe.conf (the defaults), and
 * the table of settings this parser shares with record's options.
 * Prints "config_unit: N passed, N failed" and exits non-zero on any failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "daemon/config.h"
#include "writers/formats.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define SHIPPED_CONF "packaging/ncclprobe.conf"

static char err[1024];

static int parse_n(const char *text, size_t len, struct np_daemon_config *c) {
    return np_config_parse(text, len, "t.conf", c, err, sizeof(err));
}

static int parse(const char *text, struct np_daemon_config *c) {
    return parse_n(text, strlen(text), c);
}

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool same_globs(const struct np_globs *a, const struct np_globs *b) {
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->items[i], b->items[i]) != 0)
            return false;
    return true;
}

static bool same_str(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Whether two configurations have the same values (not the same pointers). */
static bool same_config(const struct np_daemon_config *a, const struct np_daemon_config *b) {
    return same_str(a->output_dir, b->output_dir) && same_str(a->ctl_socket, b->ctl_socket) &&
           same_str(a->cupti_socket, b->cupti_socket) && same_str(a->flag_file, b->flag_file) &&
           a->gpu == b->gpu && a->aggregate == b->aggregate && a->nccl_flows == b->nccl_flows &&
           a->gpu_timeout_ms == b->gpu_timeout_ms &&
           a->aggregate_interval_ms == b->aggregate_interval_ms &&
           a->max_window_ms == b->max_window_ms && a->max_output_age_ms == b->max_output_age_ms &&
           same_globs(&a->include_comm, &b->include_comm) &&
           same_globs(&a->exclude_comm, &b->exclude_comm) &&
           same_globs(&a->include_exe, &b->include_exe) &&
           same_globs(&a->exclude_exe, &b->exclude_exe) &&
           same_globs(&a->include_cgroup, &b->include_cgroup) &&
           same_globs(&a->exclude_cgroup, &b->exclude_cgroup) &&
           same_globs(&a->include_container, &b->include_container) &&
           same_globs(&a->exclude_container, &b->exclude_container) &&
           a->max_output_bytes == b->max_output_bytes && a->cache_bytes == b->cache_bytes &&
           a->ring_buffer_bytes == b->ring_buffer_bytes &&
           a->reader_backlog_bytes == b->reader_backlog_bytes &&
           a->reader_threads == b->reader_threads &&
           a->cpu_budget_percent == b->cpu_budget_percent && a->rate_limit == b->rate_limit &&
           a->unwind == b->unwind && a->stack_bytes == b->stack_bytes &&
           a->python_depth == b->python_depth && a->python == b->python &&
           a->log_level == b->log_level && a->formats == b->formats;
}

/* A configuration that differs from the defaults in every key. */
static const char *const ALL_KEYS = "output_dir = /data/np\n"
                                    "ctl_socket = /tmp/np/ctl.sock\n"
                                    "cupti_socket = /tmp/np/cupti.sock\n"
                                    "gpu = no\n"
                                    "gpu_timeout = 500ms\n"
                                    "nccl_flows = yes\n"
                                    "flag_file = /run/np.flag\n"
                                    "aggregate = off\n"
                                    "aggregate_interval = 90\n"
                                    "max_window = 1.5h\n"
                                    "include_comm = python* torchrun\n"
                                    "exclude_comm = pt_*\n"
                                    "include_exe = /opt/*\n"
                                    "exclude_exe = */debug/*\n"
                                    "include_cgroup = /kubepods/*\n"
                                    "exclude_cgroup = /kubepods/besteffort/*\n"
                                    "include_container = ?*\n"
                                    "exclude_container = abc*\n"
                                    "max_output_size = 1T\n"
                                    "max_output_age = 0\n"
                                    "cache_size = 1G\n"
                                    "cpu_budget = 2.5%\n"
                                    "rate_limit = 100\n"
                                    "ring_buffer = 256M\n"
                                    "reader_backlog = 0\n"
                                    "reader_threads = 3\n"
                                    "unwind = fp\n"
                                    "stack_bytes = 8192\n"
                                    "python = raw\n"
                                    "python_depth = 16\n"
                                    "log_level = debug\n"
                                    "formats = svg\n"
                                    "http_listen = 127.0.0.1:9464\n"
                                    "http_allow_remote = yes\n"
                                    "http_token_file = /etc/np/token\n";

static void check_all_keys(const struct np_daemon_config *c) {
    CHECK(c->http_listen && strcmp(c->http_listen, "127.0.0.1:9464") == 0);
    CHECK(c->http_allow_remote);
    CHECK(c->http_token_file && strcmp(c->http_token_file, "/etc/np/token") == 0);
    CHECK(strcmp(c->output_dir, "/data/np") == 0);
    CHECK(strcmp(c->ctl_socket, "/tmp/np/ctl.sock") == 0);
    CHECK(strcmp(c->cupti_socket, "/tmp/np/cupti.sock") == 0);
    CHECK(!c->gpu);
    CHECK(c->gpu_timeout_ms == 500);
    CHECK(c->flag_file && strcmp(c->flag_file, "/run/np.flag") == 0);
    CHECK(!c->aggregate);
    CHECK(c->aggregate_interval_ms == 90000);
    CHECK(c->max_window_ms == 5400000);
    CHECK(c->include_comm.n == 2 && strcmp(c->include_comm.items[0], "python*") == 0 &&
          strcmp(c->include_comm.items[1], "torchrun") == 0);
    CHECK(c->exclude_comm.n == 1 && strcmp(c->exclude_comm.items[0], "pt_*") == 0);
    CHECK(c->include_exe.n == 1 && strcmp(c->include_exe.items[0], "/opt/*") == 0);
    CHECK(c->exclude_exe.n == 1 && strcmp(c->exclude_exe.items[0], "*/debug/*") == 0);
    CHECK(c->include_cgroup.n == 1 && strcmp(c->include_cgroup.items[0], "/kubepods/*") == 0);
    CHECK(c->exclude_cgroup.n == 1 &&
          strcmp(c->exclude_cgroup.items[0], "/kubepods/besteffort/*") == 0);
    CHECK(c->include_container.n == 1 && strcmp(c->include_container.items[0], "?*") == 0);
    CHECK(c->exclude_container.n == 1 && strcmp(c->exclude_container.items[0], "abc*") == 0);
    CHECK(c->max_output_bytes == 1ull << 40);
    CHECK(c->max_output_age_ms == 0);
    CHECK(c->cache_bytes == GIB);
    CHECK(c->cpu_budget_percent == 2.5);
    CHECK(c->rate_limit == 100);
    CHECK(c->ring_buffer_bytes == 256 * MIB);
    CHECK(c->reader_backlog_bytes == 0);
    CHECK(c->reader_threads == 3);
    CHECK(c->unwind == UNWIND_FP);
    CHECK(c->stack_bytes == 8192);
    CHECK(c->python == NP_PYTHON_RAW);
    CHECK(c->python_depth == 16);
    CHECK(c->log_level == NP_LOG_DEBUG);
    CHECK(c->formats == NP_FORMAT_SVG);
}

static void test_defaults(void) {
    struct np_daemon_config c, d;

    CHECK(np_config_defaults(&c) == 0);
    CHECK(strcmp(c.output_dir, "/var/lib/ncclprobe") == 0);
    CHECK(strcmp(c.ctl_socket, "/run/ncclprobe/ctl.sock") == 0);
    CHECK(strcmp(c.cupti_socket, "/run/ncclprobe/cupti.sock") == 0);
    CHECK(c.flag_file == NULL);
    CHECK(c.gpu && c.aggregate);
    CHECK(c.gpu_timeout_ms == 5000);
    CHECK(c.aggregate_interval_ms == 600000);
    CHECK(c.max_window_ms == 3600000);
    CHECK(c.max_output_age_ms == 7 * 86400000ull);
    CHECK(c.include_comm.n == 0 && c.exclude_comm.n == 0 && c.include_exe.n == 0 &&
          c.exclude_exe.n == 0 && c.include_cgroup.n == 0 && c.exclude_cgroup.n == 0 &&
          c.include_container.n == 0 && c.exclude_container.n == 0);
    CHECK(c.max_output_bytes == 10 * GIB);
    CHECK(c.cache_bytes == 256 * MIB);
    CHECK(c.ring_buffer_bytes == 64 * MIB);
    CHECK(c.reader_backlog_bytes == 2 * GIB);
    CHECK(c.reader_threads == -1); /* auto */
    CHECK(c.cpu_budget_percent == 10);
    CHECK(c.rate_limit == 2000);
    CHECK(c.unwind == UNWIND_AUTO);
    CHECK(c.stack_bytes == 16384);
    CHECK(c.python == NP_PYTHON_MERGE);
    CHECK(c.python_depth == 128);
    CHECK(c.formats == NP_FORMATS_DEFAULT);
    CHECK(c.log_level == NP_LOG_INFO);

    /* empty text, only comments and blanks: the defaults */
    memset(&d, 0, sizeof(d));
    CHECK(parse("", &d) == 0);
    CHECK(same_config(&c, &d));
    CHECK(parse("# nothing\n\n   \n\t# indented comment\n", &d) == 0);
    CHECK(same_config(&c, &d));
    CHECK(parse_n(NULL, 0, &d) == 0);
    CHECK(same_config(&c, &d));
    np_config_free(&d);
    np_config_free(&c);
    CHECK(c.output_dir == NULL); /* zeroed: a second free is harmless */
    np_config_free(&c);
}

static void test_all_keys(void) {
    struct np_daemon_config c = {0};

    CHECK(parse(ALL_KEYS, &c) == 0);
    CHECK(err[0] == '\0');
    check_all_keys(&c);

    /* a reparse without a key gives that key's default back, not the old value */
    CHECK(parse("gpu = yes\n", &c) == 0);
    CHECK(c.gpu);
    CHECK(strcmp(c.output_dir, "/var/lib/ncclprobe") == 0);
    CHECK(c.include_comm.n == 0 && c.flag_file == NULL);
    CHECK(c.rate_limit == 2000);
    np_config_free(&c);
}

/* text must fail on line `line` naming `key`, with `what` in the message;
 * the configuration given (ALL_KEYS) is left exactly as it was. */
static void expect_error(const char *text, unsigned line, const char *key, const char *what) {
    struct np_daemon_config c = {0}, before;
    char prefix[128];

    if (parse(ALL_KEYS, &c) != 0) {
        CHECK(!"ALL_KEYS parses");
        return;
    }
    memcpy(&before, &c, sizeof(c));
    int rc = parse(text, &c);
    CHECK(rc == -EINVAL);
    CHECK(memcmp(&before, &c, sizeof(c)) == 0); /* same pointers and values */
    check_all_keys(&c);
    if (key)
        snprintf(prefix, sizeof(prefix), "t.conf:%u: %s: ", line, key);
    else
        snprintf(prefix, sizeof(prefix), "t.conf:%u: ", line);
    bool ok = rc == -EINVAL && starts_with(err, prefix) && strstr(err, what);
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  text %s\n  got  \"%s\"\n  want \"%s...%s...\"\n", text, err, prefix,
                what);
    np_config_free(&c);
}

/* The bad line goes on line 3, after a comment and a good line. */
static void expect_bad_value(const char *line, const char *key, const char *what) {
    const char *good = strcmp(key, "log_level") ? "log_level = warn" : "python_depth = 3";
    char text[512];
    snprintf(text, sizeof(text), "# a config\n%s\n%s\nrate_limit = 5\n", good, line);
    expect_error(text, 3, key, what);
}

static void test_bad_values(void) {
    expect_bad_value("output_dir = var/lib", "output_dir",
                     "'var/lib' is not an absolute path (expected an absolute path)");
    expect_bad_value("output_dir =", "output_dir", "empty value (expected an absolute path)");
    expect_bad_value("output_dir = \"\"", "output_dir", "empty value");
    expect_bad_value("output_dir = ./out", "output_dir", "not an absolute path");
    expect_bad_value("ctl_socket = ctl.sock", "ctl_socket", "not an absolute path");
    expect_bad_value("ctl_socket = /run/"
                     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                     "xxxxxxxxxxxxxxxxxxxxxxxx.sock",
                     "ctl_socket", "path too long, 111 bytes (expected an absolute path shorter");
    expect_bad_value("cupti_socket = ", "cupti_socket", "empty value");
    expect_bad_value("cupti_socket = run/cupti.sock", "cupti_socket", "not an absolute path");
    expect_bad_value("gpu = maybe", "gpu", "'maybe' is not a boolean (expected yes, no, true");
    expect_bad_value("gpu =", "gpu", "empty value");
    expect_bad_value("gpu_timeout = 0", "gpu_timeout", "'0': too small (expected a duration");
    expect_bad_value("gpu_timeout = 2h", "gpu_timeout", "'2h': too large");
    expect_bad_value("gpu_timeout = 5x", "gpu_timeout", "'5x': unknown unit");
    expect_bad_value("gpu_timeout = 5 s", "gpu_timeout", "unknown unit");
    expect_bad_value("gpu_timeout = 5S", "gpu_timeout", "unknown unit");
    expect_bad_value("gpu_timeout = 1.s", "gpu_timeout", "no digit after the decimal point");
    expect_bad_value("gpu_timeout = .5s", "gpu_timeout", "not a duration");
    expect_bad_value("gpu_timeout = -1", "gpu_timeout", "not a duration");
    expect_bad_value("gpu_timeout = 1e3", "gpu_timeout", "unknown unit");
    expect_bad_value("flag_file = run/flag", "flag_file",
                     "not an absolute path (expected an absolute path, or empty for none)");
    expect_bad_value("aggregate = 2", "aggregate", "'2' is not a boolean");
    expect_bad_value("aggregate_interval = 9s", "aggregate_interval",
                     "too small (expected a duration of at least 10s");
    expect_bad_value("aggregate_interval = 9.999s", "aggregate_interval", "too small");
    expect_bad_value("aggregate_interval = ten", "aggregate_interval", "not a duration");
    expect_bad_value("max_window = 0.5s", "max_window", "too small");
    expect_bad_value("max_window = 1M", "max_window", "unknown unit");
    expect_bad_value("max_window = 36501d", "max_window", "too large");
    expect_bad_value("max_output_size = 1023K", "max_output_size",
                     "'1023K': too small (expected a size of at least 1M");
    expect_bad_value("max_output_size = 1.5G", "max_output_size", "not a whole number");
    expect_bad_value("max_output_size = 10GB", "max_output_size", "unknown unit");
    expect_bad_value("max_output_size = 10X", "max_output_size", "unknown unit");
    expect_bad_value("max_output_size = big", "max_output_size", "not a size");
    expect_bad_value("max_output_age = 30s", "max_output_age",
                     "too small (expected 0 for no limit, or a duration of at least 1m");
    expect_bad_value("max_output_age = 0.00001s", "max_output_age", "too small");
    expect_bad_value("max_output_age = forever", "max_output_age", "not a duration");
    expect_bad_value("cache_size = 0", "cache_size", "too small");
    expect_bad_value("cache_size = -1M", "cache_size", "not a size");
    expect_bad_value("cpu_budget = 0", "cpu_budget", "'0' is out of range (expected a percentage");
    expect_bad_value("cpu_budget = 6401%", "cpu_budget", "out of range");
    expect_bad_value("cpu_budget = 0.5", "cpu_budget", "out of range");
    expect_bad_value("cpu_budget = 10 %", "cpu_budget", "not a percentage");
    expect_bad_value("cpu_budget = 1e1", "cpu_budget", "not a percentage");
    expect_bad_value("cpu_budget = %", "cpu_budget", "not a percentage");
    expect_bad_value("cpu_budget = inf", "cpu_budget", "not a percentage");
    expect_bad_value("rate_limit = 0", "rate_limit", "'0' is out of range (expected launches");
    expect_bad_value("rate_limit = 1000000001", "rate_limit", "out of range");
    expect_bad_value("rate_limit = 1.5", "rate_limit", "not a whole number");
    expect_bad_value("rate_limit = +5", "rate_limit", "not a whole number");
    expect_bad_value("ring_buffer = 96M", "ring_buffer",
                     "'96M': not a power of two (expected a power of two from 1M to 1G");
    expect_bad_value("ring_buffer = 512K", "ring_buffer", "too small");
    expect_bad_value("ring_buffer = 2G", "ring_buffer", "too large");
    expect_bad_value("unwind = lbr", "unwind", "unknown value 'lbr' (expected auto, dwarf or fp)");
    expect_bad_value("stack_bytes = 511", "stack_bytes", "out of range");
    expect_bad_value("stack_bytes = 65544", "stack_bytes", "out of range");
    expect_bad_value("stack_bytes = 1001", "stack_bytes",
                     "'1001' is not a multiple of 8 (expected a multiple of 8 from 512 to 65536)");
    expect_bad_value("python = on", "python", "unknown value 'on' (expected merge, raw or off)");
    expect_bad_value("python_depth = 0", "python_depth", "out of range");
    expect_bad_value("python_depth = 1025", "python_depth",
                     "out of range (expected an integer from 1 to 1024)");
    expect_bad_value("log_level = trace", "log_level",
                     "unknown value 'trace' (expected error, warn, info or debug)");
    expect_bad_value("log_level = ", "log_level", "empty value");
    expect_bad_value("formats = svg,gif", "formats", "unknown format 'gif'");

    /* list keys: only the syntax can be wrong */
    expect_bad_value("include_comm = \"python*", "include_comm", "unterminated quoted value");
    expect_bad_value("exclude_comm = \"a\" b", "exclude_comm",
                     "text after the closing quote (only a # comment may follow)");
    expect_bad_value("include_exe = a\"b", "include_exe", "'\"' inside an unquoted value");
    expect_bad_value("exclude_exe = \"a\\nb\"", "exclude_exe", "unknown escape");
    expect_bad_value("include_cgroup = \"/a\\", "include_cgroup", "unknown escape");
    expect_bad_value("exclude_cgroup = \"/a", "exclude_cgroup", "unterminated");
    expect_bad_value("include_container = \"abc\"x", "include_container", "text after");
    expect_bad_value("exclude_container = \"", "exclude_container", "unterminated");
}

static void test_overflow(void) {
    expect_bad_value("max_output_size = 18446744073709551616", "max_output_size",
                     "'18446744073709551616': too large");
    expect_bad_value("max_output_size = 99999999999999999999999999999", "max_output_size",
                     "too large");
    expect_bad_value("cache_size = 17179869184G", "cache_size", "too large"); /* 2^64 */
    expect_bad_value("cache_size = 16777216T", "cache_size", "too large");
    expect_bad_value("max_window = 213503982334601d", "max_window", "too large");
    expect_bad_value("max_window = 99999999999999999999999s", "max_window", "too large");
    expect_bad_value("max_window = 18446744073709551.616s", "max_window", "too large");
    expect_bad_value("max_output_age = 307445734561825861m", "max_output_age", "too large");
    expect_bad_value("python_depth = 99999999999999999999999", "python_depth", "out of range");
}

/* The line above that passes: a bad-value check of a good value fails. */
static void test_good_edges(void) {
    struct np_daemon_config c = {0};

    CHECK(parse("max_output_size = 18446744073709551615\n"
                "cache_size = 17179869183G\n"
                "max_window = 36500d\n"
                "gpu_timeout = 1h\n"
                "ring_buffer = 1G\n"
                "cpu_budget = 6400\n"
                "rate_limit = 1000000000\n"
                "stack_bytes = 65536\n"
                "python_depth = 1024\n",
                &c) == 0);
    CHECK(c.max_output_bytes == UINT64_MAX);
    CHECK(c.cache_bytes == 17179869183ull << 30);
    CHECK(c.max_window_ms == 36500ull * 86400000);
    CHECK(c.gpu_timeout_ms == 3600000);
    CHECK(c.ring_buffer_bytes == GIB);
    CHECK(c.cpu_budget_percent == 6400); /* 64 cores */
    CHECK(c.rate_limit == 1000000000);
    CHECK(c.stack_bytes == 65536);
    CHECK(c.python_depth == 1024);
    CHECK(parse("gpu_timeout = 1ms\nring_buffer = 1M\ncpu_budget = 1%\nrate_limit = 1\n"
                "stack_bytes = 512\npython_depth = 1\naggregate_interval = 10s\n"
                "max_window = 1s\nmax_output_age = 1m\ncache_size = 1M\nmax_output_size = 1M\n",
                &c) == 0);
    CHECK(c.gpu_timeout_ms == 1 && c.ring_buffer_bytes == MIB && c.cpu_budget_percent == 1);
    CHECK(c.rate_limit == 1 && c.stack_bytes == 512 && c.python_depth == 1);
    CHECK(c.aggregate_interval_ms == 10000 && c.max_window_ms == 1000);
    CHECK(c.max_output_age_ms == 60000 && c.cache_bytes == MIB && c.max_output_bytes == MIB);
    np_config_free(&c);
}

static void test_suffixes(void) {
    struct np_daemon_config c = {0};
    static const struct {
        const char *text;
        uint64_t bytes;
    } sizes[] = {
        {"1048576", MIB},   {"1024K", MIB},     {"1024k", MIB},     {"1M", MIB},
        {"1MiB", MIB},      {"3m", 3 * MIB},    {"2G", 2 * GIB},    {"2GiB", 2 * GIB},
        {"1T", 1ull << 40}, {"1t", 1ull << 40}, {"0002M", 2 * MIB},
    };
    static const struct {
        const char *text;
        uint64_t ms;
    } durations[] = {
        {"90", 90000},
        {"90s", 90000},
        {"1.5s", 1500},
        {"1.5", 1500},
        {"2500ms", 2500},
        {"10m", 600000},
        {"1.25m", 75000},
        {"2h", 7200000},
        {"0.5h", 1800000},
        {"7d", 604800000},
        {"0.5d", 43200000},
        {"1.0001s", 1000},
        {"60.999999999999999999999s", 60999},
        {"00012s", 12000},
    };
    char text[128];

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        snprintf(text, sizeof(text), "cache_size = %s\n", sizes[i].text);
        CHECK(parse(text, &c) == 0);
        CHECK(c.cache_bytes == sizes[i].bytes);
        if (c.cache_bytes != sizes[i].bytes)
            fprintf(stderr, "  %s: %llu\n", sizes[i].text, (unsigned long long)c.cache_bytes);
    }
    for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
        snprintf(text, sizeof(text), "max_window = %s\n", durations[i].text);
        CHECK(parse(text, &c) == 0);
        CHECK(c.max_window_ms == durations[i].ms);
        if (c.max_window_ms != durations[i].ms)
            fprintf(stderr, "  %s: %llu\n", durations[i].text, (unsigned long long)c.max_window_ms);
    }
    /* booleans and words: any case */
    static const char *const yes[] = {"yes", "true", "on", "1", "YES", "True"};
    static const char *const no[] = {"no", "false", "off", "0", "No", "OFF"};
    for (size_t i = 0; i < 6; i++) {
        snprintf(text, sizeof(text), "gpu = %s\naggregate = %s\n", no[i], yes[i]);
        CHECK(parse(text, &c) == 0);
        CHECK(!c.gpu && c.aggregate);
    }
    CHECK(parse("formats = pprof svg\n", &c) == 0 &&
          c.formats == (NP_FORMAT_PPROF | NP_FORMAT_SVG));
    CHECK(parse("formats = none\n", &c) == 0 && c.formats == 0);
    CHECK(parse("unwind = DWARF\npython = Off\nlog_level = ERROR\n", &c) == 0);
    CHECK(c.unwind == UNWIND_DWARF && c.python == NP_PYTHON_OFF && c.log_level == NP_LOG_ERROR);
    CHECK(parse("unwind = auto\npython = merge\nlog_level = warn\n", &c) == 0);
    CHECK(c.unwind == UNWIND_AUTO && c.python == NP_PYTHON_MERGE && c.log_level == NP_LOG_WARN);
    CHECK(parse("log_level = info\ncpu_budget = 33\n", &c) == 0);
    CHECK(c.log_level == NP_LOG_INFO && c.cpu_budget_percent == 33);
    CHECK(parse("max_output_age = 0s\n", &c) == 0);
    CHECK(c.max_output_age_ms == 0);
    CHECK(parse("max_output_age = 0.0\n", &c) == 0);
    CHECK(c.max_output_age_ms == 0);
    np_config_free(&c);
}

static void test_syntax(void) {
    struct np_daemon_config c = {0};

    /* whitespace, tabs, comments after blanks, '#' inside a word */
    CHECK(parse("  output_dir=/a/b  \n"
                "\tflag_file\t=\t/x#y\t# the flag\n"
                "cupti_socket = /c.sock # comment\n"
                "include_comm =   a   b\tc  # three\n"
                "exclude_comm = # empty\n"
                "ctl_socket =/s#\n",
                &c) == 0);
    CHECK(strcmp(c.output_dir, "/a/b") == 0);
    CHECK(strcmp(c.flag_file, "/x#y") == 0);
    CHECK(strcmp(c.cupti_socket, "/c.sock") == 0);
    CHECK(c.include_comm.n == 3 && strcmp(c.include_comm.items[0], "a") == 0 &&
          strcmp(c.include_comm.items[1], "b") == 0 && strcmp(c.include_comm.items[2], "c") == 0);
    CHECK(c.exclude_comm.n == 0);
    CHECK(strcmp(c.ctl_socket, "/s#") == 0);

    /* quoting: blanks, '#', escapes kept; a comment may follow */
    CHECK(parse("output_dir = \"/var/a b/#1\"  # c\n"
                "flag_file = \"/q\\\"uote\\\\d\"\n"
                "include_exe = \"/opt/my app/*  */bin/*\"\n"
                "exclude_exe = \"\"\n",
                &c) == 0);
    CHECK(strcmp(c.output_dir, "/var/a b/#1") == 0);
    CHECK(strcmp(c.flag_file, "/q\"uote\\d") == 0);
    CHECK(c.include_exe.n == 3 && strcmp(c.include_exe.items[0], "/opt/my") == 0 &&
          strcmp(c.include_exe.items[1], "app/*") == 0);
    CHECK(c.exclude_exe.n == 0);

    /* an empty flag_file (quoted or not) is none */
    CHECK(parse("flag_file = \"\"\n", &c) == 0);
    CHECK(c.flag_file == NULL);
    CHECK(parse("flag_file =\n", &c) == 0);
    CHECK(c.flag_file == NULL);

    /* CRLF line ends, a UTF-8 byte order mark, no newline at the end */
    CHECK(parse("\xef\xbb\xbf# windows\r\nrate_limit = 7\r\n\r\noutput_dir = \"/w\"\r\n"
                "include_comm = x\r\ngpu = off",
                &c) == 0);
    CHECK(c.rate_limit == 7 && strcmp(c.output_dir, "/w") == 0 && !c.gpu);
    CHECK(c.include_comm.n == 1 && strcmp(c.include_comm.items[0], "x") == 0);

    /* a very long line: a list of 2000 patterns and a 4000-byte path */
    struct np_str big;
    np_str_init(&big);
    np_str_append(&big, "include_exe =");
    for (int i = 0; i < 2000; i++)
        np_str_appendf(&big, " /opt/app%d/*", i);
    np_str_append(&big, "\noutput_dir = /");
    for (int i = 0; i < 4000; i++)
        np_str_append(&big, "d");
    np_str_append(&big, "\ngpu = no\n");
    CHECK(!big.failed);
    CHECK(parse(big.buf, &c) == 0);
    CHECK(c.include_exe.n == 2000 && strcmp(c.include_exe.items[1999], "/opt/app1999/*") == 0);
    CHECK(strlen(c.output_dir) == 4001);
    CHECK(!c.gpu);
    np_str_free(&big);

    /* err may be NULL */
    CHECK(np_config_parse("gpu = x\n", 8, "f", &c, NULL, 0) == -EINVAL);
    CHECK(np_config_parse("gpu = x\n", 8, "f", &c, err, 1) == -EINVAL);
    CHECK(err[0] == '\0');
    np_config_free(&c);
}

static void test_line_errors(void) {
    expect_error("gpu = yes\n# x\ngpu = no\n", 3, "gpu",
                 "set again, first set on line 1 (each key at most once)");
    expect_error("include_comm = a\ninclude_comm = a\n", 2, "include_comm", "first set on line 1");
    expect_error("\n\n\n\ncolour = blue\n", 5, "colour",
                 "unknown key (the keys are listed in `man ncclprobe` and docs/daemon.md)");
    expect_error("Output_Dir = /x\n", 1, "Output_Dir", "unknown key");
    expect_error("output dir = /x\n", 1, "output dir", "unknown key");
    expect_error("gpu yes\n", 1, "gpu", "not a 'key = value' line (no '='");
    expect_error("gpu # = yes\n", 1, "gpu", "not a 'key = value' line");
    expect_error("gpu = yes\n  = 5\n", 2, NULL, "missing key before '='");
    expect_error("gpu = yes\nrate_limit = 5\x01\n", 2, NULL,
                 "control character 0x01 at column 15 (only text and tabs)");
    expect_error("gpu = yes\r\nrate_limit = 5\rx\n", 2, NULL, "control character 0x0d");
    /* the first error is the one reported */
    expect_error("gpu = x\ncolour = 1\n", 1, "gpu", "not a boolean");

    /* NUL bytes */
    struct np_daemon_config c = {0}, before;
    static const char nul[] = "gpu = yes\nrate_limit = 5\n# a\0b\n";
    CHECK(parse(ALL_KEYS, &c) == 0);
    memcpy(&before, &c, sizeof(c));
    CHECK(parse_n(nul, sizeof(nul) - 1, &c) == -EINVAL);
    CHECK(starts_with(err, "t.conf:3: NUL byte at column 4"));
    CHECK(memcmp(&before, &c, sizeof(c)) == 0);
    np_config_free(&c);
}

/* A failing parse keeps the old configuration; a good one frees it. */
static void test_keeps_old(void) {
    struct np_daemon_config c = {0}, before;

    CHECK(parse(ALL_KEYS, &c) == 0);
    memcpy(&before, &c, sizeof(c));
    /* fails on its last line: every key before it was parsed into the temporary */
    CHECK(parse("output_dir = /new\ninclude_comm = x y z\nflag_file = /f\nring_buffer = 3M\n",
                &c) == -EINVAL);
    CHECK(starts_with(err, "t.conf:4: ring_buffer: "));
    CHECK(memcmp(&before, &c, sizeof(c)) == 0);
    CHECK(c.output_dir == before.output_dir && strcmp(c.output_dir, "/data/np") == 0);
    CHECK(c.include_comm.items == before.include_comm.items && c.include_comm.n == 2);
    check_all_keys(&c);
    CHECK(parse("output_dir = /new\n", &c) == 0);
    CHECK(strcmp(c.output_dir, "/new") == 0 && c.include_comm.n == 0);
    np_config_free(&c);
}

static bool sel(const struct np_daemon_config *c, const char *comm, const char *exe,
                const char *cgroup, const char *container) {
    struct np_process_labels p = {comm, exe, cgroup, container};
    return np_config_selects(c, &p);
}

static void test_selects(void) {
    struct np_daemon_config c = {0};
    const char *cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /* no lists: everything, NULL labels included */
    CHECK(np_config_defaults(&c) == 0);
    CHECK(sel(&c, "python3", "/usr/bin/python3", "/user.slice", ""));
    CHECK(sel(&c, NULL, NULL, NULL, NULL));
    CHECK(np_config_selects(&c, NULL));

    /* comm */
    CHECK(parse("include_comm = python* torchrun\nexclude_comm = python3.8\n", &c) == 0);
    CHECK(sel(&c, "python3", "/x", "/", ""));
    CHECK(sel(&c, "torchrun", "/x", "/", ""));
    CHECK(!sel(&c, "python3.8", "/x", "/", ""));
    CHECK(!sel(&c, "bash", "/x", "/", ""));
    CHECK(!sel(&c, NULL, "/x", "/", ""));
    CHECK(parse("exclude_comm = bash\n", &c) == 0);
    CHECK(sel(&c, "python3", NULL, NULL, NULL));
    CHECK(!sel(&c, "bash", NULL, NULL, NULL));

    /* exe: '*' matches '/' */
    CHECK(parse("include_exe = /opt/* */python3*\nexclude_exe = */debug/*\n", &c) == 0);
    CHECK(sel(&c, "x", "/opt/conda/bin/python", "/", ""));
    CHECK(sel(&c, "x", "/usr/local/bin/python3.11", "/", ""));
    CHECK(!sel(&c, "x", "/opt/conda/debug/bin/app", "/", ""));
    CHECK(!sel(&c, "x", "/usr/bin/bash", "/", ""));
    CHECK(!sel(&c, "x", NULL, "/", ""));

    /* cgroup */
    CHECK(parse("include_cgroup = /kubepods/*\nexclude_cgroup = /kubepods/besteffort/*\n", &c) ==
          0);
    CHECK(sel(&c, "x", "/x", "/kubepods/burstable/pod1/cri-containerd-abc.scope", ""));
    CHECK(!sel(&c, "x", "/x", "/kubepods/besteffort/pod2/x.scope", ""));
    CHECK(!sel(&c, "x", "/x", "/user.slice/user-1000.slice", ""));
    CHECK(parse("exclude_cgroup = /system.slice/*\n", &c) == 0);
    CHECK(sel(&c, "x", "/x", NULL, ""));
    CHECK(!sel(&c, "x", "/x", "/system.slice/sshd.service", ""));

    /* container: "?*" is any container, "" the host */
    CHECK(parse("include_container = ?*\n", &c) == 0);
    CHECK(sel(&c, "x", "/x", "/", cid));
    CHECK(!sel(&c, "x", "/x", "/", ""));
    CHECK(!sel(&c, "x", "/x", "/", NULL));
    CHECK(parse("exclude_container = ?*\n", &c) == 0);
    CHECK(!sel(&c, "x", "/x", "/", cid));
    CHECK(sel(&c, "x", "/x", "/", NULL));
    CHECK(parse("include_container = 0123*\nexclude_container = *cdef\n", &c) == 0);
    CHECK(!sel(&c, "x", "/x", "/", cid)); /* included, and excluded */
    CHECK(parse("include_container = 0123* fff*\n", &c) == 0);
    CHECK(sel(&c, "x", "/x", "/", cid));
    CHECK(!sel(&c, "x", "/x", "/", "ffe0"));

    /* every label must pass: python in containers only */
    CHECK(parse("include_comm = python*\ninclude_container = ?*\n", &c) == 0);
    CHECK(sel(&c, "python3", "/usr/bin/python3", "/docker/x", cid));
    CHECK(!sel(&c, "python3", "/usr/bin/python3", "/user.slice", ""));
    CHECK(!sel(&c, "bash", "/bin/bash", "/docker/x", cid));
    np_config_free(&c);
}

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fwrite(text, 1, len, f) == len);
    fclose(f);
}

/* "# key = value" or "# key =": a commented-out key of the shipped file. */
static bool is_key_line(const char *line) {
    const char *p = line + 2;
    if (!starts_with(line, "# "))
        return false;
    while ((*p >= 'a' && *p <= 'z') || *p == '_')
        p++;
    return p > line + 2 && starts_with(p, " =") && (p[2] == '\0' || p[2] == ' ');
}

static void test_load(void) {
    struct np_daemon_config c = {0}, d = {0}, before;
    char dir[] = "/tmp/config_unit.XXXXXX", path[256], fifo[256], big[256];

    CHECK(parse(ALL_KEYS, &c) == 0);
    memcpy(&before, &c, sizeof(c));
    CHECK(mkdtemp(dir) != NULL);

    snprintf(path, sizeof(path), "%s/missing.conf", dir);
    CHECK(np_config_load(path, &c, err, sizeof(err)) == -ENOENT);
    CHECK(strstr(err, path) && strstr(err, "No such file or directory"));
    CHECK(memcmp(&before, &c, sizeof(c)) == 0);

    CHECK(np_config_load(dir, &c, err, sizeof(err)) == -EISDIR);
    CHECK(strstr(err, dir) && strstr(err, "Is a directory"));
    CHECK(memcmp(&before, &c, sizeof(c)) == 0);

    CHECK(np_config_load("/dev/null", &c, err, sizeof(err)) == -EINVAL);
    CHECK(strstr(err, "/dev/null: not a regular file") != NULL);
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(np_config_load(fifo, &c, err, sizeof(err)) == -EINVAL); /* does not block */
    CHECK(memcmp(&before, &c, sizeof(c)) == 0);

    /* too large */
    snprintf(big, sizeof(big), "%s/big.conf", dir);
    size_t big_len = NP_CONFIG_MAX_FILE_BYTES + 1;
    char *text = malloc(big_len);
    CHECK(text != NULL);
    if (text) {
        memset(text, '#', big_len);
        write_file(big, text, big_len);
        free(text);
        CHECK(np_config_load(big, &c, err, sizeof(err)) == -EFBIG);
        CHECK(strstr(err, big) != NULL);
    }

    /* an error in a file names the file and line */
    snprintf(path, sizeof(path), "%s/bad.conf", dir);
    write_file(path, "gpu = yes\nstack_bytes = 9\n", 26);
    CHECK(np_config_load(path, &c, err, sizeof(err)) == -EINVAL);
    char want[300];
    snprintf(want, sizeof(want), "%s:2: stack_bytes: '9' is out of range", path);
    CHECK(starts_with(err, want));
    CHECK(memcmp(&before, &c, sizeof(c)) == 0);

    /* unreadable: as root, checked by a child that gives up root first */
    CHECK(chmod(path, 0) == 0);
    bool forked = geteuid() == 0;
    pid_t child = forked ? fork() : 0;
    if (child == 0) {
        bool dropped = !forked || (setgid(65534) == 0 && setuid(65534) == 0);
        int rc = dropped ? np_config_load(path, &c, err, sizeof(err)) : 0;
        bool ok = rc == -EACCES && strstr(err, "Permission denied") != NULL;
        if (forked)
            _exit(ok ? 0 : 1);
        CHECK(ok);
    } else {
        int status = 0;
        CHECK(child > 0 && waitpid(child, &status, 0) == child);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }

    /* a good file */
    snprintf(path, sizeof(path), "%s/good.conf", dir);
    write_file(path, ALL_KEYS, strlen(ALL_KEYS));
    CHECK(np_config_load(path, &d, err, sizeof(err)) == 0);
    CHECK(same_config(&c, &d));

    /* the shipped file: the defaults, exactly */
    struct np_daemon_config defaults;
    CHECK(np_config_defaults(&defaults) == 0);
    int rc = np_config_load(SHIPPED_CONF, &c, err, sizeof(err));
    CHECK(rc == 0);
    if (rc)
        fprintf(stderr, "  %s\n", err);
    CHECK(same_config(&c, &defaults));

    /* and every key in it, uncommented, gives the same */
    char *shipped = NULL;
    size_t len = 0;
    CHECK(np_read_file(SHIPPED_CONF, &shipped, &len) == 0);
    if (shipped) {
        struct np_str un;
        np_str_init(&un);
        int keys = 0;
        for (char *line = strtok(shipped, "\n"); line; line = strtok(NULL, "\n")) {
            if (is_key_line(line)) {
                np_str_append(&un, line + 2);
                keys++;
            } else {
                np_str_append(&un, line);
            }
            np_str_append(&un, "\n");
        }
        CHECK(keys == 36); /* every key */
        rc = parse(np_str_cstr(&un), &d);
        CHECK(rc == 0);
        if (rc)
            fprintf(stderr, "  %s\n", err);
        CHECK(same_config(&d, &defaults));
        np_str_free(&un);
        free(shipped);
    }

    np_config_free(&defaults);
    np_config_free(&c);
    np_config_free(&d);
    unlink(fifo);
    unlink(big);
    snprintf(path, sizeof(path), "%s/bad.conf", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/good.conf", dir);
    unlink(path);
    CHECK(rmdir(dir) == 0);
}

/* The one table of settings (session/settings.h) that this parser and
 * record's options share: names unique, defaults valid, and both sides
 * starting from the same values and saying the same check their way. */
static void test_settings_table(void) {
    bool unique = true, complete = true, defaults_parse = true;
    char msg[768];

    for (size_t i = 0; i < np_settings_count; i++) {
        const struct np_setting *r = &np_settings_table[i];
        for (size_t j = 0; j < i; j++) {
            const struct np_setting *o = &np_settings_table[j];
            unique &= !(r->key && o->key && strcmp(r->key, o->key) == 0);
            unique &= !(r->flag && o->flag && strcmp(r->flag, o->flag) == 0);
            unique &= !(r->short_flag && r->short_flag == o->short_flag);
        }
        complete &= (r->key != NULL) == (r->config.store != NP_STORE_NONE);
        complete &= (r->flag != NULL) == (r->record.store != NP_STORE_NONE);
        complete &= r->help != NULL && (!r->restart || r->key) && (!r->flag_unit || r->flag);
        complete &= r->metavar != NULL || r->flag_value != NULL || !r->flag;
        union np_value v;
        defaults_parse &=
            !r->def || np_setting_parse(r, NP_SIDE_CONFIG, r->def, &v, msg, sizeof(msg)) == 0;
    }
    CHECK(unique);
    CHECK(complete);
    CHECK(defaults_parse);

    /* record's defaults are the daemon's, for every setting both have */
    struct np_daemon_config c;
    struct np_settings rec = {0}, dmn = {0};
    CHECK(np_config_defaults(&c) == 0);
    CHECK(np_settings_defaults(NP_SIDE_RECORD, &rec) == 0);
    CHECK(np_settings_defaults(NP_SIDE_RECORD, &dmn) == 0);
    np_settings_from_config(&c, &dmn);
    CHECK(rec.ring_mb == 64 && dmn.ring_mb == 64 && rec.wakeup_kb == -1); /* auto */
    CHECK(rec.unwind == dmn.unwind && rec.stack_bytes == dmn.stack_bytes);
    CHECK(rec.python == dmn.python && rec.python_depth == dmn.python_depth);
    CHECK(rec.gpu_timeout_ms == 5000 && dmn.gpu_timeout_ms == 5000);
    CHECK(!rec.no_gpu && !dmn.no_gpu && rec.formats == dmn.formats);
    CHECK(strcmp(rec.cupti_socket, dmn.cupti_socket) == 0);

    /* a configuration's values reach the session: units and negations */
    CHECK(parse("ring_buffer = 256M\ngpu = no\ngpu_timeout = 2s\nunwind = fp\n", &c) == 0);
    np_settings_from_config(&c, &dmn);
    CHECK(dmn.ring_mb == 256 && dmn.no_gpu && dmn.gpu_timeout_ms == 2000 &&
          dmn.unwind == UNWIND_FP);
    np_config_free(&c);

    /* one check, said in each side's words */
    const struct np_setting *stack = np_setting_by_key("stack_bytes", 11);
    CHECK(stack && stack == np_setting_by_flag("stack-bytes"));
    CHECK(np_setting_set(stack, NP_SIDE_RECORD, "1001", &rec, msg, sizeof(msg)) == -EINVAL);
    CHECK(strcmp(msg, "invalid --stack-bytes '1001': not a multiple of 8 (expected a multiple "
                      "of 8 from 512 to 65536)") == 0);
    CHECK(np_setting_set(stack, NP_SIDE_RECORD, "4096", &rec, msg, sizeof(msg)) == 0 &&
          rec.stack_bytes == 4096);
    const struct np_setting *ring = np_setting_by_flag("ring-buffer-mb");
    CHECK(np_setting_set(ring, NP_SIDE_RECORD, "3", &rec, msg, sizeof(msg)) == -EINVAL);
    CHECK(strstr(msg, "invalid --ring-buffer-mb '3': not a power of two") == msg);
    CHECK(np_setting_set(ring, NP_SIDE_RECORD, "2048", &rec, msg, sizeof(msg)) == -EINVAL);
    CHECK(np_setting_set(ring, NP_SIDE_RECORD, "128", &rec, msg, sizeof(msg)) == 0 &&
          rec.ring_mb == 128);
    CHECK(np_setting_set(np_setting_by_flag("no-gpu"), NP_SIDE_RECORD, NULL, &rec, msg,
                         sizeof(msg)) == 0 &&
          rec.no_gpu);
    CHECK(np_setting_set(np_setting_by_flag("cupti-socket"), NP_SIDE_RECORD, "rel.sock", &rec, msg,
                         sizeof(msg)) == 0); /* record's paths may be relative */
    CHECK(strcmp(rec.cupti_socket, "rel.sock") == 0);

    /* the wake-up threshold: auto or a number of KiB, nothing else */
    const struct np_setting *wake = np_setting_by_flag("wakeup-kb");
    CHECK(np_setting_set(wake, NP_SIDE_RECORD, "512", &rec, msg, sizeof(msg)) == 0 &&
          rec.wakeup_kb == 512);
    CHECK(np_setting_set(wake, NP_SIDE_RECORD, "auto", &rec, msg, sizeof(msg)) == 0 &&
          rec.wakeup_kb == -1);
    CHECK(np_setting_set(wake, NP_SIDE_RECORD, "0", &rec, msg, sizeof(msg)) == 0 &&
          rec.wakeup_kb == 0);
    CHECK(np_setting_set(wake, NP_SIDE_RECORD, "-1", &rec, msg, sizeof(msg)) == -EINVAL);
    CHECK(np_setting_set(wake, NP_SIDE_RECORD, "1048577", &rec, msg, sizeof(msg)) == -EINVAL);
    CHECK(strstr(msg, "invalid --wakeup-kb '1048577'") == msg);
    CHECK(np_setting_set(wake, NP_SIDE_RECORD, "autox", &rec, msg, sizeof(msg)) == -EINVAL);

    /* the reader's threads: auto or 0 to 64, the same from both sides */
    const struct np_setting *threads = np_setting_by_flag("reader-threads");
    CHECK(threads && threads == np_setting_by_key("reader_threads", 14));
    CHECK(rec.reader_threads == -1); /* auto, the default */
    CHECK(np_setting_set(threads, NP_SIDE_RECORD, "0", &rec, msg, sizeof(msg)) == 0 &&
          rec.reader_threads == 0);
    CHECK(np_setting_set(threads, NP_SIDE_RECORD, "64", &rec, msg, sizeof(msg)) == 0 &&
          rec.reader_threads == 64);
    CHECK(np_setting_set(threads, NP_SIDE_RECORD, "auto", &rec, msg, sizeof(msg)) == 0 &&
          rec.reader_threads == -1);
    CHECK(np_setting_set(threads, NP_SIDE_RECORD, "65", &rec, msg, sizeof(msg)) == -EINVAL);
    CHECK(strstr(msg, "invalid --reader-threads '65'") == msg);
    CHECK(np_setting_set(threads, NP_SIDE_RECORD, "-2", &rec, msg, sizeof(msg)) == -EINVAL);
    CHECK(np_setting_set(threads, NP_SIDE_RECORD, "two", &rec, msg, sizeof(msg)) == -EINVAL);
    CHECK(parse("reader_threads = 2\n", &c) == 0);
    np_settings_from_config(&c, &dmn);
    CHECK(dmn.reader_threads == 2);
    np_config_free(&c);
    expect_bad_value("reader_threads = 100", "reader_threads", "out of range");
}

int main(void) {
    test_defaults();
    test_all_keys();
    test_bad_values();
    test_overflow();
    test_good_edges();
    test_suffixes();
    test_syntax();
    test_line_errors();
    test_keeps_old();
    test_selects();
    test_load();
    test_settings_table();
    printf("config_unit: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
