/* converters.c - the derived outputs of written sets (pprof, trace.json,
 * flame graphs: the configuration's `formats`). They read a set's whole
 * JSONL files, seconds for a large window, so they are made in child
 * processes at low priority (MAX_CONVERTERS at once, the others queued):
 * the reader never stalls and the work does not count against the CPU
 * budget; inline when no child can be made. The child is `ncclprobe
 * convert`, exec'd: a fresh process, so none of our descriptors (probe
 * links, sockets), locks or threads come along. See internal.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/internal.h"
#include "writers/formats.h"

#define CONVERTERS_EXIT_WAIT_NS 20000000000ull

static void exec_converter(const char *formats, const char *dir) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, NULL);
    close_range(3, ~0u, 0);
    if (nice(10) < 0)
        np_debug("nice: %s", strerror(errno));
    execl("/proc/self/exe", "ncclprobe", "convert", "--format", formats, dir, (char *)NULL);
    _exit(127);
}

static void run_converter(struct daemon *d, const char *dir) {
    char formats[64];
    np_formats_name(d->cfg.formats, formats, sizeof(formats));
    pid_t pid = d->nconverters < MAX_CONVERTERS ? fork() : -1;
    if (pid == 0)
        exec_converter(formats, dir);
    if (pid > 0) {
        d->converters[d->nconverters++] = pid;
        return;
    }
    np_debug("no converter process (%s): converting %s here",
             d->nconverters < MAX_CONVERTERS ? strerror(errno) : "as many as allowed run", dir);
    np_formats_write(dir, d->cfg.formats);
}

void converters_add(struct daemon *d, const char *dir) {
    if (!d->cfg.formats)
        return;
    if (d->nconverters < MAX_CONVERTERS) {
        run_converter(d, dir);
        return;
    }
    char *copy = strdup(dir);
    char **queue = copy ? realloc(d->to_convert, (d->nto_convert + 1) * sizeof(*queue)) : NULL;
    if (!queue) {
        free(copy);
        run_converter(d, dir); /* no memory to queue it: one more at once */
        return;
    }
    d->to_convert = queue;
    d->to_convert[d->nto_convert++] = copy;
}

static void start_queued_converter(struct daemon *d) {
    char *dir = d->to_convert[0];
    memmove(d->to_convert, d->to_convert + 1, --d->nto_convert * sizeof(*d->to_convert));
    run_converter(d, dir);
    free(dir);
}

/* Waits for our converters only, by pid: a child the daemon did not start
 * (one inherited across exec, the discovery helper) is not counted as one. */
static unsigned reap_finished_converters(struct daemon *d) {
    unsigned reaped = 0;
    for (unsigned i = 0; i < d->nconverters;) {
        pid_t r = waitpid(d->converters[i], NULL, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR)) {
            i++;
            continue;
        }
        d->converters[i] = d->converters[--d->nconverters]; /* exited, or not ours (ECHILD) */
        reaped++;
    }
    return reaped;
}

void converters_reap(struct daemon *d) {
    if (reap_finished_converters(d))
        d->last_retain_ns = 0; /* the sets grew: retention runs on the next tick */
    while (d->nto_convert && d->nconverters < MAX_CONVERTERS)
        start_queued_converter(d);
}

/* Any still running after the wait finishes on its own. */
void converters_finish(struct daemon *d) {
    while (d->nto_convert)
        start_queued_converter(d);
    uint64_t until = np_monotonic_ns() + CONVERTERS_EXIT_WAIT_NS;
    while (d->nconverters > 0 && np_monotonic_ns() < until)
        if (!reap_finished_converters(d))
            usleep(20000);
    if (d->nconverters)
        np_warn("%u converters still running: they finish on their own", d->nconverters);
    free(d->to_convert);
    d->to_convert = NULL;
}
