/* unix_listener.c - listening on a Unix socket path, for both of ncclprobe's
 * servers (see unix_listener.h for what it owns and why it is one place).
 *
 * The order of np_unix_listen: parent directories; the stale check (lstat
 * first - only a socket goes further - then a connect to see whether anyone
 * listens, then lstat again so that what is unlinked is the socket looked
 * at); a socket whose own mode is the one asked for before bind (bind gives
 * the file that mode less the umask, so it is never more open than asked);
 * bind; lstat of the new file for its identity; its exact mode, set through
 * an O_PATH handle checked to be that file (a symbolic link put there
 * meanwhile is never followed); listen. A failure after bind removes the
 * file bound, and only that. */
#define _GNU_SOURCE
#include "lib/unix_listener.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util.h"

static void say(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t why_len, const char *fmt, ...) {
    va_list ap;

    if (!why || !why_len)
        return;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

int np_unix_addr(const char *path, struct sockaddr_un *addr, socklen_t *len) {
    size_t n = path ? strlen(path) : 0;

    if (n == 0)
        return -EINVAL;
    if (n > NP_UNIX_PATH_MAX)
        return -ENAMETOOLONG;
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path, path, n + 1);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return 0;
}

/* "a regular file", ... for the messages. */
static const char *file_kind(mode_t mode) {
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISLNK(mode))
        return "a symbolic link";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "a file of unknown type";
}

/* The mode of a directory just made, whatever the umask; never through a
 * symbolic link put in its place. */
static int set_dir_mode(const char *dir, mode_t mode) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = 0;

    if (fd < 0)
        return -errno;
    if (fchmod(fd, mode) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

/* mkdir -p of path's directory; the directories made here get mode. */
static int make_parents(const char *path, mode_t mode, char *why, size_t why_len) {
    char dir[NP_UNIX_PATH_MAX + 1];
    int rc;

    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(dir, mode) == 0) {
            rc = set_dir_mode(dir, mode);
            if (rc < 0) {
                say(why, why_len, "cannot set the mode of the directory %s: %s", dir,
                    strerror(-rc));
                return rc;
            }
        } else if (errno != EEXIST) {
            rc = -errno;
            say(why, why_len, "cannot create the directory %s: %s", dir, strerror(-rc));
            return rc;
        }
        *p = saved;
        if (!saved)
            return 0;
    }
}

/* 0 when the path is free (a socket nobody listens on is removed). */
static int clear_stale(struct np_unix_listener *l, const struct sockaddr_un *addr, socklen_t len,
                       char *why, size_t why_len) {
    struct stat st, now;
    int fd, rc;

    if (lstat(l->path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        rc = -errno;
        say(why, why_len, "cannot look at %s: %s", l->path, strerror(-rc));
        return rc;
    }
    if (!S_ISSOCK(st.st_mode)) {
        say(why, why_len,
            "%s is %s, not a socket: it is left as it is (remove it, or choose another path)",
            l->path, file_kind(st.st_mode));
        return -EEXIST;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        say(why, why_len, "cannot create a socket: %s", strerror(-rc));
        return rc;
    }
    rc = connect(fd, (const struct sockaddr *)addr, len) == 0 ? 0 : -errno;
    close(fd);
    if (rc == 0 || rc == -EAGAIN || rc == -EINPROGRESS) { /* EAGAIN: its backlog is full */
        say(why, why_len, "a server is listening on %s already", l->path);
        return -EADDRINUSE;
    }
    if (rc == -ENOENT)
        return 0; /* gone since we looked */
    if (rc != -ECONNREFUSED) {
        say(why, why_len,
            "cannot tell whether the socket %s is in use (connecting to it: %s): it is left as "
            "it is",
            l->path, strerror(-rc));
        return rc;
    }
    /* Nobody listens: left over from a crash. Remove it if it is still the
     * socket looked at. */
    if (lstat(l->path, &now) < 0) {
        if (errno == ENOENT)
            return 0;
        rc = -errno;
        say(why, why_len, "cannot look at %s: %s", l->path, strerror(-rc));
        return rc;
    }
    if (now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
        say(why, why_len, "%s changed while it was being looked at", l->path);
        return -EBUSY;
    }
    if (unlink(l->path) < 0 && errno != ENOENT) {
        rc = -errno;
        say(why, why_len, "cannot remove the stale socket %s: %s", l->path, strerror(-rc));
        return rc;
    }
    l->replaced_stale = true;
    return 0;
}

/* Gives the file bound exactly mode (have: its mode now). */
static int set_sock_mode(const struct np_unix_listener *l, mode_t have, mode_t mode, char *why,
                         size_t why_len) {
    char proc[64];
    struct stat st;
    int fd, rc = 0;

    if ((have & 07777) == mode)
        return 0;
    fd = open(l->path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
    } else if (fstat(fd, &st) < 0) {
        rc = -errno;
    } else if (st.st_dev != l->dev || st.st_ino != l->ino) {
        say(why, why_len, "%s was replaced while it was being set up", l->path);
        close(fd);
        return -EBUSY;
    } else {
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        if (chmod(proc, mode) < 0)
            rc = -errno;
    }
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        say(why, why_len, "cannot set the mode of %s: %s", l->path, strerror(-rc));
    return rc;
}

/* Unlinks l->path if it is still the file bound. */
static void unlink_if_ours(const struct np_unix_listener *l) {
    struct stat st;

    if (l->bound && lstat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
        unlink(l->path);
}

int np_unix_listen(const char *path, const struct np_unix_listen_opts *opts,
                   struct np_unix_listener *l, char *why, size_t why_len) {
    struct sockaddr_un addr;
    socklen_t addr_len;
    struct stat st;
    bool bind_done = false;
    int rc;

    *l = (struct np_unix_listener)NP_UNIX_LISTENER_INIT;
    say(why, why_len, "%s", "");
    rc = np_unix_addr(path, &addr, &addr_len);
    if (rc < 0) {
        if (rc == -EINVAL)
            say(why, why_len, "no socket path given");
        else
            say(why, why_len, "the socket path %.40s... is too long (at most %zu bytes)", path,
                NP_UNIX_PATH_MAX);
        return rc;
    }
    memcpy(l->path, path, strlen(path) + 1);
    rc = make_parents(path, opts->dir_mode, why, why_len);
    if (rc < 0)
        goto fail;
    rc = clear_stale(l, &addr, addr_len, why, why_len);
    if (rc < 0)
        goto fail;

    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        rc = -errno;
        say(why, why_len, "cannot create a socket: %s", strerror(-rc));
        goto fail;
    }
    /* bind gives the file this mode less the umask: never more open than asked. */
    if (fchmod(l->fd, opts->sock_mode) < 0) {
        rc = -errno;
        say(why, why_len, "cannot set the mode of a socket: %s", strerror(-rc));
        goto fail;
    }
    if (bind(l->fd, (const struct sockaddr *)&addr, addr_len) < 0) {
        rc = -errno;
        if (rc == -EADDRINUSE) /* someone took the path since we looked */
            say(why, why_len, "%s appeared while being set up (another server?)", path);
        else
            say(why, why_len, "cannot bind %s: %s", path, strerror(-rc));
        goto fail;
    }
    bind_done = true;
    if (lstat(path, &st) < 0) {
        rc = -errno;
        say(why, why_len, "cannot look at %s once bound: %s", path, strerror(-rc));
        goto fail;
    }
    if (!S_ISSOCK(st.st_mode)) {
        say(why, why_len, "%s was replaced by %s while being set up", path, file_kind(st.st_mode));
        rc = -EBUSY;
        goto fail;
    }
    l->bound = true;
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    rc = set_sock_mode(l, st.st_mode, opts->sock_mode, why, why_len);
    if (rc < 0)
        goto fail;
    if (listen(l->fd, opts->backlog) < 0) {
        rc = -errno;
        say(why, why_len, "cannot listen on %s: %s", path, strerror(-rc));
        goto fail;
    }
    return 0;

fail:
    if (l->bound) {
        unlink_if_ours(l);
    } else if (bind_done && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        /* The socket we just bound, whose identity could not be read. */
        unlink(path);
    }
    if (l->fd >= 0)
        close(l->fd);
    *l = (struct np_unix_listener)NP_UNIX_LISTENER_INIT;
    return rc;
}

void np_unix_listener_close(struct np_unix_listener *l) {
    if (l->fd >= 0)
        close(l->fd);
    unlink_if_ours(l);
    *l = (struct np_unix_listener)NP_UNIX_LISTENER_INIT;
}

int np_unix_accept(const struct np_unix_listener *l, struct np_unix_peer *peer) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0)
        return -errno;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        np_warn("%s: cannot read a client's credentials (SO_PEERCRED): %s; it is disconnected",
                l->path, strerror(errno));
        close(fd);
        return -ECONNABORTED;
    }
    peer->pid = cred.pid;
    peer->uid = cred.uid;
    peer->gid = cred.gid;
    return fd;
}

void np_unix_clock_start(struct np_unix_clock *c, uint64_t now_ns) {
    c->start_ns = c->progress_ns = now_ns;
}

void np_unix_clock_progress(struct np_unix_clock *c, uint64_t now_ns) {
    c->progress_ns = now_ns;
}

bool np_unix_clock_expired(const struct np_unix_clock *c, uint64_t now_ns, uint64_t idle_ns,
                           uint64_t lifetime_ns) {
    bool idle = idle_ns && now_ns >= c->progress_ns && now_ns - c->progress_ns >= idle_ns;
    bool old = lifetime_ns && now_ns >= c->start_ns && now_ns - c->start_ns >= lifetime_ns;
    return idle || old;
}
