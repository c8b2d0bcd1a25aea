/* http_unit.c - unit tests for the daemon's HTTP pieces that are pure
 * functions or plain data structures (src/http/): Prometheus text
 * exposition (label escaping byte for byte, invalid UTF-8, sample and
 * family lines), the `seconds` argument, the listen address (IPv4, IPv6,
 * loopback or not, malformed), the token file's mode and owner checks, the
 * feed's buckets (a window waits for its last second, references keep a
 * bucket alive past its replacement, stop wakes a waiter), and a live
 * profile encoded in memory (gzip magic, a non-empty body).
 * Prints "http_unit: N passed, N failed" and exits non-zero on any failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "http/expo.h"
#include "http/feed.h"
#include "http/server.h"
#include "lib/util.h"
#include "writers/pprof.h"

static bool escaped_is(const char *in, const char *want) {
    struct np_str s;
    np_str_init(&s);
    np_expo_escape(&s, in);
    bool ok = strcmp(np_str_cstr(&s), want) == 0;
    if (!ok)
        fprintf(stderr, "escape(%s) = '%s', want '%s'\n", in, np_str_cstr(&s), want);
    np_str_free(&s);
    return ok;
}

static void test_escape(void) {
    CHECK(escaped_is("plain", "plain"));
    CHECK(escaped_is("", ""));
    CHECK(escaped_is("a\"b", "a\\\"b"));
    CHECK(escaped_is("a\\b", "a\\\\b"));
    CHECK(escaped_is("a\nb", "a\\nb"));
    CHECK(escaped_is("void k<float>(int*)", "void k<float>(int*)"));
    CHECK(escaped_is("\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9")); /* UTF-8 kept */
    CHECK(escaped_is("a\xff"
                     "b",
                     "a?b"));                                    /* not UTF-8 */
    CHECK(escaped_is("\xc3", "?"));                              /* cut short */
    CHECK(escaped_is("\xc0\xaf", "??"));                         /* overlong */
    CHECK(escaped_is("\xf0\x9f\x98\x80!", "\xf0\x9f\x98\x80!")); /* 4 bytes */
}

static void test_lines(void) {
    struct np_str s;
    np_str_init(&s);
    np_expo_family(&s, "x_total", "counter", "a\\b\nc");
    CHECK(!strcmp(np_str_cstr(&s), "# HELP x_total a\\\\b\\nc\n# TYPE x_total counter\n"));
    np_str_reset(&s);
    const char *l[] = {"pid", "12", "kernel", "k\"1\""};
    np_expo_sample(&s, "x_total", l, 2, 18446744073709551615ull);
    CHECK(!strcmp(np_str_cstr(&s),
                  "x_total{pid=\"12\",kernel=\"k\\\"1\\\"\"} 18446744073709551615\n"));
    np_str_reset(&s);
    np_expo_sample(&s, "up", NULL, 0, 1);
    CHECK(!strcmp(np_str_cstr(&s), "up 1\n"));
    np_str_reset(&s);
    np_expo_sample_double(&s, "s", NULL, 0, 1.5);
    CHECK(!strcmp(np_str_cstr(&s), "s 1.5\n"));
    np_str_reset(&s);
    np_expo_sample_double(&s, "s", NULL, 0, 0.1);
    CHECK(strtod(np_str_cstr(&s) + 2, NULL) == 0.1); /* round-trips */
    np_str_free(&s);
}

static void test_seconds(void) {
    char msg[200];
    unsigned v = 0;
    CHECK(np_http_parse_seconds(NULL, 10, 60, &v, msg, sizeof(msg)) == 0 && v == 10);
    CHECK(np_http_parse_seconds("1", 10, 60, &v, msg, sizeof(msg)) == 0 && v == 1);
    CHECK(np_http_parse_seconds("60", 10, 60, &v, msg, sizeof(msg)) == 0 && v == 60);
    const char *bad[] = {
        "", "0", "61", "-1", "+1", "1.5", " 1", "1 ", "x", "0x10", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        msg[0] = '\0';
        CHECK(np_http_parse_seconds(bad[i], 10, 60, &v, msg, sizeof(msg)) == -EINVAL);
        CHECK(strstr(msg, "expected a whole number of seconds from 1 to 60") != NULL);
    }
    np_http_parse_seconds("61", 10, 60, &v, msg, sizeof(msg));
    CHECK(strstr(msg, "out of range") != NULL);
    np_http_parse_seconds("1.5", 10, 60, &v, msg, sizeof(msg));
    CHECK(strstr(msg, "not a whole number") != NULL);
}

static void test_listen(void) {
    struct sockaddr_storage ss;
    char err[300];
    bool lo = false;
    CHECK(np_http_parse_listen("127.0.0.1:9464", &ss, &lo, err, sizeof(err)) == 0 && lo);
    CHECK(ss.ss_family == AF_INET && ntohs(((struct sockaddr_in *)&ss)->sin_port) == 9464);
    CHECK(np_http_parse_listen("127.8.9.10:1", &ss, &lo, err, sizeof(err)) == 0 && lo);
    CHECK(np_http_parse_listen("0.0.0.0:9464", &ss, &lo, err, sizeof(err)) == 0 && !lo);
    CHECK(np_http_parse_listen("10.1.2.3:65535", &ss, &lo, err, sizeof(err)) == 0 && !lo);
    CHECK(np_http_parse_listen("[::1]:9464", &ss, &lo, err, sizeof(err)) == 0 && lo);
    CHECK(ss.ss_family == AF_INET6);
    CHECK(np_http_parse_listen("[::]:9464", &ss, &lo, err, sizeof(err)) == 0 && !lo);
    const char *bad[] = {"",
                         "127.0.0.1",
                         "127.0.0.1:",
                         "127.0.0.1:0",
                         "127.0.0.1:65536",
                         "127.0.0.1:x",
                         ":9464",
                         "localhost:9464",
                         "::1:9464",
                         "[::1]",
                         "[::1:9464",
                         "1.2.3:80",
                         "127.0.0.1:-1",
                         "127.0.0.1: 80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        CHECK(np_http_parse_listen(bad[i], &ss, &lo, err, sizeof(err)) == -EINVAL);
        CHECK(strstr(err, bad[i]) != NULL);
    }
}

static void test_check(void) {
    char err[600], path[] = "/tmp/http_unit_tokenXXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, "tok\n", 4) == 4);
    close(fd);
    struct np_http_options o = {.listen = "127.0.0.1:9464", .token_file = path};
    chmod(path, 0600);
    CHECK(np_http_check(&o, err, sizeof(err)) == 0);
    chmod(path, 0400);
    CHECK(np_http_check(&o, err, sizeof(err)) == 0);
    chmod(path, 0640);
    CHECK(np_http_check(&o, err, sizeof(err)) == -EPERM && strstr(err, "mode 0640"));
    chmod(path, 0604);
    CHECK(np_http_check(&o, err, sizeof(err)) == -EPERM && strstr(err, "lets others read it"));
    chmod(path, 0600);
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && write(fd, "\n", 1) == 1);
    close(fd);
    CHECK(np_http_check(&o, err, sizeof(err)) == -EINVAL && strstr(err, "empty"));
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && write(fd, "a b\n", 4) == 4);
    close(fd);
    CHECK(np_http_check(&o, err, sizeof(err)) == -EINVAL && strstr(err, "without blanks"));
    unlink(path);
    CHECK(np_http_check(&o, err, sizeof(err)) == -ENOENT);
    o.token_file = NULL;
    o.listen = "0.0.0.0:9464";
    CHECK(np_http_check(&o, err, sizeof(err)) == -EPERM && strstr(err, "http_allow_remote"));
    o.allow_remote = true;
    CHECK(np_http_check(&o, err, sizeof(err)) == 0);
}

static struct np_http_bucket *bucket(uint64_t second, const char *stack, uint64_t count) {
    struct np_http_bucket *b = calloc(1, sizeof(*b));
    b->second = second;
    b->v = calloc(1, sizeof(*b->v));
    b->v[0] = (struct np_http_sample){.stack = strdup(stack), .pid = 7, .count = count};
    strcpy(b->v[0].comm, "c");
    b->n = b->cap = 1;
    return b;
}

struct waiter {
    struct np_http_feed *f;
    uint64_t first, last;
    int rc;
    size_t n;
};

static void *wait_window(void *arg) {
    struct waiter *w = arg;
    struct np_http_bucket **b = NULL;
    w->rc = np_http_feed_collect(w->f, w->first, w->last, np_monotonic_ns() + 10000000000ull, &b,
                                 &w->n);
    if (!w->rc)
        np_http_feed_release(w->f, b, w->n);
    return NULL;
}

static void test_feed(void) {
    struct np_http_feed *f = NULL;
    CHECK(np_http_feed_new(&f) == 0);
    size_t len = 0;
    CHECK(np_http_feed_metrics(f, &len) == NULL);
    np_http_feed_set_metrics(f, strdup("up 1\n"), 5);
    char *m = np_http_feed_metrics(f, &len);
    CHECK(m && len == 5 && !strcmp(m, "up 1\n"));
    free(m);

    /* a window waits for its last second */
    struct waiter w = {.f = f, .first = 100, .last = 101, .rc = 1};
    pthread_t t;
    pthread_create(&t, NULL, wait_window, &w);
    np_http_feed_add_bucket(f, bucket(100, "a;b", 3));
    np_http_feed_complete(f, 100);
    usleep(100000);
    CHECK(w.rc == 1); /* still waiting */
    np_http_feed_add_bucket(f, bucket(101, "a;c", 4));
    np_http_feed_complete(f, 101);
    pthread_join(t, NULL);
    CHECK(w.rc == 0 && w.n == 2);

    /* a held bucket outlives its replacement (the same slot, 62 s later) */
    struct np_http_bucket **held = NULL;
    size_t n = 0;
    CHECK(np_http_feed_collect(f, 100, 100, np_monotonic_ns(), &held, &n) == 0 && n == 1);
    np_http_feed_add_bucket(f, bucket(100 + NP_HTTP_RETENTION_S + 2, "x", 1));
    CHECK(held[0]->second == 100 && !strcmp(held[0]->v[0].stack, "a;b")); /* ASan: no UAF */
    np_http_feed_release(f, held, n);
    CHECK(np_http_feed_collect(f, 100, 100, np_monotonic_ns(), &held, &n) == 0 && n == 0);
    np_http_feed_release(f, held, n);

    /* a window past what is complete times out, and stop wakes a waiter */
    CHECK(np_http_feed_collect(f, 200, 200, np_monotonic_ns() + 50000000, &held, &n) == -ETIMEDOUT);
    w = (struct waiter){.f = f, .first = 300, .last = 300, .rc = 1};
    pthread_create(&t, NULL, wait_window, &w);
    usleep(50000);
    np_http_feed_stop(f);
    pthread_join(t, NULL);
    CHECK(w.rc == -ECANCELED);
    np_http_feed_free(f);
}

static void test_live_pprof(void) {
    struct np_pprof_sample s[] = {
        {.stack = "main;run;cudaLaunchKernel;[GPU_Kernel]k",
         .pid = 7,
         .comm = "p",
         .container = "",
         .count = 5},
        {.stack = "main;run;cudaLaunchKernel;[GPU_Kernel]k",
         .pid = 7,
         .comm = "p",
         .container = "",
         .count = 2,
         .gpu_ns = 10},
        {.stack = "[GPU_Kernel]\xff", .pid = 8, .comm = "q", .container = "abc", .count = 1},
    };
    uint8_t *out = NULL;
    size_t len = 0;
    CHECK(np_pprof_encode_samples(s, 3, 1, 2, true, &out, &len) == 0);
    CHECK(out && len > 20 && out[0] == 0x1f && out[1] == 0x8b); /* gzip */
    free(out);
    CHECK(np_pprof_encode_samples(NULL, 0, 1, 2, false, &out, &len) == 0 && len > 10);
    free(out);
}

int main(void) {
    test_escape();
    test_lines();
    test_seconds();
    test_listen();
    test_check();
    test_feed();
    test_live_pprof();
    printf("http_unit: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
