/* drain.c - the ring buffer's drain thread (see drain.h). */
#define _GNU_SOURCE
#include "ingest/drain.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lib/util.h"

#define POLL_MS 100 /* records sent without a wake-up wait at most this long */
/* It runs for microseconds at a time, and must run within the ring's
 * length of time (a fraction of a second flat out) even on a host whose
 * CPUs the workload keeps busy: ahead of other threads when it wakes. */
#define DRAIN_NICE (-10)

struct np_drain {
    struct ring_buffer *rb;
    pthread_t thread;
    int epfd;     /* the ring's epoll fd and ctl_fd */
    int ctl_fd;   /* eventfd: a flush or the end was asked for */
    int ready_fd; /* eventfd: records were queued */
    pthread_mutex_t lock;
    pthread_cond_t answered_cond;
    uint64_t asked, answered; /* flushes */
    bool stop;
};

static void signal_fd(int fd) {
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof(one));
    (void)n; /* a full counter still wakes the reader */
}

static void *drain_main(void *arg) {
    struct np_drain *d = arg;
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), DRAIN_NICE) < 0)
        np_debug("drain: cannot raise its priority: %s", strerror(errno));
    for (;;) {
        struct epoll_event evs[2];
        int n = epoll_wait(d->epfd, evs, 2, POLL_MS);
        uint64_t v;
        for (int i = 0; i < n; i++)
            if (evs[i].data.fd == d->ctl_fd && read(d->ctl_fd, &v, sizeof(v)) < 0)
                np_debug("drain: reading its eventfd: %s", strerror(errno));
        pthread_mutex_lock(&d->lock);
        uint64_t asked = d->asked;
        bool stop = d->stop;
        pthread_mutex_unlock(&d->lock);
        int got = ring_buffer__consume(d->rb);
        if (got > 0)
            signal_fd(d->ready_fd);
        else if (got < 0 && got != -EINTR)
            np_warn("reading the ring buffer: %s", strerror(-got));
        pthread_mutex_lock(&d->lock);
        d->answered = asked;
        pthread_cond_broadcast(&d->answered_cond);
        pthread_mutex_unlock(&d->lock);
        if (stop)
            return NULL;
    }
}

static void free_drain(struct np_drain *d) {
    if (d->epfd >= 0)
        close(d->epfd);
    if (d->ctl_fd >= 0)
        close(d->ctl_fd);
    if (d->ready_fd >= 0)
        close(d->ready_fd);
    pthread_cond_destroy(&d->answered_cond);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

static int watch(int epfd, int fd) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int np_drain_start(struct ring_buffer *rb, struct np_drain **out) {
    struct np_drain *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->rb = rb;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->answered_cond, NULL);
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    d->ctl_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    d->ready_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int err = d->epfd < 0 || d->ctl_fd < 0 || d->ready_fd < 0 ? -errno : 0;
    if (!err)
        err = watch(d->epfd, ring_buffer__epoll_fd(rb));
    if (!err)
        err = watch(d->epfd, d->ctl_fd);
    if (!err)
        err = -pthread_create(&d->thread, NULL, drain_main, d);
    if (err) {
        free_drain(d);
        return err;
    }
    *out = d;
    return 0;
}

int np_drain_ready_fd(const struct np_drain *d) {
    return d->ready_fd;
}

void np_drain_ack(struct np_drain *d) {
    uint64_t v;
    if (read(d->ready_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        np_debug("drain: reading its eventfd: %s", strerror(errno));
}

/* Asks for one more pass over the ring (the last with stop) and waits for it. */
static void ask(struct np_drain *d, bool stop) {
    pthread_mutex_lock(&d->lock);
    uint64_t want = ++d->asked;
    d->stop = d->stop || stop;
    pthread_mutex_unlock(&d->lock);
    signal_fd(d->ctl_fd);
    pthread_mutex_lock(&d->lock);
    while (d->answered < want)
        pthread_cond_wait(&d->answered_cond, &d->lock);
    pthread_mutex_unlock(&d->lock);
}

void np_drain_flush(struct np_drain *d) {
    ask(d, false);
}

void np_drain_stop(struct np_drain *d) {
    if (!d)
        return;
    ask(d, true);
    pthread_join(d->thread, NULL);
    free_drain(d);
}
