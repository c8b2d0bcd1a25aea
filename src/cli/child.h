/* child.h - `ncclprobe record -- CMD ARGS`: starts CMD held before exec,
 * so probes can be attached to the libraries it will load, then lets it go. */
#ifndef NP_CHILD_H
#define NP_CHILD_H

#include <sys/types.h>

struct np_child {
    pid_t pid;
    int release_fd; /* write end: one byte releases the child into exec */
    char *path;     /* CMD resolved through PATH */
};

/* Forks the held child. */
int np_child_spawn(char *const argv[], struct np_child *out);
/* Lets it exec. */
int np_child_release(struct np_child *c);
/* Kills a child that will never be released (setup failed), and reaps it. */
void np_child_abort(struct np_child *c);
void np_child_free(struct np_child *c);

/* The shared libraries the dynamic loader will map for path, resolved by
 * the real loader (LD_TRACE_LOADED_OBJECTS), without running the program.
 * Only for dynamically linked ELF executables; anything else gets an
 * empty list. Returns the number of paths or -errno. */
int np_child_needed_libraries(const char *path, char ***out);
void np_free_string_list(char **list, int n);

#endif
