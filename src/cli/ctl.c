/* ctl.c - `ncclprobe ctl`: its command line, the request it sends over the
 * daemon's control socket (daemon/ctl.c does the exchange) and the printing
 * of the reply: `status` rendered as text from the table of its fields
 * (daemon/status_schema.h), which --schema prints (see ctl.h). */
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
#include "daemon/status_schema.h"
#include "lib/util.h"
#include "session/settings.h"

#define CTL_TIMEOUT_MS 5000

struct ctl_options {
    const char *socket_path;
    const char *duration;
    bool cupti;
    bool json;
    bool schema;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: ncclprobe ctl [--socket PATH] [--json] start [--duration SECONDS] [--cupti]\n"
            "       ncclprobe ctl [--socket PATH] [--json] stop\n"
            "       ncclprobe ctl [--socket PATH] [--json] status\n"
            "       ncclprobe ctl [--socket PATH] [--json] snapshot\n"
            "       ncclprobe ctl --schema\n"
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
            "      --schema             print the fields of the status reply (path, type,\n"
            "                           meaning) as JSON, and exit\n"
            "  -d, --duration SECONDS   (start) close the window after SECONDS\n"
            "      --cupti              (start) bring libncclprobe_cupti.so into every traced\n"
            "                           process (loaded live, or woken): GPU kernels and\n"
            "                           times for the window\n"
            "  -h, --help               this text\n");
}

/* 0, 1 after --help, -EINVAL on a bad command line. optstring "+h" stops at
 * the command name. */
static int parse_options(int argc, char **argv, const char *optstring, struct ctl_options *opt) {
    enum { OPT_SOCKET = 256, OPT_JSON, OPT_SCHEMA, OPT_CUPTI };
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"json", no_argument, NULL, OPT_JSON},
        {"schema", no_argument, NULL, OPT_SCHEMA},
        {"duration", required_argument, NULL, 'd'},
        {"cupti", no_argument, NULL, OPT_CUPTI},
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
        case OPT_SCHEMA:
            opt->schema = true;
            break;
        case OPT_CUPTI:
            opt->cupti = true;
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

/* Adds a part to a "label: a, b, c" line; `joined`: to the part before it. */
static void add(struct np_str *s, bool joined, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add(struct np_str *s, bool joined, const char *fmt, ...) {
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (s->len && !joined)
        np_str_append(s, ", ");
    np_str_append(s, text);
}

static void add_str(struct np_str *s, const char *prefix, const char *text) {
    if (s->len)
        np_str_append(s, ", ");
    np_str_append(s, prefix);
    append_safe(s, text, 4096);
}

/* Prints "label: parts" when there are parts. */
static void print_line(FILE *out, const char *label, struct np_str *s) {
    if (label && s->len)
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

/* ---- `ctl status` as text, from status_schema.h ----------------------------------- */

/* The object field id is in (NULL: the reply has none there). */
static const cJSON *parent_of(const cJSON *reply, enum np_status_id id) {
    enum np_status_id p = np_status_fields[id].parent;
    return p == NP_ST_TOP ? reply : item(parent_of(reply, p), np_status_fields[p].key);
}

static bool window_open(const cJSON *reply) {
    return get_bool(parent_of(reply, NP_ST_WINDOW_OPEN), np_status_fields[NP_ST_WINDOW_OPEN].key) ==
           1;
}

static void show_number(struct np_str *s, const cJSON *obj, const struct np_status_field *f,
                        bool *shown) {
    double scale = f->scale ? f->scale : 1, x, y;
    if (!get_num(obj, f->key, &x))
        return;
    if (f->with && get_num(obj, np_status_fields[f->with].key, &y)) {
        add(s, false, f->text_with, x / scale, y / scale);
        shown[f->with] = true;
    } else {
        add(s, f->flags & NP_SF_JOINED, f->text, x / scale);
    }
}

/* A field's part of its line; shown[]: the fields shown with another. */
static void show_field(struct np_str *s, const cJSON *reply, enum np_status_id id, bool *shown) {
    const struct np_status_field *f = &np_status_fields[id];
    const cJSON *obj = parent_of(reply, id);
    const char *text;
    char when[64];
    double x;
    int b;

    if (shown[id] || ((f->flags & NP_SF_OPEN) && !window_open(reply)))
        return;
    if (f->null_text && cJSON_IsNull(item(obj, f->key))) {
        add(s, false, "%s", f->null_text);
        return;
    }
    switch (f->show) {
    case NP_SHOW_NUMBER:
        show_number(s, obj, f, shown);
        break;
    case NP_SHOW_COUNT:
        if (get_num(obj, f->key, &x))
            add(s, false, f->text, x, x == 1 ? "" : "s");
        break;
    case NP_SHOW_STRING:
        if ((text = get_str(obj, f->key)))
            add_str(s, f->text, text);
        break;
    case NP_SHOW_DURATION:
        if (get_num(obj, f->key, &x)) {
            fmt_duration(when, sizeof(when), x);
            add(s, false, "%s%s", f->text, when);
        }
        break;
    case NP_SHOW_BOOL:
        if ((b = get_bool(obj, f->key)) >= 0)
            add(s, false, "%s", b ? f->text : f->no);
        break;
    case NP_SHOW_NONE:
    case NP_SHOW_LIST:
        break;
    }
}

/* A cell of a table column: the number with its decimals, or the text cut
 * to its most characters; "-" when missing. */
static void cell(struct np_str *c, const cJSON *row, const struct np_status_field *f) {
    double v;
    const char *text = get_str(row, f->key);
    np_str_reset(c);
    if (f->type == NP_STATUS_NUMBER && get_num(row, f->key, &v))
        np_str_appendf(c, "%.*f", f->precision, v);
    else if (f->type == NP_STATUS_STRING && text && *text)
        append_safe(c, text, (size_t)f->precision);
    else
        np_str_append(c, "-");
}

/* One line of the table: the header (row NULL) or an element's cells. */
static void print_row(FILE *out, enum np_status_id list, const cJSON *row) {
    struct np_str c;
    bool first = true;
    np_str_init(&c);
    fputs("  ", out);
    for (int id = list + 1; id < NP_ST_COUNT && np_status_fields[id].parent == list; id++) {
        const struct np_status_field *f = &np_status_fields[id];
        if (!f->column)
            continue;
        if (row)
            cell(&c, row, f);
        fprintf(out, "%s%*s", first ? "" : " ", f->width, row ? np_str_cstr(&c) : f->column);
        first = false;
    }
    fputc('\n', out);
    np_str_free(&c);
}

static void print_list(FILE *out, const cJSON *reply, enum np_status_id list) {
    const struct np_status_field *f = &np_status_fields[list];
    const cJSON *rows = item(parent_of(reply, list), f->key), *row;
    if (!cJSON_IsArray(rows))
        return;
    int n = cJSON_GetArraySize(rows);
    if (n == 0) {
        fprintf(out, "%-13snone\n", f->line);
        return;
    }
    fprintf(out, "%-13s%d\n", f->line, n);
    print_row(out, list, NULL);
    cJSON_ArrayForEach(row, rows) {
        if (cJSON_IsObject(row))
            print_row(out, list, row);
    }
}

/* Every field shown on its line, in the table's order. */
static void print_status(FILE *out, const cJSON *reply) {
    bool shown[NP_ST_COUNT] = {false};
    const char *line = NULL;
    struct np_str s;

    np_str_init(&s);
    for (int id = 0; id < NP_ST_COUNT; id++) {
        const struct np_status_field *f = &np_status_fields[id];
        if (!f->line)
            continue;
        if (line && strcmp(line, f->line) != 0)
            print_line(out, line, &s);
        line = f->line;
        if (f->show == NP_SHOW_LIST)
            print_list(out, reply, (enum np_status_id)id);
        else
            show_field(&s, reply, (enum np_status_id)id, shown);
    }
    print_line(out, line, &s);
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
static char *request_line(const char *cmd, double duration_s, bool cupti) {
    cJSON *req = cJSON_CreateObject();
    char *line = NULL;

    if (req && cJSON_AddStringToObject(req, "cmd", cmd) &&
        (duration_s <= 0 || cJSON_AddNumberToObject(req, "duration_s", duration_s)) &&
        (!cupti || cJSON_AddTrueToObject(req, "cupti")))
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

/* --duration, as record's (np_settings_table's row). */
static int parse_duration(const char *cmd, const char *text, double *out) {
    char msg[512];
    union np_value v;
    if (strcmp(cmd, "start") != 0) {
        np_err("--duration applies to start only");
        return -EINVAL;
    }
    if (np_setting_parse(np_setting_by_flag("duration"), NP_SIDE_RECORD, text, &v, msg,
                         sizeof(msg)) < 0) {
        np_err("%s", msg);
        return -EINVAL;
    }
    *out = v.d;
    return 0;
}

/* The command and what goes with it; options may come after the command
 * too: `ncclprobe ctl status --json`. 0, 1 after --help, -EINVAL. */
static int parse_command(int argc, char **argv, struct ctl_options *opt, const char **cmd) {
    if (optind >= argc) {
        np_err("ctl needs a command: start, stop, status or snapshot");
        usage(stderr);
        return -EINVAL;
    }
    *cmd = argv[optind];
    if (!known_command(*cmd)) {
        np_err("unknown ctl command '%s' (start, stop, status or snapshot)", *cmd);
        return -EINVAL;
    }
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    int rc = parse_options(sub_argc, sub_argv, "d:h", opt);
    if (rc)
        return rc;
    if (optind < sub_argc) {
        np_err("unexpected argument '%s'", sub_argv[optind]);
        return -EINVAL;
    }
    if (!*opt->socket_path) {
        np_err("--socket needs a path");
        return -EINVAL;
    }
    return 0;
}

static int print_schema(void) {
    cJSON *schema = np_status_schema_json();
    char *text = schema ? cJSON_Print(schema) : NULL;
    cJSON_Delete(schema);
    if (!text) {
        np_err("out of memory");
        return 1;
    }
    printf("%s\n", text);
    cJSON_free(text);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* Sends the request, prints the reply; the exit status. */
static int exchange(const struct ctl_options *opt, const char *cmd, double duration_s) {
    char *reply = NULL, *line = request_line(cmd, duration_s, opt->cupti);
    if (!line) {
        np_err("out of memory");
        return 1;
    }
    int rc = np_ctl_request_send(opt->socket_path, line, CTL_TIMEOUT_MS, &reply);
    cJSON_free(line);
    if (rc < 0) {
        connect_error(opt->socket_path, rc);
        return 1;
    }
    rc = np_ctl_print_reply(cmd, reply, opt->json, stdout, stderr);
    free(reply);
    if (fflush(stdout) != 0 && rc == 0)
        rc = 1;
    return rc;
}

int np_cmd_ctl(int argc, char **argv) {
    struct ctl_options opt = {.socket_path = NP_CTL_DEFAULT_SOCKET};
    const char *cmd = NULL;
    double duration_s = 0;

    int rc = parse_options(argc, argv, "+d:h", &opt);
    if (!rc && !opt.schema)
        rc = parse_command(argc, argv, &opt, &cmd);
    if (!rc && opt.schema)
        return print_schema();
    if (!rc && opt.duration)
        rc = parse_duration(cmd, opt.duration, &duration_s);
    if (!rc && opt.cupti && strcmp(cmd, "start") != 0) {
        np_err("--cupti applies to start only");
        rc = -EINVAL;
    }
    if (rc)
        return rc > 0 ? 0 : 2;
    return exchange(&opt, cmd, duration_s);
}
