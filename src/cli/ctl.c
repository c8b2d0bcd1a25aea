/* ctl.c - `ncclprobe ctl`: its command line, the request it sends over the
 * daemon's control socket (daemon/ctl.c does the exchange) and the printing
 * of the reply, readable for status (see ctl.h). */
#define _GNU_SOURCE
#include "cli/ctl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/ctl.h"
#include "lib/util.h"

#define CTL_TIMEOUT_MS 5000
#define MIB (1024.0 * 1024.0)

struct ctl_options {
    const char *socket_path;
    const char *duration;
    bool json;
};

static void usage(FILE *f) {
    fprintf(f, "usage: ncclprobe ctl [--socket PATH] [--json] start [--duration SECONDS]\n"
               "       ncclprobe ctl [--socket PATH] [--json] stop\n"
               "       ncclprobe ctl [--socket PATH] [--json] status\n"
               "       ncclprobe ctl [--socket PATH] [--json] snapshot\n"
               "\n"
               "Controls a running `ncclprobe daemon` over its control socket.\n"
               "\n"
               "commands:\n"
               "  start       open a capture window (closes after --duration, at\n"
               "              the latest after the daemon's max_window)\n"
               "  stop        close the capture window and write its output sets\n"
               "  status      what the daemon is doing: window, targets, rates, limits\n"
               "  snapshot    write the current aggregation period's output sets now\n"
               "\n"
               "options:\n"
               "      --socket PATH        the daemon's control socket (default\n"
               "                           " NP_CTL_DEFAULT_SOCKET ")\n"
               "      --json               print the daemon's JSON reply as it is\n"
               "  -d, --duration SECONDS   (start) close the window after SECONDS\n"
               "  -h, --help               this text\n");
}

/* 0, 1 after --help, -EINVAL on a bad command line. optstring "+h" stops at
 * the command name. */
static int parse_options(int argc, char **argv, const char *optstring, struct ctl_options *opt) {
    enum { OPT_SOCKET = 256, OPT_JSON };
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"json", no_argument, NULL, OPT_JSON},
        {"duration", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;

    optind = 0; /* a fresh scan of this argv (glibc) */
    while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
        switch (c) {
        case OPT_SOCKET:
            opt->socket_path = optarg;
            break;
        case OPT_JSON:
            opt->json = true;
            break;
        case 'd':
            opt->duration = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            return -EINVAL;
        }
    }
    return 0;
}

/* ---- printing the reply ----------------------------------------------------------- */

static const cJSON *item(const cJSON *obj, const char *key) {
    return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

static bool get_num(const cJSON *obj, const char *key, double *v) {
    const cJSON *i = item(obj, key);
    if (!cJSON_IsNumber(i) || !isfinite(i->valuedouble))
        return false;
    *v = i->valuedouble;
    return true;
}

static const char *get_str(const cJSON *obj, const char *key) {
    const cJSON *i = item(obj, key);
    return cJSON_IsString(i) && i->valuestring ? i->valuestring : NULL;
}

/* 1, 0, or -1 when missing or not a boolean. */
static int get_bool(const cJSON *obj, const char *key) {
    const cJSON *i = item(obj, key);
    return cJSON_IsBool(i) ? cJSON_IsTrue(i) : -1;
}

/* At most max bytes of text, control characters shown as '?' (names come
 * from the traced processes: no terminal escapes from them). */
static void append_safe(struct np_str *s, const char *text, size_t max) {
    for (size_t i = 0; text[i] && i < max; i++) {
        unsigned char ch = (unsigned char)text[i];
        char out = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
        np_str_append_n(s, &out, 1);
    }
}

/* Starts a new part of a "label: a, b, c" line. */
static void part(struct np_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void part(struct np_str *s, const char *fmt, ...) {
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (s->len)
        np_str_append(s, ", ");
    np_str_append(s, text);
}

static void part_str(struct np_str *s, const char *prefix, const char *text) {
    if (s->len)
        np_str_append(s, ", ");
    np_str_append(s, prefix);
    append_safe(s, text, 4096);
}

/* Prints "label: parts" when there are parts. */
static void print_line(FILE *out, const char *label, struct np_str *s) {
    if (s->len)
        fprintf(out, "%-13s%s\n", label, s->buf);
    np_str_reset(s);
}

static void fmt_duration(char *buf, size_t size, double s) {
    if (s < 0)
        s = 0;
    if (s < 60) {
        snprintf(buf, size, "%.1fs", s);
        return;
    }
    double whole = floor(s);
    if (whole > 1e12)
        whole = 1e12;
    unsigned long long t = (unsigned long long)whole;
    unsigned long long d = t / 86400, h = t / 3600 % 24, m = t / 60 % 60, sec = t % 60;
    if (d)
        snprintf(buf, size, "%llud %02lluh %02llum", d, h, m);
    else if (h)
        snprintf(buf, size, "%lluh %02llum %02llus", h, m, sec);
    else
        snprintf(buf, size, "%llum %02llus", m, sec);
}

static void part_duration(struct np_str *s, const char *prefix, double seconds) {
    char text[64];
    fmt_duration(text, sizeof(text), seconds);
    part(s, "%s%s", prefix, text);
}

static void print_window(FILE *out, const cJSON *window, struct np_str *s) {
    double v;
    const char *text;
    int open = get_bool(window, "open");

    if (!cJSON_IsObject(window))
        return;
    if (open == 0) {
        part(s, "closed");
    } else if (open == 1) {
        if (get_num(window, "id", &v))
            part(s, "open #%.0f", v);
        else
            part(s, "open");
        if ((text = get_str(window, "reason")))
            part_str(s, "reason ", text);
        if ((text = get_str(window, "started")))
            part_str(s, "started ", text);
        if (get_num(window, "elapsed_s", &v))
            part_duration(s, "elapsed ", v);
        if (get_num(window, "ends_in_s", &v))
            part_duration(s, "ends in ", v);
        else if (cJSON_IsNull(item(window, "ends_in_s")))
            part(s, "until stopped");
    }
    print_line(out, "window:", s);
}

static void cell_num(char *buf, size_t size, const cJSON *obj, const char *key, int decimals) {
    double v;
    if (get_num(obj, key, &v))
        snprintf(buf, size, "%.*f", decimals, v);
    else
        snprintf(buf, size, "-");
}

static void cell_str(char *buf, size_t size, const cJSON *obj, const char *key, size_t max) {
    struct np_str s;
    const char *text = get_str(obj, key);

    np_str_init(&s);
    append_safe(&s, text && *text ? text : "-", max);
    snprintf(buf, size, "%s", s.buf && !s.failed ? s.buf : "-");
    np_str_free(&s);
}

static void print_targets(FILE *out, const cJSON *targets) {
    const cJSON *t;
    char pid[24], ns_pid[24], comm[24], container[24], probes[24], launches[24], rate[24],
        drops[24], gpu[48], output[4200];

    if (!cJSON_IsArray(targets))
        return;
    int n = cJSON_GetArraySize(targets);
    if (n == 0) {
        fprintf(out, "%-13snone\n", "targets:");
        return;
    }
    fprintf(out, "%-13s%d\n", "targets:", n);
    fprintf(out, "  %7s %7s %-16s %-12s %6s %10s %10s %7s %-12s %s\n", "PID", "NS_PID", "COMM",
            "CONTAINER", "PROBES", "LAUNCHES", "LAUNCHES/S", "DROPS", "GPU", "OUTPUT");
    cJSON_ArrayForEach(t, targets) {
        if (!cJSON_IsObject(t))
            continue;
        cell_num(pid, sizeof(pid), t, "pid", 0);
        cell_num(ns_pid, sizeof(ns_pid), t, "ns_pid", 0);
        cell_str(comm, sizeof(comm), t, "comm", 16);
        cell_str(container, sizeof(container), t, "container", 12);
        cell_num(probes, sizeof(probes), t, "probes", 0);
        cell_num(launches, sizeof(launches), t, "launches", 0);
        cell_num(rate, sizeof(rate), t, "launches_per_s", 1);
        cell_num(drops, sizeof(drops), t, "drops", 0);
        cell_str(gpu, sizeof(gpu), t, "gpu", 40);
        cell_str(output, sizeof(output), t, "output", 4096);
        fprintf(out, "  %7s %7s %-16s %-12s %6s %10s %10s %7s %-12s %s\n", pid, ns_pid, comm,
                container, probes, launches, rate, drops, gpu, output);
    }
}

static void print_status(FILE *out, const cJSON *r) {
    struct np_str s;
    const cJSON *o;
    const char *text;
    double v, w;
    int b;

    np_str_init(&s);
    if (get_num(r, "pid", &v))
        part(&s, "pid %.0f", v);
    if ((text = get_str(r, "version")))
        part_str(&s, "version ", text);
    if (get_num(r, "uptime_s", &v))
        part_duration(&s, "up ", v);
    print_line(out, "daemon:", &s);
    if ((text = get_str(r, "config")))
        part_str(&s, "", text);
    print_line(out, "config:", &s);
    if ((text = get_str(r, "output_dir")))
        part_str(&s, "", text);
    print_line(out, "output dir:", &s);

    print_window(out, item(r, "window"), &s);

    o = item(r, "aggregate");
    if ((b = get_bool(o, "on")) >= 0)
        part(&s, "%s", b ? "on" : "off");
    if (get_num(o, "interval_s", &v))
        part_duration(&s, "every ", v);
    if ((text = get_str(o, "period_started")))
        part_str(&s, "period started ", text);
    print_line(out, "aggregate:", &s);

    print_targets(out, item(r, "targets"));

    o = item(r, "probes");
    if (get_num(o, "attached", &v))
        part(&s, "%.0f attached", v);
    if (get_num(o, "failed", &v))
        part(&s, "%.0f failed", v);
    print_line(out, "probes:", &s);

    o = item(r, "rates");
    if (get_num(o, "launches_per_s", &v))
        part(&s, "%.1f launches/s", v);
    if (get_num(o, "records_per_s", &v))
        part(&s, "%.1f records/s", v);
    print_line(out, "rates:", &s);

    o = item(r, "drops");
    if (get_num(o, "ring_buffer", &v))
        part(&s, "%.0f ring buffer", v);
    if (get_num(o, "rate_limited", &v))
        part(&s, "%.0f rate limited", v);
    print_line(out, "drops:", &s);

    o = item(r, "rate_limit");
    if ((b = get_bool(o, "active")) >= 0)
        part(&s, "%s", b ? "ACTIVE" : "inactive");
    if (get_num(o, "per_probe_per_s", &v))
        part(&s, "%.0f launches/s per probe when over budget", v);
    if (get_num(o, "cpu_percent", &v) && get_num(o, "budget_percent", &w))
        part(&s, "CPU %.1f%% of %.1f%% budget", v, w);
    else if (get_num(o, "cpu_percent", &v))
        part(&s, "CPU %.1f%%", v);
    else if (get_num(o, "budget_percent", &w))
        part(&s, "budget %.1f%% CPU", w);
    if (get_num(o, "activations", &v))
        part(&s, "%.0f activations", v);
    print_line(out, "rate limit:", &s);

    o = item(r, "cupti");
    if ((text = get_str(o, "socket")))
        part_str(&s, "", text);
    else if (cJSON_IsNull(item(o, "socket")))
        part(&s, "off");
    if (get_num(o, "peers", &v))
        part(&s, "%.0f peer%s", v, v == 1 ? "" : "s");
    print_line(out, "cupti:", &s);

    o = item(r, "disk");
    if (get_num(o, "bytes", &v))
        part(&s, "%.1f MiB", v / MIB);
    if (get_num(o, "sets", &v))
        part(&s, "%.0f set%s", v, v == 1 ? "" : "s");
    if (get_num(o, "max_bytes", &v))
        part(&s, "max %.1f MiB", v / MIB);
    if (get_num(o, "deleted_sets", &v))
        part(&s, "%.0f deleted", v);
    print_line(out, "disk:", &s);

    o = item(r, "memory");
    if (get_num(o, "rss_bytes", &v))
        part(&s, "RSS %.1f MiB", v / MIB);
    if (get_num(o, "cache_bytes", &v) && get_num(o, "cache_max_bytes", &w))
        part(&s, "caches %.1f of %.1f MiB", v / MIB, w / MIB);
    else if (get_num(o, "cache_bytes", &v))
        part(&s, "caches %.1f MiB", v / MIB);
    print_line(out, "memory:", &s);

    o = item(r, "discovery");
    if (get_num(o, "delay_ms_p50", &v))
        part(&s, "delay p50 %.1f ms", v);
    if (get_num(o, "delay_ms_max", &v))
        part(&s, "max %.1f ms", v);
    if (get_num(o, "attached", &v))
        part(&s, "%.0f attached", v);
    if (get_num(o, "detached", &v))
        part(&s, "%.0f detached", v);
    if (get_num(o, "skipped_by_filter", &v))
        part(&s, "%.0f skipped by filter", v);
    print_line(out, "discovery:", &s);
    np_str_free(&s);
}

static void print_message(FILE *out, const cJSON *r) {
    const char *message = get_str(r, "message");
    const cJSON *sets = item(r, "sets"), *set;
    struct np_str s;

    np_str_init(&s);
    append_safe(&s, message ? message : "ok", 4096);
    fprintf(out, "%s\n", s.buf ? s.buf : "ok");
    if (cJSON_IsArray(sets)) {
        cJSON_ArrayForEach(set, sets) {
            if (!cJSON_IsString(set) || !set->valuestring)
                continue;
            np_str_reset(&s);
            append_safe(&s, set->valuestring, 4096);
            fprintf(out, "%s\n", s.buf ? s.buf : "");
        }
    }
    np_str_free(&s);
}

int np_ctl_print_reply(const char *cmd, const char *line, bool json, FILE *out, FILE *err) {
    cJSON *reply = line ? cJSON_Parse(line) : NULL;
    int ok = get_bool(reply, "ok");
    int rc = ok == 1 ? 0 : 1;

    if (json)
        fprintf(out, "%s\n", line ? line : "");
    if (ok < 0) {
        struct np_str s;
        np_str_init(&s);
        append_safe(&s, line ? line : "", 200);
        fprintf(err, "ncclprobe: error: bad reply from the daemon: '%s'\n", s.buf ? s.buf : "");
        np_str_free(&s);
    } else if (ok == 0) {
        if (!json) {
            const char *error = get_str(reply, "error");
            struct np_str s;
            np_str_init(&s);
            append_safe(&s, error && *error ? error : "the daemon reported an error", 4096);
            fprintf(err, "ncclprobe: error: %s\n", s.buf ? s.buf : "");
            np_str_free(&s);
        }
    } else if (!json) {
        if (cmd && strcmp(cmd, "status") == 0)
            print_status(out, reply);
        else
            print_message(out, reply);
    }
    cJSON_Delete(reply);
    return rc;
}

/* ---- the command -------------------------------------------------------------------- */

static bool known_command(const char *cmd) {
    static const char *const names[] = {"start", "stop", "status", "snapshot"};
    for (size_t i = 0; i < NP_ARRAY_SIZE(names); i++) {
        if (strcmp(cmd, names[i]) == 0)
            return true;
    }
    return false;
}

/* The request line (malloc'ed), or NULL when out of memory. */
static char *request_line(const char *cmd, double duration_s) {
    cJSON *req = cJSON_CreateObject();
    char *line = NULL;

    if (req && cJSON_AddStringToObject(req, "cmd", cmd) &&
        (duration_s <= 0 || cJSON_AddNumberToObject(req, "duration_s", duration_s)))
        line = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    return line;
}

static void connect_error(const char *path, int rc) {
    switch (rc) {
    case -ETIMEDOUT:
        np_err("no reply from %s within %d s (is ncclprobe daemon stuck?)", path,
               CTL_TIMEOUT_MS / 1000);
        break;
    case -EPROTO:
        np_err("%s closed the connection without a reply", path);
        break;
    case -EMSGSIZE:
        np_err("the reply from %s is too large", path);
        break;
    case -ENOMEM:
        np_err("out of memory");
        break;
    case -EACCES:
    case -EPERM:
        np_err("cannot connect to %s: %s (ncclprobe ctl needs root or the daemon's user)", path,
               strerror(-rc));
        break;
    default:
        np_err("cannot connect to %s: %s (is ncclprobe daemon running?)", path, strerror(-rc));
        break;
    }
}

int np_cmd_ctl(int argc, char **argv) {
    struct ctl_options opt = {.socket_path = NP_CTL_DEFAULT_SOCKET};
    double duration_s = 0;
    char *line = NULL, *reply = NULL;
    int rc;

    rc = parse_options(argc, argv, "+d:h", &opt);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (optind >= argc) {
        np_err("ctl needs a command: start, stop, status or snapshot");
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    if (!known_command(cmd)) {
        np_err("unknown ctl command '%s' (start, stop, status or snapshot)", cmd);
        return 2;
    }
    /* Options may come after the command too: `ncclprobe ctl status --json`. */
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    rc = parse_options(sub_argc, sub_argv, "d:h", &opt);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (optind < sub_argc) {
        np_err("unexpected argument '%s'", sub_argv[optind]);
        return 2;
    }
    if (opt.duration) {
        if (strcmp(cmd, "start") != 0) {
            np_err("--duration applies to start only");
            return 2;
        }
        if (np_parse_seconds(opt.duration, &duration_s) < 0 || duration_s <= 0 ||
            duration_s > NP_CTL_MAX_DURATION_S) {
            np_err("invalid --duration '%s': expected a positive number of seconds", opt.duration);
            return 2;
        }
    }
    if (!*opt.socket_path) {
        np_err("--socket needs a path");
        return 2;
    }

    line = request_line(cmd, duration_s);
    if (!line) {
        np_err("out of memory");
        return 1;
    }
    rc = np_ctl_request_send(opt.socket_path, line, CTL_TIMEOUT_MS, &reply);
    cJSON_free(line);
    if (rc < 0) {
        connect_error(opt.socket_path, rc);
        return 1;
    }
    rc = np_ctl_print_reply(cmd, reply, opt.json, stdout, stderr);
    free(reply);
    if (fflush(stdout) != 0 && rc == 0)
        rc = 1;
    return rc;
}
