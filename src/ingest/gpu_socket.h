/* gpu_socket.h - ncclprobe's end of the CUPTI library's socket: accepts
 * the traced processes' libncclprobe_cupti.so (or adopts a connection
 * handed over: the library injected into a running process), checks who
 * they are (the kernel's peer credentials, not what they claim), validates
 * every frame of gpu_wire.h and hands GPU records and launch names on. A
 * client that sends anything malformed is disconnected and counted by
 * reason; the others go on. */
#ifndef NP_GPU_SOCKET_H
#define NP_GPU_SOCKET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ncclprobe/gpu_wire.h"

enum np_reject_reason {
    NP_REJECT_BAD_MAGIC,
    NP_REJECT_BAD_VERSION,
    NP_REJECT_OVERSIZED,
    NP_REJECT_TRUNCATED,
    NP_REJECT_NO_HELLO,
    NP_REJECT_PID_MISMATCH,
    NP_REJECT_NOT_TRACED,
    NP_REJECT_BAD_RECORD,
    NP_REJECT_BAD_TYPE,
    NP_REJECT_TOO_MANY, /* more than 256 connections at once */
    NP_REJECT_MAX
};

struct np_gpu_server_stats {
    uint64_t clients_accepted; /* connections whose hello was accepted */
    uint64_t clients_rejected; /* sum of rejected[] */
    uint64_t rejected[NP_REJECT_MAX];
    uint64_t clients_adopted; /* connections handed over (np_gpu_server_adopt) */
    uint64_t frames, records;
    uint64_t records_ignored; /* API records (file mode only) and unknown kinds */
    uint64_t names;           /* NAMES entries handed on */
    uint64_t graph_nodes;     /* GRAPH_NODES entries handed on */
};

struct np_gpu_server_ops {
    void *ctx;
    /* Is this (host) pid traced? Clients of other processes are refused. */
    bool (*is_traced)(void *ctx, pid_t pid);
    /* hello->origin says how the library came (enum np_hello_origin). */
    void (*on_hello)(void *ctx, pid_t pid, const struct np_wire_hello *hello);
    void (*on_record)(void *ctx, pid_t pid, const struct np_gpu_record *rec);
    /* A launch handle's kernel name (NAMES frames; may be NULL): name is len
     * bytes, not NUL-terminated, 1..NP_WIRE_MAX_NAME. It comes before the
     * records of the launch that made the library send it. The same handle
     * may come again (a later connection of the same process). */
    void (*on_names)(void *ctx, pid_t pid, uint64_t handle, const char *name, size_t len);
    void (*on_stats)(void *ctx, pid_t pid, const struct np_wire_stats *stats);
    /* A CUDA graph node CUPTI announced (GRAPH_NODES frames; may be NULL):
     * node_id != 0, a CLONED one with its original. It comes before the
     * records of any replay of the node. */
    void (*on_graph_node)(void *ctx, pid_t pid, const struct np_wire_graph_node *node);
    /* The CUPTI the library uses (may be NULL): after its HELLO, once it
     * tried CUPTI; every string NUL-terminated. */
    void (*on_cupti)(void *ctx, pid_t pid, const struct np_wire_cupti *cupti);
    /* The process's library closed its connection: nothing more will come. */
    void (*on_close)(void *ctx, pid_t pid);
};

struct np_gpu_server;

/* Listens on path (lib/unix_listener.h): missing directories are created
 * 0755; a stale socket file is replaced, a live one - another ncclprobe - is
 * -EADDRINUSE; anything that is not a socket is -EEXIST, left untouched and
 * said as an error (the path is the user's). The socket is 0666: traced
 * programs run as any user; who they are is checked per peer. A NULL path:
 * no listening socket, only connections handed over (np_gpu_server_adopt). */
int np_gpu_server_open(const char *path, const struct np_gpu_server_ops *ops,
                       struct np_gpu_server **out);
/* Takes an already-connected AF_UNIX stream socket as a client (e.g. the
 * injector's end of the socket it gave the library in a running process):
 * made nonblocking and close-on-exec, its peer from SO_PEERCRED, then
 * treated exactly as an accepted connection (HELLO deadline, pid check,
 * limits, accounting). The library on the other end speaks once it got
 * NP_WIRE_START (gpu_wire.h), which the caller sends. fd is the server's in
 * every case: 0, or -errno with fd closed: -EBADF, -ENOTSOCK, -EPROTOTYPE
 * (not a stream socket), -ENOTCONN (no peer we can see), -EMFILE (256
 * connections already: counted as too_many_clients), -ENOMEM, epoll's. */
int np_gpu_server_adopt(struct np_gpu_server *s, int fd);
/* One fd to poll for everything the server waits on. */
int np_gpu_server_fd(const struct np_gpu_server *s);
/* Accepts and reads whatever is ready, without blocking. */
void np_gpu_server_poll(struct np_gpu_server *s);
/* Closes connections that said nothing for 5 s (counted as no_hello). */
void np_gpu_server_tick(struct np_gpu_server *s, uint64_t now);
const struct np_gpu_server_stats *np_gpu_server_stats(const struct np_gpu_server *s);
const char *np_reject_reason_name(enum np_reject_reason r);
/* Closes every client (on_close for each) and removes the socket file. */
void np_gpu_server_close(struct np_gpu_server *s);

#endif
