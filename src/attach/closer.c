/* closer.c - closing released uprobe links on closer threads (see closer.h). */
#include "attach/closer.h"

#include <bpf/libbpf.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "attach/attach.h"
#include "lib/util.h"

#define CLOSER_THREADS 8

struct np_close_batch {
    int *fds;                /* uprobe_multi links */
    struct bpf_link **links; /* perf-event links */
    uint32_t *ids;           /* the probe ids they serve */
    size_t nfds, nlinks, nids;
    size_t fds_cap, links_cap, ids_cap;
    struct np_close_batch *next;
};

struct np_closer {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t threads[CLOSER_THREADS];
    int nthreads;
    bool stopping;
    struct np_close_batch *queue;
    uint32_t *ready_ids; /* ids whose links are all closed: new sites take them */
    size_t nready, ready_cap;
};

/* Room for `more` items after the n there are. */
static bool reserve(void **items, size_t *cap, size_t n, size_t more, size_t size) {
    void *p = np_grow_array(*items, cap, n + more, size);
    if (p)
        *items = p;
    return p != NULL;
}

struct np_close_batch *np_close_batch_new(void) {
    return calloc(1, sizeof(struct np_close_batch));
}

bool np_close_batch_add_site(struct np_close_batch *b, struct np_probe_site *s) {
    size_t nlinks = (s->link != NULL) + (s->ret_link != NULL);
    if (!reserve((void **)&b->links, &b->links_cap, b->nlinks, nlinks, sizeof(*b->links)))
        return false;
    if (s->link)
        b->links[b->nlinks++] = s->link;
    if (s->ret_link)
        b->links[b->nlinks++] = s->ret_link;
    s->link = s->ret_link = NULL;
    if (reserve((void **)&b->ids, &b->ids_cap, b->nids, 1, sizeof(*b->ids)))
        b->ids[b->nids++] = s->id; /* else the links still get closed; the id is not reused */
    return true;
}

bool np_close_batch_add_fd(struct np_close_batch *b, int fd) {
    if (!reserve((void **)&b->fds, &b->fds_cap, b->nfds, 1, sizeof(*b->fds)))
        return false;
    b->fds[b->nfds++] = fd;
    return true;
}

void np_close_batch_counts(const struct np_close_batch *b, size_t *links, size_t *fds,
                           size_t *ids) {
    *links = b->nlinks;
    *fds = b->nfds;
    *ids = b->nids;
}

void np_close_batch_free(struct np_close_batch *b) {
    free(b->fds);
    free(b->links);
    free(b->ids);
    free(b);
}

/* Closes a batch's links (each waits out a grace period). */
static void close_links(struct np_close_batch *b) {
    for (size_t i = 0; i < b->nfds; i++)
        close(b->fds[i]);
    for (size_t i = 0; i < b->nlinks; i++)
        bpf_link__destroy(b->links[i]);
}

/* With the lock held: the batch's ids become reusable (an id that cannot
 * be remembered is simply never reused). */
static void make_ready(struct np_closer *c, const struct np_close_batch *b) {
    for (size_t i = 0; i < b->nids; i++)
        if (reserve((void **)&c->ready_ids, &c->ready_cap, c->nready, 1, sizeof(uint32_t)))
            c->ready_ids[c->nready++] = b->ids[i];
}

static void *closer_main(void *arg) {
    struct np_closer *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->stopping && !c->queue)
            pthread_cond_wait(&c->wake, &c->lock);
        struct np_close_batch *b = c->queue;
        if (!b)
            break; /* stopping, and everything is closed */
        c->queue = b->next;
        pthread_mutex_unlock(&c->lock);
        close_links(b);
        pthread_mutex_lock(&c->lock);
        make_ready(c, b);
        np_close_batch_free(b);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

static struct np_closer *closer_new(void) {
    struct np_closer *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    while (c->nthreads < CLOSER_THREADS &&
           pthread_create(&c->threads[c->nthreads], NULL, closer_main, c) == 0)
        c->nthreads++;
    if (c->nthreads == 0) {
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->wake);
        free(c);
        return NULL;
    }
    return c;
}

void np_closer_submit(struct np_closer **cp, struct np_close_batch *b) {
    if (!*cp)
        *cp = closer_new();
    struct np_closer *c = *cp;
    if (!c) {
        close_links(b);
        np_close_batch_free(b); /* its ids are not reused */
        return;
    }
    pthread_mutex_lock(&c->lock);
    b->next = c->queue;
    c->queue = b;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
}

uint32_t np_closer_reusable_id(struct np_closer *c) {
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    uint32_t id = c->nready ? c->ready_ids[--c->nready] : 0;
    pthread_mutex_unlock(&c->lock);
    return id;
}

void np_closer_free(struct np_closer *c) {
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < c->nthreads; i++)
        pthread_join(c->threads[i], NULL);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    free(c->ready_ids);
    free(c);
}
