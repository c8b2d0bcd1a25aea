/* gpu_wire_fuzz.c - the CUPTI socket's frames (include/ncclprobe/gpu_wire.h)
 * as the server reads them from a connection (src/ingest/gpu_socket.c).
 *
 * The input is the byte stream a client sends, written into one end of a
 * socketpair whose other end the server adopts, then closed. data[0] is a
 * switch byte: bit 0 sends a valid HELLO first, bit 1 writes our pid into
 * every frame header found by walking the size fields (the server refuses
 * frames whose pid is not the peer's, which a fuzzer cannot guess), so that
 * the frames behind the HELLO are reached. Contract: every callback gets what
 * the wire format promises (names within bounds, records within their
 * frame), the connection is always closed in the end, and the counters add
 * up (clients_rejected is the sum of rejected[]). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "ingest/gpu_socket.h"

#define MAX_STREAM (256u << 10)

static unsigned closes;
static volatile char sink;

static void touch(const char *p, size_t len) {
    char x = 0;
    for (size_t i = 0; i < len; i++)
        x ^= p[i];
    sink = x;
}

static bool is_traced(void *ctx, pid_t pid) {
    (void)ctx;
    return pid == getpid();
}
static void on_hello(void *ctx, pid_t pid, const struct np_wire_hello *h) {
    (void)ctx, (void)pid;
    FUZZ_CHECK(memchr(h->message, 0, sizeof(h->message)) != NULL);
}
static void on_record(void *ctx, pid_t pid, const struct np_gpu_record *r) {
    (void)ctx, (void)pid;
    FUZZ_CHECK(r->size >= NP_GPU_RECORD_FIXED && r->name_len <= r->size - NP_GPU_RECORD_FIXED);
    touch(r->name, r->name_len); /* ASan: the whole name is readable */
}
static void on_names(void *ctx, pid_t pid, uint64_t handle, const char *name, size_t len) {
    (void)ctx, (void)pid, (void)handle;
    FUZZ_CHECK(len >= 1 && len <= NP_WIRE_MAX_NAME);
    touch(name, len);
}
static void on_stats(void *ctx, pid_t pid, const struct np_wire_stats *s) {
    (void)ctx, (void)pid, (void)s;
}
static void on_graph_node(void *ctx, pid_t pid, const struct np_wire_graph_node *n) {
    (void)ctx, (void)pid, (void)n;
}
static void on_cupti(void *ctx, pid_t pid, const struct np_wire_cupti *c) {
    (void)ctx, (void)pid;
    FUZZ_CHECK(memchr(c->path, 0, sizeof(c->path)) && memchr(c->cuda, 0, sizeof(c->cuda)) &&
               memchr(c->degraded, 0, sizeof(c->degraded)));
}
static void on_close(void *ctx, pid_t pid) {
    (void)ctx, (void)pid;
    closes++;
}

static const struct np_gpu_server_ops ops = {
    .is_traced = is_traced,
    .on_hello = on_hello,
    .on_record = on_record,
    .on_names = on_names,
    .on_stats = on_stats,
    .on_graph_node = on_graph_node,
    .on_cupti = on_cupti,
    .on_close = on_close,
};

static void patch_pids(uint8_t *p, size_t len) {
    size_t off = 0;
    while (off + sizeof(struct np_wire_header) <= len) {
        struct np_wire_header h;
        memcpy(&h, p + off, sizeof(h));
        h.pid = (uint32_t)getpid();
        memcpy(p + off, &h, sizeof(h));
        if (h.size < sizeof(h))
            break;
        off += h.size;
    }
}

static void send_all(int fd, const void *p, size_t len) {
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return; /* the server closed: what it refused is counted */
        p = (const char *)p + n;
        len -= (size_t)n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_STREAM)
        return 0;
    uint8_t flags = data[0];
    size_t len = size - 1;
    uint8_t *stream = malloc(len ? len : 1);
    FUZZ_CHECK(stream);
    memcpy(stream, data + 1, len);
    if (flags & 2)
        patch_pids(stream, len);

    struct np_gpu_server *s = NULL;
    int sv[2];
    FUZZ_CHECK(np_gpu_server_open(NULL, &ops, &s) == 0);
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    FUZZ_CHECK(np_gpu_server_adopt(s, sv[0]) == 0);
    closes = 0;

    if (flags & 1) {
        struct np_wire_hello h = {0};
        h.hdr.magic = NP_WIRE_MAGIC;
        h.hdr.version = NP_WIRE_VERSION;
        h.hdr.type = NP_WIRE_HELLO;
        h.hdr.size = sizeof(h);
        h.hdr.pid = (uint32_t)getpid();
        h.origin = NP_ORIGIN_INJECTED;
        send_all(sv[1], &h, sizeof(h));
    }
    /* In pieces, the server polled between them: frames cut anywhere. */
    size_t piece = 1 + (flags >> 2) * 61;
    for (size_t off = 0; off < len; off += piece) {
        send_all(sv[1], stream + off, len - off < piece ? len - off : piece);
        np_gpu_server_poll(s);
    }
    close(sv[1]);
    for (int i = 0; i < 4 && !closes; i++)
        np_gpu_server_poll(s);
    FUZZ_CHECK(closes <= 1);

    const struct np_gpu_server_stats *st = np_gpu_server_stats(s);
    uint64_t sum = 0;
    for (int r = 0; r < NP_REJECT_MAX; r++)
        sum += st->rejected[r];
    FUZZ_CHECK(sum == st->clients_rejected);
    np_gpu_server_close(s);
    free(stream);
    return 0;
}
