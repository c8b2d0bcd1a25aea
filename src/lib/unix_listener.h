/* unix_listener.h - the one way ncclprobe listens on a Unix socket path: the
 * daemon's control socket (daemon/ctl.c) and the socket the CUPTI library
 * sends GPU records to (ingest/gpu_socket.c). Both take their path from the
 * user (--cupti-socket, the configuration), and each used to do this on its
 * own until one of them unlinked whatever file sat at the path; so
 * everything about the path lives here, once:
 *
 *   - the parent directories, created with the mode the server asks for
 *     whatever the umask (existing ones are left as they are);
 *   - what may be replaced: only a socket nobody listens on (left by a
 *     crash). Anything else at the path - a regular file, a directory, a
 *     symbolic link (even to a socket), a FIFO, a device - is refused with
 *     -EEXIST and never touched; a socket a server listens on is
 *     -EADDRINUSE;
 *   - bind, with the socket file never more open than the mode asked for,
 *     then exactly that mode; listen;
 *   - the identity (device, inode) of the file bound, so that closing
 *     unlinks it only while it is still ours, and every failure after bind
 *     removes it again;
 *   - accepting (nonblocking, close-on-exec) with the peer's credentials as
 *     the kernel has them (SO_PEERCRED);
 *   - the small clock both servers drop idle or too old connections by.
 *
 * Errors are negative errno. Nothing here logs except a failed SO_PEERCRED;
 * the servers say what failed (np_unix_listen fills a sentence for that). */
#ifndef NP_UNIX_LISTENER_H
#define NP_UNIX_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/* The longest path a Unix socket address holds, its NUL not counted. */
#define NP_UNIX_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

struct np_unix_listen_opts {
    mode_t dir_mode;  /* for directories created on the way to the path */
    mode_t sock_mode; /* the socket file's mode, exactly (the umask does not apply) */
    int backlog;
};

struct np_unix_listener {
    int fd; /* listening, nonblocking, close-on-exec; -1 when there is none */
    char path[NP_UNIX_PATH_MAX + 1];
    bool bound; /* path names the socket file we bound (dev, ino) */
    dev_t dev;  /* ... unlinked at close only while it is still that file */
    ino_t ino;
    bool replaced_stale; /* np_unix_listen removed a socket nobody listened on */
};

/* A listener that holds nothing (np_unix_listener_close does nothing). */
#define NP_UNIX_LISTENER_INIT                                                                      \
    { .fd = -1 }

/* The address of path, *len its exact length. -EINVAL for an empty path,
 * -ENAMETOOLONG over NP_UNIX_PATH_MAX bytes. */
int np_unix_addr(const char *path, struct sockaddr_un *addr, socklen_t *len);

/* Listens on path (see the top of this file). 0, or -errno with l holding
 * nothing and nothing of ours left at path:
 *   -EINVAL / -ENAMETOOLONG  as np_unix_addr;
 *   -EEXIST      something other than a socket is at path (untouched);
 *   -EADDRINUSE  a server listens there (or bound it while we looked);
 *   -EACCES ...  what failed: making a directory, looking at the path,
 *                connecting to the socket there to see whether it is in use
 *                (a socket we may not connect to is left alone), bind, ...
 * why (why_len bytes, may be NULL) gets a sentence naming the path and
 * what is wrong there, for the server's message. */
int np_unix_listen(const char *path, const struct np_unix_listen_opts *opts,
                   struct np_unix_listener *l, char *why, size_t why_len);

/* Closes the socket; unlinks the socket file if the path still names the
 * one bound (not a file that replaced it since). l then holds nothing. */
void np_unix_listener_close(struct np_unix_listener *l);

struct np_unix_peer {
    pid_t pid; /* in our pid namespace */
    uid_t uid;
    gid_t gid;
};

/* Accepts one connection, nonblocking and close-on-exec, and reads its
 * peer's credentials. The fd, or -errno: accept4's (-EAGAIN when none is
 * waiting, -EMFILE, ...), or -ECONNABORTED when the credentials cannot be
 * read (that connection is closed, with a warning; take the next). */
int np_unix_accept(const struct np_unix_listener *l, struct np_unix_peer *peer);

/* When a connection began and last made progress (CLOCK_MONOTONIC ns). */
struct np_unix_clock {
    uint64_t start_ns, progress_ns;
};

void np_unix_clock_start(struct np_unix_clock *c, uint64_t now_ns);
void np_unix_clock_progress(struct np_unix_clock *c, uint64_t now_ns);
/* Whether the connection is due to be dropped: no progress for idle_ns, or
 * connected for lifetime_ns (either 0: no such limit). A now_ns earlier
 * than the times recorded is never due. */
bool np_unix_clock_expired(const struct np_unix_clock *c, uint64_t now_ns, uint64_t idle_ns,
                           uint64_t lifetime_ns);

#endif
