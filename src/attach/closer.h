/* closer.h - closes a released process's uprobe links off the caller's
 * thread. Every uprobe removal waits out an RCU grace period (~40 ms): a
 * process exiting must not stall ncclprobe's reader that long per probe,
 * so its links go to a few closer threads as one batch, and batches of
 * several processes wait out their grace periods together. A batch's probe
 * ids become reusable only once all its links are closed: until then an old
 * uprobe may still fire with one of those ids as its cookie. */
#ifndef NP_ATTACH_CLOSER_H
#define NP_ATTACH_CLOSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct np_closer;
struct np_close_batch;
struct np_probe_site;

/* NULL when out of memory (the caller closes the links itself then). */
struct np_close_batch *np_close_batch_new(void);
/* Moves the site's links (link and ret_link) into the batch, both or
 * neither, and remembers its id. False when out of memory: the site keeps
 * its links, for the caller to close, and the batch holds none of them. */
bool np_close_batch_add_site(struct np_close_batch *b, struct np_probe_site *s);
/* Takes an uprobe_multi link fd; false (fd not taken) when out of memory. */
bool np_close_batch_add_fd(struct np_close_batch *b, int fd);
/* What a batch holds (tests). */
void np_close_batch_counts(const struct np_close_batch *b, size_t *links, size_t *fds, size_t *ids);
/* Frees a batch without closing anything in it (tests; error paths). */
void np_close_batch_free(struct np_close_batch *b);

/* Hands the batch to the closer *c (created on first use); without threads
 * it is closed here. The batch is the closer's from then on. */
void np_closer_submit(struct np_closer **c, struct np_close_batch *b);
/* A probe id whose links are all closed, or 0. */
uint32_t np_closer_reusable_id(struct np_closer *c);
/* Waits until every batch is closed, then frees the closer. */
void np_closer_free(struct np_closer *c);

#endif
