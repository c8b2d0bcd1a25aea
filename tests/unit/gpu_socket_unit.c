/* gpu_socket_unit.c - the CUPTI socket's server (src/ingest/gpu_socket.c)
 * on connections handed over: np_gpu_server_adopt (a socketpair end, as the
 * injector hands one over; refused descriptors; the connection limit; the
 * HELLO deadline) and the frames the library sends over them: the HELLO's
 * origin, NAMES frames handed on entry by entry before the records that
 * follow, and every malformed NAMES frame refused whole and counted; the
 * CUPTI frame (which libcupti, its layouts) handed on with its strings cut
 * to their fields, one of another size refused. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "ingest/gpu_socket.h"
#include "lib/util.h"

#define MS 1000000ull

/* What the server handed on, in order. */
enum seen_kind { SEEN_HELLO, SEEN_NAME, SEEN_RECORD, SEEN_CLOSE, SEEN_CUPTI, SEEN_NODE };

struct seen {
    enum seen_kind kind;
    pid_t pid;
    uint32_t origin;
    uint64_t handle;
    char name[64];
    size_t len;
    uint32_t corr;
};

static struct seen seen[64];
static int nseen;

static void add_seen(struct seen e) {
    if (nseen < 64)
        seen[nseen++] = e;
}

static bool traced(void *ctx, pid_t pid) {
    (void)ctx;
    return pid == getpid();
}

static void on_hello(void *ctx, pid_t pid, const struct np_wire_hello *h) {
    (void)ctx;
    add_seen((struct seen){.kind = SEEN_HELLO, .pid = pid, .origin = h->origin});
}

static void on_record(void *ctx, pid_t pid, const struct np_gpu_record *r) {
    (void)ctx;
    add_seen((struct seen){.kind = SEEN_RECORD, .pid = pid, .corr = r->correlation_id});
}

static void on_names(void *ctx, pid_t pid, uint64_t handle, const char *name, size_t len) {
    (void)ctx;
    struct seen e = {.kind = SEEN_NAME, .pid = pid, .handle = handle, .len = len};
    memcpy(e.name, name, len < sizeof(e.name) ? len : sizeof(e.name) - 1);
    add_seen(e);
}

static void on_cupti(void *ctx, pid_t pid, const struct np_wire_cupti *c) {
    (void)ctx;
    struct seen e = {.kind = SEEN_CUPTI, .pid = pid, .handle = c->api_version};
    /* every string must end inside its field */
    e.len = strlen(c->path) + strlen(c->cuda) + strlen(c->chosen_by) + strlen(c->degraded) +
            strlen(c->record_type[NP_CUPTI_RECORDS - 1]);
    snprintf(e.name, sizeof(e.name), "%s", c->cuda);
    add_seen(e);
}

static void on_graph_node(void *ctx, pid_t pid, const struct np_wire_graph_node *n) {
    (void)ctx;
    add_seen((struct seen){.kind = SEEN_NODE,
                           .pid = pid,
                           .handle = n->node_id,
                           .len = n->original_node_id,
                           .corr = n->correlation_id});
}

static void on_close(void *ctx, pid_t pid) {
    (void)ctx;
    add_seen((struct seen){.kind = SEEN_CLOSE, .pid = pid});
}

static const struct np_gpu_server_ops ops = {
    .is_traced = traced,
    .on_hello = on_hello,
    .on_record = on_record,
    .on_names = on_names,
    .on_cupti = on_cupti,
    .on_graph_node = on_graph_node,
    .on_close = on_close,
};

/* ---- frames as the library writes them ---- */

struct frame {
    uint8_t buf[8192] __attribute__((aligned(8)));
    uint32_t len;
};

static void header(struct frame *f, uint16_t type, uint32_t pid) {
    struct np_wire_header *h = (void *)f->buf;
    h->magic = NP_WIRE_MAGIC;
    h->version = NP_WIRE_VERSION;
    h->type = type;
    h->pid = pid;
}

static void finish(struct frame *f, uint32_t count) {
    struct np_wire_header *h = (void *)f->buf;
    h->size = f->len;
    if (h->type == NP_WIRE_NAMES || h->type == NP_WIRE_ACTIVITY || h->type == NP_WIRE_GRAPH_NODES)
        ((struct np_wire_names *)f->buf)->count = count;
}

static void hello(struct frame *f, uint32_t pid, uint32_t origin) {
    memset(f, 0, sizeof(*f));
    header(f, NP_WIRE_HELLO, pid);
    struct np_wire_hello *h = (void *)f->buf;
    h->origin = origin;
    f->len = sizeof(*h);
    finish(f, 0);
}

static void names_start(struct frame *f) {
    memset(f, 0, sizeof(*f));
    header(f, NP_WIRE_NAMES, (uint32_t)getpid());
    f->len = sizeof(struct np_wire_names);
}

/* An entry of name_len bytes from name (padded to its 8-byte size). */
static void name_entry(struct frame *f, uint64_t handle, const char *name, uint16_t name_len) {
    struct np_wire_name *e = (void *)(f->buf + f->len);
    e->handle = handle;
    e->name_len = name_len;
    memcpy(e->name, name, strnlen(name, name_len));
    f->len += np_wire_name_size(name_len);
}

static void activity(struct frame *f, uint32_t corr) {
    memset(f, 0, sizeof(*f));
    header(f, NP_WIRE_ACTIVITY, (uint32_t)getpid());
    f->len = sizeof(struct np_wire_activity);
    struct np_gpu_record *r = (void *)(f->buf + f->len);
    r->size = (uint16_t)np_gpu_record_size(0);
    r->kind = NP_GPU_KERNEL;
    r->correlation_id = corr;
    f->len += r->size;
    finish(f, 1);
}

static bool send_frame(int fd, const struct frame *f) {
    return send(fd, f->buf, f->len, MSG_NOSIGNAL) == (ssize_t)f->len;
}

/* ---- connections handed over ---- */

/* A server without a socket path, and one end of a pair adopted; *mine is
 * the library's end. */
static struct np_gpu_server *server_with_client(int *mine) {
    struct np_gpu_server *s = NULL;
    int sv[2];
    CHECK(np_gpu_server_open(NULL, &ops, &s) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(np_gpu_server_adopt(s, sv[0]) == 0);
    *mine = sv[1];
    return s;
}

/* Adopted: nonblocking, close-on-exec, counted; a HELLO's origin and pid
 * (the peer's, as SO_PEERCRED says) are handed on; NAMES entries one by
 * one, in the order sent, before the records sent after them. */
static void test_adopt_and_names(void) {
    int mine;
    nseen = 0;
    struct np_gpu_server *s = server_with_client(&mine);
    CHECK(np_gpu_server_stats(s)->clients_adopted == 1);
    CHECK(np_gpu_server_fd(s) >= 0);

    struct frame f;
    hello(&f, (uint32_t)getpid(), NP_ORIGIN_INJECTED);
    CHECK(send_frame(mine, &f));
    names_start(&f);
    name_entry(&f, 0x1000, "kernel_a", 8);
    name_entry(&f, 0x2000, "_Z8kernel_bPfi-and-a-longer-tail", 32);
    finish(&f, 2);
    CHECK(send_frame(mine, &f));
    activity(&f, 7);
    CHECK(send_frame(mine, &f));
    np_gpu_server_poll(s);

    CHECK(nseen == 4);
    CHECK(seen[0].kind == SEEN_HELLO && seen[0].pid == getpid() &&
          seen[0].origin == NP_ORIGIN_INJECTED);
    CHECK(seen[1].kind == SEEN_NAME && seen[1].handle == 0x1000 && seen[1].len == 8 &&
          strcmp(seen[1].name, "kernel_a") == 0);
    CHECK(seen[2].kind == SEEN_NAME && seen[2].handle == 0x2000 && seen[2].len == 32 &&
          strcmp(seen[2].name, "_Z8kernel_bPfi-and-a-longer-tail") == 0);
    CHECK(seen[3].kind == SEEN_RECORD && seen[3].corr == 7);
    CHECK(np_gpu_server_stats(s)->names == 2);
    CHECK(np_gpu_server_stats(s)->clients_accepted == 1);
    CHECK(np_gpu_server_stats(s)->clients_rejected == 0);

    close(mine);
    np_gpu_server_poll(s);
    CHECK(nseen == 5 && seen[4].kind == SEEN_CLOSE);
    np_gpu_server_close(s);
}

/* The server's end is made nonblocking and close-on-exec. */
static void test_adopted_fd_flags(void) {
    struct np_gpu_server *s = NULL;
    int sv[2];
    CHECK(np_gpu_server_open(NULL, &ops, &s) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(np_gpu_server_adopt(s, sv[0]) == 0);
    CHECK((fcntl(sv[0], F_GETFL) & O_NONBLOCK) != 0);
    CHECK((fcntl(sv[0], F_GETFD) & FD_CLOEXEC) != 0);
    close(sv[1]);
    np_gpu_server_close(s);
    CHECK(fcntl(sv[0], F_GETFD) < 0 && errno == EBADF); /* closed with the server */
}

/* An older library's HELLO (origin: padding, 0) is "loaded at start". */
static void test_old_hello(void) {
    int mine;
    nseen = 0;
    struct np_gpu_server *s = server_with_client(&mine);
    struct frame f;
    hello(&f, (uint32_t)getpid(), 0);
    CHECK(send_frame(mine, &f));
    np_gpu_server_poll(s);
    CHECK(nseen == 1 && seen[0].kind == SEEN_HELLO && seen[0].origin == NP_ORIGIN_START);
    close(mine);
    np_gpu_server_close(s);
}

/* One malformed NAMES frame after a good HELLO: the client is rejected as
 * bad_record and nothing of the frame is handed on. */
static void expect_bad_names(const struct frame *bad, enum np_reject_reason why) {
    int mine;
    nseen = 0;
    struct np_gpu_server *s = server_with_client(&mine);
    struct frame f;
    hello(&f, (uint32_t)getpid(), NP_ORIGIN_INJECTED);
    CHECK(send_frame(mine, &f));
    CHECK(send_frame(mine, bad));
    np_gpu_server_poll(s);
    const struct np_gpu_server_stats *st = np_gpu_server_stats(s);
    CHECK(st->rejected[why] == 1 && st->clients_rejected == 1);
    CHECK(st->names == 0);
    for (int i = 0; i < nseen; i++)
        CHECK(seen[i].kind != SEEN_NAME);
    CHECK(nseen == 2 && seen[1].kind == SEEN_CLOSE);
    close(mine);
    np_gpu_server_close(s);
}

static void test_bad_names(void) {
    struct frame f;
    /* more entries announced than there are */
    names_start(&f);
    name_entry(&f, 0x1000, "good", 4);
    finish(&f, 2);
    expect_bad_names(&f, NP_REJECT_BAD_RECORD);
    /* an empty name, after a good entry */
    names_start(&f);
    name_entry(&f, 0x1000, "good", 4);
    name_entry(&f, 0x2000, "", 0);
    finish(&f, 2);
    expect_bad_names(&f, NP_REJECT_BAD_RECORD);
    /* handle 0 */
    names_start(&f);
    name_entry(&f, 0, "zero", 4);
    finish(&f, 1);
    expect_bad_names(&f, NP_REJECT_BAD_RECORD);
    /* a name over NP_WIRE_MAX_NAME */
    names_start(&f);
    struct np_wire_name *e = (void *)(f.buf + f.len);
    e->handle = 0x1000;
    e->name_len = NP_WIRE_MAX_NAME + 1;
    f.len += 64;
    finish(&f, 1);
    expect_bad_names(&f, NP_REJECT_BAD_RECORD);
    /* an entry running past the frame's end */
    names_start(&f);
    name_entry(&f, 0x1000, "0123456789abcdef", 16);
    f.len -= 8;
    finish(&f, 1);
    expect_bad_names(&f, NP_REJECT_BAD_RECORD);
    /* bytes after the last entry */
    names_start(&f);
    name_entry(&f, 0x1000, "good", 4);
    f.len += 8;
    finish(&f, 1);
    expect_bad_names(&f, NP_REJECT_BAD_RECORD);
    /* shorter than its own head */
    names_start(&f);
    f.len = sizeof(struct np_wire_header) + 4;
    finish(&f, 0);
    expect_bad_names(&f, NP_REJECT_BAD_RECORD);
}

/* NAMES before any HELLO: no_hello. */
static void test_names_before_hello(void) {
    int mine;
    nseen = 0;
    struct np_gpu_server *s = server_with_client(&mine);
    struct frame f;
    names_start(&f);
    name_entry(&f, 0x1000, "early", 5);
    finish(&f, 1);
    CHECK(send_frame(mine, &f));
    np_gpu_server_poll(s);
    CHECK(np_gpu_server_stats(s)->rejected[NP_REJECT_NO_HELLO] == 1);
    CHECK(nseen == 0); /* no hello: no on_close either */
    close(mine);
    np_gpu_server_close(s);
}

/* Adopted clients obey what accepted ones do: the pid check and the HELLO
 * deadline. */
static void test_adopted_rules(void) {
    int mine;
    struct np_gpu_server *s = server_with_client(&mine);
    struct frame f;
    hello(&f, (uint32_t)getpid() + 1, NP_ORIGIN_INJECTED);
    CHECK(send_frame(mine, &f));
    np_gpu_server_poll(s);
    CHECK(np_gpu_server_stats(s)->rejected[NP_REJECT_PID_MISMATCH] == 1);
    close(mine);
    np_gpu_server_close(s);

    s = server_with_client(&mine);
    np_gpu_server_tick(s, np_monotonic_ns() + 4900 * MS);
    CHECK(np_gpu_server_stats(s)->rejected[NP_REJECT_NO_HELLO] == 0);
    np_gpu_server_tick(s, np_monotonic_ns() + 5000 * MS);
    CHECK(np_gpu_server_stats(s)->rejected[NP_REJECT_NO_HELLO] == 1);
    close(mine);
    np_gpu_server_close(s);
}

/* A CUPTI frame whose strings fill their fields (no NUL): handed on, each
 * string cut at its field's end; one of another size: bad_record. */
static void test_cupti_frame(void) {
    int mine;
    nseen = 0;
    struct np_gpu_server *s = server_with_client(&mine);
    struct frame f;
    hello(&f, (uint32_t)getpid(), NP_ORIGIN_START);
    CHECK(send_frame(mine, &f));
    memset(&f, 'x', sizeof(f.buf));
    header(&f, NP_WIRE_CUPTI, (uint32_t)getpid());
    struct np_wire_cupti *c = (void *)f.buf;
    c->api_version = 130500;
    c->support = NP_CUPTI_KNOWN;
    f.len = sizeof(*c);
    finish(&f, 0);
    CHECK(send_frame(mine, &f));
    np_gpu_server_poll(s);
    CHECK(nseen == 2 && seen[1].kind == SEEN_CUPTI && seen[1].handle == 130500);
    CHECK(seen[1].len == sizeof(c->path) - 1 + sizeof(c->cuda) - 1 + sizeof(c->chosen_by) - 1 +
                             sizeof(c->degraded) - 1 + sizeof(c->record_type[0]) - 1);
    ((struct np_wire_header *)f.buf)->size = sizeof(*c) - 8; /* shorter than the struct */
    f.len = sizeof(*c) - 8;
    CHECK(send_frame(mine, &f));
    np_gpu_server_poll(s);
    CHECK(np_gpu_server_stats(s)->rejected[NP_REJECT_BAD_RECORD] == 1);
    close(mine);
    np_gpu_server_close(s);
}

static bool fd_closed(int fd) {
    return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

/* What is no connected stream socket is refused and closed (the server
 * owns what it is given). */
static void test_adopt_refused(void) {
    struct np_gpu_server *s = NULL;
    int p[2], dg[2];
    CHECK(np_gpu_server_open(NULL, &ops, &s) == 0);
    CHECK(np_gpu_server_adopt(s, -1) == -EBADF);
    CHECK(pipe(p) == 0);
    CHECK(np_gpu_server_adopt(s, p[0]) == -ENOTSOCK);
    CHECK(fd_closed(p[0]));
    close(p[1]);
    CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, dg) == 0);
    CHECK(np_gpu_server_adopt(s, dg[0]) == -EPROTOTYPE);
    CHECK(fd_closed(dg[0]));
    close(dg[1]);
    int unconnected = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(np_gpu_server_adopt(s, unconnected) == -ENOTCONN);
    CHECK(fd_closed(unconnected));
    CHECK(np_gpu_server_stats(s)->clients_adopted == 0);
    np_gpu_server_close(s);
}

/* Past 256 connections an adopted one is refused as too_many_clients. */
static void test_adopt_limit(void) {
    struct np_gpu_server *s = NULL;
    int theirs[257];
    CHECK(np_gpu_server_open(NULL, &ops, &s) == 0);
    for (int i = 0; i < 257; i++) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        int rc = np_gpu_server_adopt(s, sv[0]);
        CHECK(i < 256 ? rc == 0 : rc == -EMFILE);
        if (i == 256)
            CHECK(fd_closed(sv[0]));
        theirs[i] = sv[1];
    }
    CHECK(np_gpu_server_stats(s)->rejected[NP_REJECT_TOO_MANY] == 1);
    CHECK(np_gpu_server_stats(s)->clients_adopted == 256);
    np_gpu_server_close(s);
    for (int i = 0; i < 257; i++)
        close(theirs[i]);
}

/* GRAPH_NODES: each entry handed on, in order, before the records after it;
 * a malformed frame rejects the client and hands on nothing of it. */
static void nodes_start(struct frame *f) {
    memset(f, 0, sizeof(*f));
    header(f, NP_WIRE_GRAPH_NODES, (uint32_t)getpid());
    f->len = sizeof(struct np_wire_graph_nodes);
}

static void node_entry(struct frame *f, uint32_t event, uint64_t id, uint64_t original,
                       uint32_t corr) {
    struct np_wire_graph_node *e = (void *)(f->buf + f->len);
    *e = (struct np_wire_graph_node){
        .node_id = id, .original_node_id = original, .correlation_id = corr, .event = event};
    f->len += sizeof(*e);
}

static int nodes_frame_outcome(const struct frame *nodes) {
    int mine;
    nseen = 0;
    struct np_gpu_server *s = server_with_client(&mine);
    struct frame f;
    hello(&f, (uint32_t)getpid(), NP_ORIGIN_START);
    CHECK(send_frame(mine, &f));
    CHECK(send_frame(mine, nodes));
    activity(&f, 77);
    send_frame(mine, &f);
    np_gpu_server_poll(s);
    int rejected = (int)np_gpu_server_stats(s)->clients_rejected;
    close(mine);
    np_gpu_server_close(s);
    return rejected;
}

static void test_graph_nodes(void) {
    struct frame f;
    nodes_start(&f);
    node_entry(&f, NP_GRAPH_NODE_CREATED, 101, 0, 12);
    node_entry(&f, NP_GRAPH_NODE_CLONED, 1001, 101, 0);
    finish(&f, 2);
    CHECK(nodes_frame_outcome(&f) == 0);
    CHECK(nseen >= 4 && seen[1].kind == SEEN_NODE && seen[1].handle == 101 && seen[1].corr == 12 &&
          seen[2].kind == SEEN_NODE && seen[2].handle == 1001 && seen[2].len == 101 &&
          seen[3].kind == SEEN_RECORD && seen[3].corr == 77);
    struct {
        uint32_t event;
        uint64_t id, original;
        uint32_t count_more;                       /* announce more entries than there are */
    } bad[] = {{NP_GRAPH_NODE_CREATED, 0, 0, 0},   /* node id 0 */
               {NP_GRAPH_NODE_CLONED, 1001, 0, 0}, /* a clone of nothing */
               {7, 101, 0, 0},                     /* no such event */
               {NP_GRAPH_NODE_CREATED, 101, 0, 1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        nodes_start(&f);
        node_entry(&f, NP_GRAPH_NODE_CREATED, 5, 0, 1); /* a good one first */
        node_entry(&f, bad[i].event, bad[i].id, bad[i].original, 0);
        finish(&f, 2 + bad[i].count_more);
        CHECK(nodes_frame_outcome(&f) == 1);
        for (int k = 0; k < nseen; k++)
            CHECK(seen[k].kind != SEEN_NODE && seen[k].kind != SEEN_RECORD);
    }
    /* bytes after the last entry */
    nodes_start(&f);
    node_entry(&f, NP_GRAPH_NODE_CREATED, 5, 0, 1);
    f.len += 8;
    finish(&f, 1);
    CHECK(nodes_frame_outcome(&f) == 1);
}

int main(void) {
    signal(SIGPIPE, SIG_DFL); /* the server must not need SIGPIPE ignored */
    np_log_set_level(NP_LOG_ERROR);
    test_adopt_and_names();
    test_adopted_fd_flags();
    test_old_hello();
    test_bad_names();
    test_names_before_hello();
    test_cupti_frame();
    test_graph_nodes();
    test_adopted_rules();
    test_adopt_refused();
    test_adopt_limit();
    printf("gpu_socket_unit: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
