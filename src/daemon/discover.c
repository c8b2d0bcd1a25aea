/* discover.c - loads bpf/discover.bpf.c and reads its notifications (see
 * discover.h). */
#include "daemon/discover.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "discover.skel.h"
#include "lib/util.h"

const char *const np_discover_prefixes[] = {"libcuda", "libnccl", NULL};

struct np_discover {
    struct discover_bpf *skel;
    struct ring_buffer *rb;
    np_discover_fn fn;
    void *ctx;
};

static int on_record(void *ctx, void *data, size_t size) {
    struct np_discover *d = ctx;
    if (size >= sizeof(struct np_disc_event))
        d->fn(d->ctx, data);
    return 0;
}

static int set_prefixes(struct np_discover *d) {
    for (__u32 i = 0; np_discover_prefixes[i] && i < NP_DISC_MAX_PREFIXES; i++) {
        struct np_disc_prefix p = {.len = (__u32)strlen(np_discover_prefixes[i])};
        if (p.len > NP_DISC_PREFIX_LEN)
            return -EINVAL;
        memcpy(p.text, np_discover_prefixes[i], p.len);
        if (bpf_map__update_elem(d->skel->maps.lib_prefixes, &i, sizeof(i), &p, sizeof(p),
                                 BPF_ANY) < 0)
            return -errno;
    }
    return 0;
}

int np_discover_open(np_discover_fn fn, void *ctx, struct np_discover **out) {
    struct np_discover *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->fn = fn;
    d->ctx = ctx;
    int err = 0;
    d->skel = discover_bpf__open_and_load();
    if (!d->skel)
        err = -errno;
    if (!err)
        err = set_prefixes(d);
    if (!err && discover_bpf__attach(d->skel) < 0)
        err = -errno;
    if (!err) {
        d->rb = ring_buffer__new(bpf_map__fd(d->skel->maps.disc_events), on_record, d, NULL);
        if (!d->rb)
            err = -errno;
    }
    if (err) {
        np_discover_close(d);
        return err ? err : -EINVAL;
    }
    *out = d;
    return 0;
}

int np_discover_fd(const struct np_discover *d) {
    return ring_buffer__epoll_fd(d->rb);
}

int np_discover_poll(struct np_discover *d) {
    return ring_buffer__consume(d->rb);
}

uint64_t np_discover_lost(const struct np_discover *d) {
    return d->skel->bss->lost_records;
}

void np_discover_close(struct np_discover *d) {
    if (!d)
        return;
    ring_buffer__free(d->rb);
    discover_bpf__destroy(d->skel);
    free(d);
}
