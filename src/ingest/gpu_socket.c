/* gpu_socket.c - the Unix socket the CUPTI library streams GPU records to
 * (see gpu_socket.h). A client's buffer starts at 64 KiB and grows to a
 * frame's size (at most NP_WIRE_MAX_FRAME) when one needs it; a frame is
 * checked whole before any of its records is used. At most 256 connections
 * at once, and one that says nothing for 5 s is closed: an idle or hostile
 * local user cannot make ncclprobe hold much memory. The path itself (what
 * may be replaced there, bind, mode 0666, unlinking) and accepting with the
 * peer's credentials are lib/unix_listener.c's, shared with the control
 * socket. A connection handed over (np_gpu_server_adopt) joins the clients
 * the same way (add_client) as one accepted. */
#define _GNU_SOURCE
#include "ingest/gpu_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/unix_listener.h"
#include "lib/util.h"

#define MAX_CLIENTS 256                 /* connections at once; well below the fd limit */
#define FIRST_BUFFER (64u << 10)        /* grown to a frame's size when one needs it */
#define HELLO_DEADLINE_NS 5000000000ull /* a silent connection is closed after this */

struct client {
    int fd;
    struct np_unix_clock clock; /* from the accept */
    pid_t pid;                  /* the peer, as the kernel says (our pid namespace) */
    pid_t ns_pid;               /* the same process in its own pid namespace */
    bool hello_ok;
    uint8_t *buf;
    size_t len, cap;
    struct client *next;
};

struct np_gpu_server {
    struct np_unix_listener listener;
    int epfd;
    struct np_gpu_server_ops ops;
    struct client *clients;
    size_t nclients;
    struct np_gpu_server_stats stats;
};

static const char *const reject_names[NP_REJECT_MAX] = {
    [NP_REJECT_BAD_MAGIC] = "bad_magic",   [NP_REJECT_BAD_VERSION] = "bad_version",
    [NP_REJECT_OVERSIZED] = "oversized",   [NP_REJECT_TRUNCATED] = "truncated",
    [NP_REJECT_NO_HELLO] = "no_hello",     [NP_REJECT_PID_MISMATCH] = "pid_mismatch",
    [NP_REJECT_NOT_TRACED] = "not_traced", [NP_REJECT_BAD_RECORD] = "bad_record",
    [NP_REJECT_BAD_TYPE] = "bad_type",     [NP_REJECT_TOO_MANY] = "too_many_clients",
};

const char *np_reject_reason_name(enum np_reject_reason r) {
    return r < NP_REJECT_MAX ? reject_names[r] : "?";
}

/* Any user's processes connect (mode 0666, a directory they can reach):
 * who they are is checked per peer. */
static const struct np_unix_listen_opts listen_opts = {
    .dir_mode = 0755, .sock_mode = 0666, .backlog = 64};

int np_gpu_server_open(const char *path, const struct np_gpu_server_ops *ops,
                       struct np_gpu_server **out) {
    char why[512];
    struct np_gpu_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->listener = (struct np_unix_listener)NP_UNIX_LISTENER_INIT;
    s->epfd = -1;
    s->ops = *ops;
    int err = path ? np_unix_listen(path, &listen_opts, &s->listener, why, sizeof(why)) : 0;
    if (err == -EEXIST) /* the user's path names something of theirs: said as an error */
        np_err("CUPTI socket: %s", why);
    else if (err)
        np_debug("CUPTI socket: %s", why);
    else if (s->listener.replaced_stale)
        np_debug("CUPTI socket: replaced the stale socket %s", path);
    if (!err && (s->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        err = -errno;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (!err && path && epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->listener.fd, &ev) < 0)
        err = -errno;
    if (err) {
        np_gpu_server_close(s); /* the socket file, if bound, goes with it */
        return err;
    }
    *out = s;
    return 0;
}

int np_gpu_server_fd(const struct np_gpu_server *s) {
    return s->epfd;
}

const struct np_gpu_server_stats *np_gpu_server_stats(const struct np_gpu_server *s) {
    return &s->stats;
}

/* The pid a process sees for itself: the last NSpid field. */
static pid_t namespace_pid(pid_t pid) {
    char path[64], *text = NULL;
    size_t len;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (np_read_file(path, &text, &len) < 0)
        return pid;
    pid_t ns = pid;
    const char *line = strstr(text, "\nNSpid:");
    if (line) {
        line += strlen("\nNSpid:");
        char *end;
        for (;;) {
            long v = strtol(line, &end, 10);
            if (end == line)
                break;
            ns = (pid_t)v;
            line = end;
        }
    }
    free(text);
    return ns;
}

static void drop_client(struct np_gpu_server *s, struct client *c) {
    for (struct client **p = &s->clients; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    s->nclients--;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->hello_ok && s->ops.on_close)
        s->ops.on_close(s->ops.ctx, c->pid);
    free(c->buf);
    free(c);
}

static void reject(struct np_gpu_server *s, struct client *c, enum np_reject_reason why) {
    s->stats.rejected[why]++;
    s->stats.clients_rejected++;
    np_debug("CUPTI client pid %d rejected: %s", (int)c->pid, np_reject_reason_name(why));
    drop_client(s, c);
}

/* fd (nonblocking, close-on-exec) from peer pid becomes a client, waiting
 * for its HELLO: 0, or -errno with fd closed. */
static int add_client(struct np_gpu_server *s, int fd, pid_t pid) {
    if (s->nclients >= MAX_CLIENTS) {
        s->stats.rejected[NP_REJECT_TOO_MANY]++;
        s->stats.clients_rejected++;
        close(fd);
        return -EMFILE;
    }
    struct client *c = calloc(1, sizeof(*c));
    if (c && (c->buf = malloc(FIRST_BUFFER)))
        c->cap = FIRST_BUFFER;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    int err = !c || !c->buf ? -ENOMEM : 0;
    if (!err && epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        err = -errno;
    if (err) {
        if (c)
            free(c->buf);
        free(c);
        close(fd);
        return err;
    }
    c->fd = fd;
    np_unix_clock_start(&c->clock, np_monotonic_ns());
    s->nclients++;
    c->pid = pid;
    c->ns_pid = namespace_pid(pid);
    c->next = s->clients;
    s->clients = c;
    return 0;
}

static void accept_clients(struct np_gpu_server *s) {
    for (;;) {
        struct np_unix_peer peer;
        int fd = np_unix_accept(&s->listener, &peer);
        if (fd == -ECONNABORTED)
            continue; /* that one is closed: the next */
        if (fd < 0)
            return;
        add_client(s, fd, peer.pid); /* a refused one is counted or closed there */
    }
}

/* The peer's pid (our pid namespace) of a connected AF_UNIX stream socket,
 * made nonblocking and close-on-exec; -errno. */
static int adopt_peer(int fd, pid_t *pid) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    int type = 0;
    socklen_t type_len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) < 0)
        return -errno;
    if (type != SOCK_STREAM)
        return -EPROTOTYPE;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    if (cred.pid <= 0) /* not a connected Unix socket, or a peer we cannot see */
        return -ENOTCONN;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -errno;
    *pid = cred.pid;
    return 0;
}

int np_gpu_server_adopt(struct np_gpu_server *s, int fd) {
    pid_t pid = 0;
    int err = fd < 0 ? -EBADF : adopt_peer(fd, &pid);
    if (err) {
        if (fd >= 0)
            close(fd);
        np_debug("CUPTI connection handed over (fd %d) refused: %s", fd, strerror(-err));
        return err;
    }
    err = add_client(s, fd, pid);
    if (!err)
        s->stats.clients_adopted++;
    return err;
}

static int handle_hello(struct np_gpu_server *s, struct client *c, const struct np_wire_header *h) {
    if (h->size != sizeof(struct np_wire_hello))
        return NP_REJECT_BAD_RECORD;
    if ((pid_t)h->pid != c->pid && (pid_t)h->pid != c->ns_pid)
        return NP_REJECT_PID_MISMATCH;
    if (!s->ops.is_traced(s->ops.ctx, c->pid))
        return NP_REJECT_NOT_TRACED;
    struct np_wire_hello hello;
    memcpy(&hello, h, sizeof(hello));
    hello.message[sizeof(hello.message) - 1] = '\0';
    c->hello_ok = true;
    s->stats.clients_accepted++;
    if (s->ops.on_hello)
        s->ops.on_hello(s->ops.ctx, c->pid, &hello);
    return -1;
}

static bool record_ok(const struct np_gpu_record *r, size_t room) {
    return room >= NP_GPU_RECORD_FIXED && r->size >= NP_GPU_RECORD_FIXED && r->size % 8 == 0 &&
           r->size <= room && r->name_len <= NP_WIRE_MAX_NAME &&
           r->name_len <= r->size - NP_GPU_RECORD_FIXED && r->kind >= NP_GPU_KERNEL &&
           r->kind <= NP_GPU_API_DRIVER;
}

/* The size of the item (record, name entry) at p when it is whole and
 * valid within room bytes, else 0. */
typedef uint32_t (*item_size_fn)(const uint8_t *p, size_t room);

static uint32_t record_size(const uint8_t *p, size_t room) {
    const struct np_gpu_record *r = (const void *)p;
    return record_ok(r, room) ? r->size : 0;
}

static bool name_ok(const struct np_wire_name *e, size_t room) {
    return room >= NP_WIRE_NAME_FIXED && e->handle != 0 && e->name_len >= 1 &&
           e->name_len <= NP_WIRE_MAX_NAME && np_wire_name_size(e->name_len) <= room;
}

static uint32_t name_size(const uint8_t *p, size_t room) {
    const struct np_wire_name *e = (const void *)p;
    return name_ok(e, room) ? np_wire_name_size(e->name_len) : 0;
}

/* A counted frame (ACTIVITY, NAMES, GRAPH_NODES: a head with the count, then the items)
 * whose every item is valid and whose last one ends the frame: checked
 * whole before any item is used, so a bad frame delivers nothing. */
static bool counted_frame_ok(const uint8_t *frame, uint32_t size, item_size_fn item_size) {
    const struct np_wire_activity *head = (const void *)frame; /* = struct np_wire_names */
    if (size < sizeof(*head))
        return false;
    size_t off = sizeof(*head);
    for (uint32_t i = 0; i < head->count; i++) {
        uint32_t n = item_size(frame + off, size - off);
        if (!n)
            return false;
        off += n;
    }
    return off == size;
}

static int handle_activity(struct np_gpu_server *s, struct client *c, const uint8_t *frame,
                           uint32_t size) {
    if (!counted_frame_ok(frame, size, record_size))
        return NP_REJECT_BAD_RECORD;
    s->stats.frames++;
    for (size_t off = sizeof(struct np_wire_activity); off < size;) {
        const struct np_gpu_record *r = (const void *)(frame + off);
        off += r->size;
        s->stats.records++;
        if (r->kind > NP_GPU_MEMSET) { /* API records: the trace file's, not ours */
            s->stats.records_ignored++;
            continue;
        }
        s->ops.on_record(s->ops.ctx, c->pid, r);
    }
    return -1;
}

static int handle_names(struct np_gpu_server *s, struct client *c, const uint8_t *frame,
                        uint32_t size) {
    if (!counted_frame_ok(frame, size, name_size))
        return NP_REJECT_BAD_RECORD;
    s->stats.frames++;
    for (size_t off = sizeof(struct np_wire_names); off < size;) {
        const struct np_wire_name *e = (const void *)(frame + off);
        off += np_wire_name_size(e->name_len);
        s->stats.names++;
        if (s->ops.on_names)
            s->ops.on_names(s->ops.ctx, c->pid, e->handle, e->name, e->name_len);
    }
    return -1;
}

static bool graph_node_ok(const struct np_wire_graph_node *e, size_t room) {
    return room >= sizeof(*e) && e->node_id != 0 &&
           (e->event == NP_GRAPH_NODE_CREATED ||
            (e->event == NP_GRAPH_NODE_CLONED && e->original_node_id != 0));
}

static uint32_t graph_node_size(const uint8_t *p, size_t room) {
    const struct np_wire_graph_node *e = (const void *)p;
    return graph_node_ok(e, room) ? (uint32_t)sizeof(*e) : 0;
}

static int handle_graph_nodes(struct np_gpu_server *s, struct client *c, const uint8_t *frame,
                              uint32_t size) {
    if (!counted_frame_ok(frame, size, graph_node_size))
        return NP_REJECT_BAD_RECORD;
    s->stats.frames++;
    for (size_t off = sizeof(struct np_wire_graph_nodes); off < size;
         off += sizeof(struct np_wire_graph_node)) {
        s->stats.graph_nodes++;
        if (s->ops.on_graph_node)
            s->ops.on_graph_node(s->ops.ctx, c->pid,
                                 (const struct np_wire_graph_node *)(frame + off));
    }
    return -1;
}

/* The library's CUPTI: a whole frame, its strings cut to their fields. */
static int handle_cupti(struct np_gpu_server *s, struct client *c, const uint8_t *frame,
                        uint32_t size) {
    if (size != sizeof(struct np_wire_cupti))
        return NP_REJECT_BAD_RECORD;
    struct np_wire_cupti info;
    memcpy(&info, frame, sizeof(info));
#define NP_TERMINATE(field) (field)[sizeof(field) - 1] = '\0'
    NP_TERMINATE(info.cuda);
    NP_TERMINATE(info.path);
    NP_TERMINATE(info.chosen_by);
    NP_TERMINATE(info.degraded);
    for (int r = 0; r < NP_CUPTI_RECORDS; r++)
        NP_TERMINATE(info.record_type[r]);
#undef NP_TERMINATE
    s->stats.frames++;
    if (s->ops.on_cupti)
        s->ops.on_cupti(s->ops.ctx, c->pid, &info);
    return -1;
}

/* -1: frame used; else the reason to reject the client. */
static int handle_frame(struct np_gpu_server *s, struct client *c, const uint8_t *frame) {
    const struct np_wire_header *h = (const void *)frame;
    if (h->type == NP_WIRE_HELLO)
        return c->hello_ok ? NP_REJECT_BAD_TYPE : handle_hello(s, c, h);
    if (!c->hello_ok)
        return NP_REJECT_NO_HELLO;
    switch (h->type) {
    case NP_WIRE_ACTIVITY:
        return handle_activity(s, c, frame, h->size);
    case NP_WIRE_NAMES:
        return handle_names(s, c, frame, h->size);
    case NP_WIRE_CUPTI:
        return handle_cupti(s, c, frame, h->size);
    case NP_WIRE_GRAPH_NODES:
        return handle_graph_nodes(s, c, frame, h->size);
    case NP_WIRE_STATS:
        if (h->size != sizeof(struct np_wire_stats))
            return NP_REJECT_BAD_RECORD;
        if (s->ops.on_stats)
            s->ops.on_stats(s->ops.ctx, c->pid, (const struct np_wire_stats *)frame);
        return -1;
    default:
        return NP_REJECT_BAD_TYPE;
    }
}

/* Frames complete in the buffer; -1 or a reject reason. Each frame is
 * moved to the buffer's (aligned) start before it is parsed. */
static int parse_frames(struct np_gpu_server *s, struct client *c) {
    size_t off = 0;
    while (c->len - off >= sizeof(struct np_wire_header)) {
        struct np_wire_header h;
        memcpy(&h, c->buf + off, sizeof(h));
        if (h.magic != NP_WIRE_MAGIC)
            return NP_REJECT_BAD_MAGIC;
        if (h.version != NP_WIRE_VERSION)
            return NP_REJECT_BAD_VERSION;
        if (h.size > NP_WIRE_MAX_FRAME)
            return NP_REJECT_OVERSIZED;
        if (h.size < sizeof(h))
            return NP_REJECT_BAD_RECORD;
        if (c->len - off < h.size) {
            if (h.size > c->cap) { /* room for the whole frame */
                uint8_t *buf = realloc(c->buf, NP_WIRE_MAX_FRAME);
                if (!buf)
                    return NP_REJECT_OVERSIZED;
                c->buf = buf;
                c->cap = NP_WIRE_MAX_FRAME;
            }
            break;
        }
        if (off) {
            memmove(c->buf, c->buf + off, c->len - off);
            c->len -= off;
        }
        int why = handle_frame(s, c, c->buf);
        if (why >= 0)
            return why;
        off = h.size;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
    return -1;
}

static void read_client(struct np_gpu_server *s, struct client *c) {
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) { /* closed: a frame cut short is the client's fault */
            if (c->len > 0)
                reject(s, c, NP_REJECT_TRUNCATED);
            else
                drop_client(s, c);
            return;
        }
        c->len += (size_t)n;
        int why = parse_frames(s, c);
        if (why >= 0) {
            reject(s, c, (enum np_reject_reason)why);
            return;
        }
    }
}

void np_gpu_server_poll(struct np_gpu_server *s) {
    struct epoll_event evs[32];
    int n;
    while ((n = epoll_wait(s->epfd, evs, 32, 0)) > 0) {
        for (int i = 0; i < n; i++) {
            struct client *c = evs[i].data.ptr;
            if (!c)
                accept_clients(s);
            else
                read_client(s, c);
        }
        if (n < 32)
            break;
    }
}

void np_gpu_server_tick(struct np_gpu_server *s, uint64_t now) {
    for (struct client *c = s->clients, *next; c; c = next) {
        next = c->next;
        if (!c->hello_ok && np_unix_clock_expired(&c->clock, now, 0, HELLO_DEADLINE_NS))
            reject(s, c, NP_REJECT_NO_HELLO);
    }
}

void np_gpu_server_close(struct np_gpu_server *s) {
    if (!s)
        return;
    while (s->clients)
        drop_client(s, s->clients);
    if (s->epfd >= 0)
        close(s->epfd);
    np_unix_listener_close(&s->listener); /* unlinks the socket file if still ours */
    free(s);
}
