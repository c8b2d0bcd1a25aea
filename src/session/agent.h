/* agent.h - the CUPTI library (libncclprobe_cupti.so, "the agent") in
 * processes that are already running: loaded into them live (src/inject),
 * or woken where it is loaded already (at start through
 * CUDA_INJECTION64_PATH, or by an earlier injection).
 *
 * An injection pauses one thread of the target for well under a
 * millisecond, but finding that thread can take up to a second: injections
 * run on a worker thread of the session, one at a time, and their results
 * come back to the session's loop (NP_TAG_AGENT). There the session probes
 * the new library's marker, hands the socket the agent got to the GPU
 * server, and only then tells the agent to start (a launch marked before
 * its marker was probed would lose its GPU records). */
#ifndef NP_SESSION_AGENT_H
#define NP_SESSION_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct np_session;
struct np_target;

enum np_agent_origin {
    NP_AGENT_NONE = 0, /* not in the process (or not known to be) */
    NP_AGENT_AT_START, /* loaded by CUDA (CUDA_INJECTION64_PATH) */
    NP_AGENT_INJECTED, /* loaded live by this session */
    NP_AGENT_WOKEN,    /* loaded before (an earlier injection), woken by this session */
};

/* What a target's agent is, as summary.json and status say it. */
struct np_agent_state {
    enum np_agent_origin origin;
    bool requested;          /* an injection was asked for */
    bool done;               /* ... and it ended (err says how) */
    int err;                 /* -errno of a refused or failed injection */
    char why[320];           /* ... in words (the target untouched when refused) */
    uint64_t at_realtime_ns; /* when it was loaded or woken */
    uint64_t pause_ns;       /* the hijacked thread's pause, stop and stub */
    uint64_t took_ns;        /* the whole injection, finding the thread included */
};

/* libncclprobe_cupti.so: beside the ncclprobe binary, or in ../lib/ncclprobe
 * (where the package puts it). 0, or -ENOENT (out holds the last path tried). */
int np_agent_library_path(char *out, size_t size);

/* Asks for the agent in t: loaded live, or woken where it is. Refusals and
 * failures are said (once, a warning) and kept in t's agent state. */
int np_session_request_agent(struct np_session *s, struct np_target *t);
/* The session's loop: the worker finished injections (NP_TAG_AGENT). */
void np_session_agents_done(struct np_session *s);
/* Waits for the injections in flight (at most their own bounded time). */
void np_session_agents_stop(struct np_session *s);
/* "start", "injected", "woken" or "" */
static inline const char *np_agent_origin_name(enum np_agent_origin o) {
    static const char *const names[] = {"", "start", "injected", "woken"};
    return (unsigned)o < sizeof(names) / sizeof(names[0]) ? names[o] : "";
}

#endif
