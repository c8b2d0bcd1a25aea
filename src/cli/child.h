/* child.h - `ncclprobe record -- CMD ARGS`: starts CMD held before exec,
 * so probes can be attached to the libraries it will load, then lets it go. */
#ifndef NP_CHILD_H
#define NP_CHILD_H

#include <stdbool.h>
#include <sys/types.h>

struct np_child {
    pid_t pid;
    int release_fd; /* write end: one byte releases the child into exec */
    char *path;     /* CMD resolved through PATH */
    bool traced;    /* held at exit (np_child_trace_exit) */
    bool reaped;
    int status; /* wait status, once reaped */
};

enum np_child_state {
    NP_CHILD_RUNNING,
    NP_CHILD_AT_EXIT, /* stopped in its exit, memory still mapped: read it, then let it go */
    NP_CHILD_GONE,    /* exited and reaped; status is set */
};

/* Forks the held child. */
int np_child_spawn(char *const argv[], struct np_child *out);
/* Lets it exec. */
int np_child_release(struct np_child *c);

/* Asks to be told when the child exits, before its memory is torn down
 * (PTRACE_SEIZE with PTRACE_O_TRACEEXIT and nothing else: it runs
 * untouched until then). A process that lives a millisecond would
 * otherwise be gone before its mappings could be read to symbolize it.
 * -errno where ptrace is not allowed (then there is no hold). */
int np_child_trace_exit(struct np_child *c);
/* Handles pending wait events of the child (call on SIGCHLD): signals it
 * receives are passed on, job-control stops kept. */
enum np_child_state np_child_poll(struct np_child *c);
/* Lets a child held at exit finish exiting. */
void np_child_let_exit(struct np_child *c);
/* Kills a child that will never be released (setup failed), and reaps it. */
void np_child_abort(struct np_child *c);
void np_child_free(struct np_child *c);

/* The shared libraries the dynamic loader will map for path, resolved by
 * the real loader (glibc's "ld.so --list PATH"), without running the
 * program. Only for ELF executables whose interpreter is glibc's loader;
 * anything else gets an empty list. Returns the number of paths or -errno. */
int np_child_needed_libraries(const char *path, char ***out);
void np_free_string_list(char **list, int n);

#endif
