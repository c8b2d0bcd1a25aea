/* agent.c - the CUPTI library in processes that already run (see agent.h):
 * a worker thread that injects (or wakes) it, one process at a time, and
 * what the session's loop does with each result. */
#define _GNU_SOURCE
#include "session/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "correlate/gpu.h"
#include "ingest/gpu_socket.h"
#include "inject/inject.h"
#include "lib/util.h"
#include "ncclprobe/gpu_wire.h"
#include "session/session.h"
#include "session/target.h"

/* One injection asked for, then done. */
struct job {
    pid_t pid;
    int err;
    struct np_inject_result res;
    struct job *next;
};

struct np_agents {
    pthread_t thread;
    bool running, stopping;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct job *todo, *done; /* FIFO of asked; LIFO of finished (order does not matter) */
    size_t in_flight;
    char lib_path[4200];
    int done_pipe[2]; /* the worker writes a byte per finished job */
};

int np_agent_library_path(char *out, size_t size) {
    char exe[4096];
    if (size)
        out[0] = '\0';
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -errno;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    static const char *const rel[] = {"", "/../lib/ncclprobe"};
    for (size_t i = 0; i < NP_ARRAY_SIZE(rel); i++) {
        snprintf(out, size, "%s%s/libncclprobe_cupti.so", exe, rel[i]);
        if (access(out, R_OK) == 0)
            return 0;
    }
    return -ENOENT;
}

static void *worker(void *arg) {
    struct np_agents *a = arg;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (!a->stopping && !a->todo)
            pthread_cond_wait(&a->wake, &a->lock);
        struct job *j = a->todo;
        if (!j || a->stopping) /* stopping: what has not started never will */
            break;
        a->todo = j->next;
        pthread_mutex_unlock(&a->lock);
        struct np_inject_req req = {.lib_path = a->lib_path};
        np_inject_req_defaults(&req);
        j->err = np_inject_agent(j->pid, &req, &j->res);
        pthread_mutex_lock(&a->lock);
        j->next = a->done;
        a->done = j;
        char byte = 1;
        if (write(a->done_pipe[1], &byte, 1) < 0)
            np_debug("agent worker: %s", strerror(errno));
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

static void agents_free(struct np_agents *a) {
    for (int i = 0; i < 2; i++)
        if (a->done_pipe[i] >= 0)
            close(a->done_pipe[i]);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->wake);
    free(a);
}

static int agents_start(struct np_session *s) {
    if (s->agents)
        return 0;
    struct np_agents *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->done_pipe[0] = a->done_pipe[1] = -1;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    int err = np_agent_library_path(a->lib_path, sizeof(a->lib_path));
    if (!err && pipe2(a->done_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        err = -errno;
    if (!err)
        err = np_session_watch(s->epfd, a->done_pipe[0], NP_TAG_AGENT);
    if (!err)
        err = -pthread_create(&a->thread, NULL, worker, a);
    if (err) {
        agents_free(a);
        return err;
    }
    a->running = true;
    s->agents = a;
    return 0;
}

/* No library will come: what waited for it is written now. */
static void refuse(struct np_session *s, struct np_target *t, int err, const char *why) {
    t->agent.done = true;
    t->agent.err = err;
    snprintf(t->agent.why, sizeof(t->agent.why), "%s", why);
    np_warn("pid %d (%s): no GPU records: %s", t->proc.pid, t->comm, why);
    if (s->gpu_join && !t->proc.gpu_marker)
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)t->proc.pid, NP_GPU_NONE);
}

int np_session_request_agent(struct np_session *s, struct np_target *t) {
    if (t->agent.requested || t->exited)
        return 0;
    t->agent.requested = true;
    if (!s->gpu_server) {
        refuse(s, t, -ENOTCONN,
               "ncclprobe does not listen for GPU records (see the warning above)");
        return -ENOTCONN;
    }
    int err = agents_start(s);
    if (err) {
        refuse(s, t, err,
               err == -ENOENT ? "libncclprobe_cupti.so not found beside ncclprobe"
                              : "cannot start the injector");
        return err;
    }
    struct job *j = calloc(1, sizeof(*j));
    if (!j) {
        refuse(s, t, -ENOMEM, "out of memory");
        return -ENOMEM;
    }
    j->pid = t->proc.pid;
    struct np_agents *a = s->agents;
    pthread_mutex_lock(&a->lock);
    struct job **tail = &a->todo;
    while (*tail)
        tail = &(*tail)->next;
    *tail = j;
    a->in_flight++;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    return 0;
}

/* The agent is in t and its socket is ours: its marker is probed, the
 * socket goes to the GPU server, then the agent hears it may start. */
static void agent_ready(struct np_session *s, struct np_target *t, struct job *j) {
    const struct np_inject_result *r = &j->res;
    np_session_on_new_mapping(s, t, 0); /* the library's marker, probed */
    if (!t->proc.gpu_marker) {
        close(r->sock_fd);
        refuse(s, t, -ENOENT, "the library is loaded, but its marker could not be probed");
        return;
    }
    int fd = r->sock_fd;
    char go = NP_WIRE_START;
    if (send(fd, &go, 1, MSG_NOSIGNAL) != 1) {
        close(fd);
        refuse(s, t, -EPIPE, "the library's socket closed before it started");
        return;
    }
    int err = np_gpu_server_adopt(s->gpu_server, fd); /* fd is the server's, either way */
    if (err < 0) {
        refuse(s, t, err, "the GPU socket server could not take the library's connection");
        return;
    }
    t->agent.done = true;
    t->agent.origin = r->loaded ? NP_AGENT_INJECTED : NP_AGENT_WOKEN;
    t->agent.at_realtime_ns = np_realtime_ns();
    t->agent.pause_ns = r->t.pause_ns;
    t->agent.took_ns = r->t.total_ns;
    t->gpu_off = false;
    np_info("pid %d (%s): libncclprobe_cupti.so %s (thread %d paused %.2f ms, %.1f ms in all)",
            t->proc.pid, t->comm, r->loaded ? "loaded" : "woken", (int)r->tid,
            (double)r->t.pause_ns / 1e6, (double)r->t.total_ns / 1e6);
}

void np_session_agents_done(struct np_session *s) {
    struct np_agents *a = s->agents;
    if (!a)
        return;
    char buf[64];
    while (read(a->done_pipe[0], buf, sizeof(buf)) > 0)
        ;
    pthread_mutex_lock(&a->lock);
    struct job *done = a->done;
    a->done = NULL;
    pthread_mutex_unlock(&a->lock);
    while (done) {
        struct job *j = done;
        done = j->next;
        pthread_mutex_lock(&a->lock);
        a->in_flight--;
        pthread_mutex_unlock(&a->lock);
        struct np_target *t = np_session_find_target(s, j->pid);
        if (!t || t->exited) {
            if (!j->err)
                close(j->res.sock_fd);
        } else if (j->err) {
            refuse(s, t, j->err, j->res.msg);
        } else {
            agent_ready(s, t, j);
        }
        free(j);
    }
}

void np_session_agents_stop(struct np_session *s) {
    struct np_agents *a = s->agents;
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    a->stopping = true;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    if (a->running)
        pthread_join(a->thread, NULL);
    np_session_agents_done(s); /* what finished: sockets closed or handed over */
    while (a->todo) {          /* asked for, never started */
        struct job *j = a->todo;
        a->todo = j->next;
        free(j);
    }
    agents_free(a);
    s->agents = NULL;
}
