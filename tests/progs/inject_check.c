/* inject_check.c - a TEST DRIVER, not a command: runs np_inject_agent
 * (src/inject) alone against a process, loading a test library
 * (tests/progs/inject_testlib.c) instead of libncclprobe_cupti.so, and
 * prints what happened. tests/test_inject.py drives it; the kill -9 tests set
 * NP_INJECT_FAULT=<step> in its environment (docs/inject.md, "Kill points").
 * Built by the top Makefile into BUILD/inject_check, linked with the tree's
 * objects.
 *
 *   inject_check [--lib PATH] [--symbol NAME] [--memfd NAME] [--flags N]
 *                [--find-ms N] [--stub-timeout-ms N] [--tid TID] [--dry-run] [--nice N]
 *                [--read] [--json] [--verbose] PID
 *
 * --read prints what the library writes on its socket until it closes it;
 * --nice is the injecting thread's priority meanwhile (default -10; 100:
 * unchanged); --tid and --dry-run as in inject.h; --verbose: the injector's
 * debug lines on stderr. --json: one object (ok, err, msg, loaded, tid,
 * syscall, attach_ret, eintr, caught, said, and the times in us).
 * Exit status 0 on success, 1 on failure (the message on stderr), 2 usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inject/inject.h"
#include "lib/util.h"

static void usage(void) {
    fprintf(stderr,
            "usage: inject_check [--lib PATH] [--symbol NAME] [--memfd NAME] [--flags N]\n"
            "                    [--find-ms N] [--stub-timeout-ms N] [--tid TID] [--dry-run]\n"
            "                    [--nice N] [--read] [--json] [--verbose] PID\n"
            "(a test driver of src/inject: see tests/test_inject.py)\n");
}

/* What the library wrote on the socket, until EOF (at most 4 KiB). */
static void read_socket(int fd, char *out, size_t size) {
    size_t len = 0;

    while (len + 1 < size) {
        ssize_t n = read(fd, out + len, size - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    out[len] = '\0';
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static void print_json(int err, const struct np_inject_result *r, const char *said) {
    printf("{\"ok\": %s, \"err\": %d, \"msg\": ", err ? "false" : "true", err);
    json_string(r->msg);
    printf(", \"loaded\": %s, \"tid\": %d, \"syscall\": ", r->loaded ? "true" : "false",
           (int)r->tid);
    json_string(r->syscall_name ? r->syscall_name : "");
    printf(", \"attach_ret\": %d, \"eintr\": %s, \"caught\": %s, \"said\": ", r->attach_ret,
           r->eintr ? "true" : "false", r->caught ? "true" : "false");
    json_string(said);
    printf(", \"stop_us\": %.1f, \"stub_us\": %.1f, \"wait_us\": %.1f, \"dlopen_us\": %.1f, "
           "\"attach_us\": %.1f, \"pause_us\": %.1f, \"total_us\": %.1f}\n",
           r->t.stop_ns / 1e3, r->t.stub_ns / 1e3, r->t.wait_ns / 1e3, r->t.dlopen_ns / 1e3,
           r->t.attach_ns / 1e3, r->t.pause_ns / 1e3, r->t.total_ns / 1e3);
}

static void print_text(int err, const struct np_inject_result *r, const char *said) {
    if (err) {
        fprintf(stderr, "inject_check: %s\n", r->msg);
        return;
    }
    if (r->msg[0]) { /* dry run */
        printf("%s\n", r->msg);
        return;
    }
    printf("%s thread %d (in %s): attach returned %d%s\n", r->loaded ? "loaded into" : "woke",
           (int)r->tid, r->syscall_name, r->attach_ret, r->eintr ? " (call returns EINTR)" : "");
    printf("pause %.0f us (stop %.0f, stub %.0f: wait %.0f, dlopen %.0f, attach %.0f), "
           "total %.0f us\n",
           r->t.pause_ns / 1e3, r->t.stop_ns / 1e3, r->t.stub_ns / 1e3, r->t.wait_ns / 1e3,
           r->t.dlopen_ns / 1e3, r->t.attach_ns / 1e3, r->t.total_ns / 1e3);
    if (said[0])
        printf("library said: %s", said);
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"lib", required_argument, 0, 'l'},     {"symbol", required_argument, 0, 's'},
        {"memfd", required_argument, 0, 'm'},   {"flags", required_argument, 0, 'f'},
        {"find-ms", required_argument, 0, 'F'}, {"stub-timeout-ms", required_argument, 0, 'T'},
        {"read", no_argument, 0, 'r'},          {"json", no_argument, 0, 'j'},
        {"tid", required_argument, 0, 't'},     {"dry-run", no_argument, 0, 'n'},
        {"nice", required_argument, 0, 'N'},    {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    struct np_inject_req req = {0};
    struct np_inject_result res;
    bool json = false, read_it = false;
    char said[4096] = "";
    int c;

    while ((c = getopt_long(argc, argv, "l:s:m:f:F:T:t:nN:rjvh", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            req.lib_path = optarg;
            break;
        case 's':
            req.symbol = optarg;
            break;
        case 'm':
            req.memfd_name = optarg;
            break;
        case 'f':
            req.flags = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'F':
            req.find_ms = atoi(optarg);
            break;
        case 'T':
            req.stub_timeout_ms = atoi(optarg);
            break;
        case 'n':
            req.dry_run = true;
            break;
        case 'N':
            req.nice = atoi(optarg);
            break;
        case 't':
            req.tid = (pid_t)atoi(optarg);
            break;
        case 'r':
            read_it = true;
            break;
        case 'j':
            json = true;
            break;
        case 'v':
            np_log_set_level(NP_LOG_DEBUG);
            break;
        case 'h':
            usage();
            return 0;
        default:
            usage();
            return 2;
        }
    }
    if (optind != argc - 1) {
        usage();
        return 2;
    }
    int err = np_inject_agent((pid_t)atoi(argv[optind]), &req, &res);
    if (!err && read_it)
        read_socket(res.sock_fd, said, sizeof(said));
    if (res.sock_fd >= 0)
        close(res.sock_fd);
    if (json)
        print_json(err, &res, said);
    else
        print_text(err, &res, said);
    return err ? 1 : 0;
}
