/* stack_hints.c - the bytes at a thread's stack top BPF need not copy (see
 * stack_hints.h).
 *
 * For each (process, thread, stack mapping) the reader keeps the least
 * distance seen between the outermost frame's CFA and the stack top, less a
 * margin of 256 bytes: that much is left uncopied. The outermost frame of a
 * thread (clone3's, or _start's) sits at a fixed place, so the bound holds
 * at any depth: a deeper launch copies more. A value is written to BPF only
 * when it goes down, so a steady workload costs no system call. Stacks that
 * did not unwind to their end (code without CFI, deeper than --stack-bytes)
 * teach nothing; a hinted copy that comes out short drops the entry (the
 * next launch copies all it may, and the entry is learned anew). */
#define _GNU_SOURCE
#include "ingest/stack_hints.h"

#include <bpf/bpf.h>
#include <stdlib.h>

#define MARGIN_BYTES 256
#define MIN_UNNEEDED 512 /* less is not worth a map entry */

struct learned_hint {
    struct np_stack_hint_key key;
    uint32_t unneeded; /* what BPF has (0: no entry) */
};

void np_stack_hints_init(struct np_stack_hints *h) {
    h->fd = -1;
    h->gen = NULL;
    np_map_init(&h->learned);
}

void np_stack_hints_free(struct np_stack_hints *h) {
    np_map_free(&h->learned, free);
}

/* The entry of a key (a new one holds nothing yet); NULL on ENOMEM. A full
 * table starts over: BPF's LRU map forgets on its own. */
static struct learned_hint *entry_of(struct np_stack_hints *h,
                                     const struct np_stack_hint_key *key) {
    uint64_t hash = np_hash_bytes(key, sizeof(*key));
    struct learned_hint *l = np_map_get_u64(&h->learned, hash);
    if (l && l->key.pid == key->pid && l->key.tid == key->tid && l->key.stack_top == key->stack_top)
        return l;
    if (!l && h->learned.count >= NP_STACK_HINTS_MAX) {
        np_map_free(&h->learned, free);
        np_map_init(&h->learned);
    }
    struct learned_hint *fresh = calloc(1, sizeof(*fresh));
    if (!fresh)
        return NULL;
    fresh->key = *key;
    if (np_map_put_u64(&h->learned, hash, fresh) < 0) {
        free(fresh);
        return NULL;
    }
    free(l); /* a hash collision: the newer key wins (its old BPF entry ages out) */
    return fresh;
}

static void write_hint(struct np_stack_hints *h, struct learned_hint *l, uint32_t unneeded) {
    if (unneeded == l->unneeded)
        return;
    int err = unneeded ? bpf_map_update_elem(h->fd, &l->key, &unneeded, BPF_ANY)
                       : bpf_map_delete_elem(h->fd, &l->key);
    if (err == 0 || !unneeded) /* a missing entry (aged out) is dropped all the same */
        l->unneeded = unneeded;
    if (h->gen) /* after the map: a thread that sees the new value looks it up again */
        __atomic_fetch_add(h->gen, 1, __ATOMIC_RELEASE);
}

void np_stack_hints_learn(struct np_stack_hints *h, const struct np_launch_event *e,
                          const struct np_unwind_result *r) {
    if (h->fd < 0 || !(e->flags & NP_LF_STACK_COPY) || !e->stack_top)
        return;
    bool hinted = (e->flags & NP_LF_STACK_HINTED) != 0;
    if (r->end != NP_UNWIND_COMPLETE && !hinted)
        return;
    struct np_stack_hint_key key = {
        .pid = e->hdr.pid, .tid = e->hdr.tid, .stack_top = e->stack_top};
    struct learned_hint *l = entry_of(h, &key);
    if (!l)
        return;
    if (r->end != NP_UNWIND_COMPLETE) { /* the hint left it short */
        write_hint(h, l, 0);
        return;
    }
    uint64_t reached = e->sp + r->bytes_used;
    if (reached > e->stack_top)
        return;
    uint64_t above = e->stack_top - reached;
    if (above < MIN_UNNEEDED + MARGIN_BYTES)
        return; /* nothing worth leaving out (and nothing learned: keep what BPF has) */
    uint32_t unneeded = (uint32_t)(above - MARGIN_BYTES);
    if (!l->unneeded || unneeded < l->unneeded)
        write_hint(h, l, unneeded);
}
