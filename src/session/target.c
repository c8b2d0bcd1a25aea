/* target.c - a traced process as the session holds it (see target.h). */
#define _GNU_SOURCE
#include "session/target.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "correlate/kernels.h"
#include "lib/util.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"

static int read_comm(pid_t pid, char *comm, size_t size) {
    char path[64], *text = NULL;
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    int err = np_read_file(path, &text, NULL);
    if (err)
        return err == -ENOENT ? -ESRCH : err;
    text[strcspn(text, "\n")] = '\0';
    snprintf(comm, size, "%s", text);
    free(text);
    return 0;
}

static char *read_exe(pid_t pid) {
    char link[64], exe[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    return strdup(exe);
}

void np_target_refresh_identity(struct np_target *t) {
    read_comm(t->proc.pid, t->comm, sizeof(t->comm));
    char *exe = read_exe(t->proc.pid);
    if (exe && *exe) {
        free(t->exe);
        t->exe = exe;
    } else {
        free(exe);
    }
}

int np_target_new(pid_t pid, struct np_target **out) {
    struct np_target *t = calloc(1, sizeof(*t));
    if (t)
        np_graphs_init(&t->graphs);
    if (!t)
        return -ENOMEM;
    np_process_init(&t->proc, pid);
    t->in.process = &t->proc;
    t->pidfd = -1;
    int err = read_comm(pid, t->comm, sizeof(t->comm));
    if (err) {
        np_target_free(t);
        return err;
    }
    t->exe = read_exe(pid);
    t->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    err = !t->exe ? -ENOMEM : t->pidfd < 0 ? -errno : 0;
    if (err) { /* without a pidfd we would never notice the exit */
        np_target_free(t);
        return err;
    }
    *out = t;
    return 0;
}

void np_target_free(struct np_target *t) {
    if (!t)
        return;
    np_process_release(&t->proc);
    np_ingest_proc_forget_stacks(&t->in);
    np_unwinder_free(t->in.unwinder);
    np_symbolizer_free(t->in.sym);
    np_pycode_free(t->in.pycode);
    np_kernel_names_free(t->kernels);
    np_graphs_free(&t->graphs);
    if (t->pidfd >= 0)
        close(t->pidfd);
    free(t->exe);
    free(t);
}
