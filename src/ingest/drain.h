/* drain.h - the thread that empties the BPF ring buffer into the reader's
 * backlog (backlog.h). It only copies records: everything that reads a
 * process, a symbol table or an output stays on the session's thread, which
 * a stall (a first look at a library's debug info, a burst of deep Python
 * stacks) can hold up for longer than the ring lasts. This thread wakes
 * when BPF wakes the ring, at least every 100 ms, and when asked to flush,
 * and says through an eventfd that records came. */
#ifndef NP_INGEST_DRAIN_H
#define NP_INGEST_DRAIN_H

struct ring_buffer;
struct np_drain;

/* Starts draining rb (whose callback is np_ingest_record, queueing). */
int np_drain_start(struct ring_buffer *rb, struct np_drain **out);
/* Readable when records were queued; np_drain_ack reads it. */
int np_drain_ready_fd(const struct np_drain *d);
void np_drain_ack(struct np_drain *d);
/* Returns once everything BPF had written when it was called is queued. */
void np_drain_flush(struct np_drain *d);
/* Drains one last time, ends the thread, frees d (NULL: nothing). */
void np_drain_stop(struct np_drain *d);

#endif
