/* fuzz_util.c - the scratch files of fuzz.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

#include "attach/python.h"

_Noreturn void fuzz_fail(const char *file, int line, const char *what) {
    fprintf(stderr, "%s:%d: contract broken: %s\n", file, line, what);
    abort();
}

const char *fuzz_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "%s/np-fuzz-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir))
            fuzz_fail(__FILE__, __LINE__, "mkdtemp");
    }
    return dir;
}

const char *fuzz_file(const char *name, const void *data, size_t size) {
    static char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        fuzz_fail(__FILE__, __LINE__, "open scratch file");
    const char *p = data;
    while (size) {
        ssize_t n = write(fd, p, size);
        if (n <= 0)
            fuzz_fail(__FILE__, __LINE__, "write scratch file");
        p += n;
        size -= (size_t)n;
    }
    close(fd);
    return path;
}

void fuzz_clear_dir(void) {
    DIR *d = opendir(fuzz_dir());
    if (!d)
        fuzz_fail(__FILE__, __LINE__, "opendir");
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' || (e->d_name[1] && strcmp(e->d_name, "..")))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

void fuzz_python_layout(struct np_python_layout *out) {
    *out = (struct np_python_layout){
        .walkable = true,
        .co_firstlineno = 0x44,
        .co_filename = 0x70,
        .co_name = 0x78,
        .co_qualname = 0x80,
        .co_linetable = 0x88,
        .bytes_size = 0x10,
        .bytes_data = 0x20,
        .str_length = 0x10,
        .str_state = 0x20,
        .str_ascii_data = 0x28,
        .str_compact_data = 0x38,
    };
}
