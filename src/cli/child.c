/* child.c - held child for `-- CMD` (see child.h). */
#define _GNU_SOURCE
#include "cli/child.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/util.h"

static char *resolve_in_path(const char *cmd) {
    if (strchr(cmd, '/'))
        return realpath(cmd, NULL);
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char *copy = strdup(path), *save = NULL;
    if (!copy)
        return NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", dir, cmd);
        if (access(full, X_OK) == 0) {
            free(copy);
            return realpath(full, NULL);
        }
    }
    free(copy);
    return NULL;
}

int np_child_spawn(char *const argv[], struct np_child *out) {
    int fds[2];

    memset(out, 0, sizeof(*out));
    out->path = resolve_in_path(argv[0]);
    if (!out->path) {
        np_err("command not found: %s", argv[0]);
        return -ENOENT;
    }
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int err = -errno;
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    if (pid == 0) {
        char go;
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        close(fds[1]);
        if (read(fds[0], &go, 1) != 1)
            _exit(127); /* ncclprobe gave up: never run untraced */
        execv(out->path, argv);
        fprintf(stderr, "ncclprobe: cannot run %s: %s\n", out->path, strerror(errno));
        _exit(127);
    }
    close(fds[0]);
    out->pid = pid;
    out->release_fd = fds[1];
    return 0;
}

int np_child_release(struct np_child *c) {
    int err = write(c->release_fd, "g", 1) == 1 ? 0 : -errno;
    close(c->release_fd);
    c->release_fd = -1;
    return err;
}

int np_child_trace_exit(struct np_child *c) {
    if (ptrace(PTRACE_SEIZE, c->pid, NULL, (void *)(long)PTRACE_O_TRACEEXIT) < 0)
        return -errno;
    c->traced = true;
    return 0;
}

static bool is_job_control_stop(int sig) {
    return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

enum np_child_state np_child_poll(struct np_child *c) {
    for (;;) {
        if (c->reaped)
            return NP_CHILD_GONE;
        int status;
        pid_t r = waitpid(c->pid, &status, WNOHANG | __WALL);
        if (r == 0)
            return NP_CHILD_RUNNING;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            c->reaped = true; /* ECHILD: nothing left to wait for */
            return NP_CHILD_GONE;
        }
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            c->reaped = true;
            c->status = status;
            return NP_CHILD_GONE;
        }
        if (!WIFSTOPPED(status))
            continue;
        int event = (unsigned)status >> 16, sig = WSTOPSIG(status);
        if (event == PTRACE_EVENT_EXIT)
            return NP_CHILD_AT_EXIT;
        if (event == PTRACE_EVENT_STOP) /* group-stop: stay stopped as without us */
            ptrace(is_job_control_stop(sig) ? PTRACE_LISTEN : PTRACE_CONT, c->pid, NULL, NULL);
        else /* a signal on its way to the child: deliver it */
            ptrace(PTRACE_CONT, c->pid, NULL, (void *)(long)sig);
    }
}

void np_child_let_exit(struct np_child *c) {
    ptrace(PTRACE_DETACH, c->pid, NULL, NULL);
    c->traced = false;
}

void np_child_abort(struct np_child *c) {
    if (c->release_fd >= 0)
        close(c->release_fd); /* the child sees EOF and exits */
    c->release_fd = -1;
    if (c->pid > 0)
        waitpid(c->pid, NULL, 0);
}

void np_child_free(struct np_child *c) {
    free(c->path);
    c->path = NULL;
}

/* The glibc dynamic loader named in path's PT_INTERP, or NULL: a static
 * executable, a script, or another libc's loader (musl's would ignore the
 * listing request and run the program). */
static char *glibc_interpreter(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    elf_version(EV_CURRENT);
    Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
    char *interp = NULL;
    size_t n = 0;
    if (elf && elf_kind(elf) == ELF_K_ELF && elf_getphdrnum(elf, &n) == 0) {
        for (size_t i = 0; i < n && !interp; i++) {
            GElf_Phdr ph;
            size_t size;
            const char *image = elf_rawfile(elf, &size);
            if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_INTERP || !image ||
                ph.p_offset >= size || ph.p_filesz > size - ph.p_offset)
                continue;
            interp = strndup(image + ph.p_offset, ph.p_filesz);
        }
    }
    elf_end(elf);
    close(fd);
    const char *base = interp ? strrchr(interp, '/') : NULL;
    if (!base || strncmp(base + 1, "ld-linux", 8) != 0) {
        free(interp);
        return NULL;
    }
    return interp;
}

void np_free_string_list(char **list, int n) {
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/* Lines look like "\tlibfoo.so.1 => /usr/lib/libfoo.so.1 (0x...)" or
 * "\t/lib64/ld-linux-x86-64.so.2 (0x...)". */
static char *path_of_line(const char *line) {
    const char *arrow = strstr(line, "=> ");
    const char *p = arrow ? arrow + 3 : line;
    while (*p == '\t' || *p == ' ')
        p++;
    if (*p != '/')
        return NULL;
    size_t n = strcspn(p, " (\n");
    return strndup(p, n);
}

#define LIST_TIMEOUT_MS 5000

int np_child_needed_libraries(const char *path, char ***out) {
    *out = NULL;
    char *interp = glibc_interpreter(path);
    if (!interp)
        return 0;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        free(interp);
        return -errno;
    }
    pid_t pid = fork();
    if (pid < 0) {
        free(interp);
        close(fds[0]);
        close(fds[1]);
        return -errno;
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(fds[1], STDOUT_FILENO);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        /* "ld.so --list FILE" lists and exits; it never runs FILE */
        execl(interp, interp, "--list", path, (char *)NULL);
        _exit(127);
    }
    free(interp);
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char **list = NULL;
    int n = 0;
    char line[4096];
    uint64_t deadline = np_monotonic_ns() + LIST_TIMEOUT_MS * 1000000ull;
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    while (f && np_monotonic_ns() < deadline &&
           poll(&pfd, 1, (int)((deadline - np_monotonic_ns()) / 1000000) + 1) > 0 &&
           fgets(line, sizeof(line), f)) {
        char *lib = path_of_line(line);
        if (!lib)
            continue;
        char **bigger = realloc(list, (size_t)(n + 1) * sizeof(*list));
        if (!bigger) {
            free(lib);
            break;
        }
        list = bigger;
        list[n++] = lib;
    }
    kill(pid, SIGKILL); /* it is done by now, or stuck: either way, it goes */
    if (f)
        fclose(f);
    else
        close(fds[0]);
    waitpid(pid, NULL, 0);
    *out = list;
    return n;
}
