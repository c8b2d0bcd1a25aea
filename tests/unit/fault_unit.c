/* fault_unit.c - code paths that only run when something fails underneath:
 * an allocation (realloc is wrapped: -Wl,--wrap=realloc, and made to fail on
 * demand) or a write to stderr (pointed at /dev/full). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach/attach.h"
#include "attach/closer.h"
#include "check.h"
#include "lib/util.h"

static int realloc_fails_in = -1; /* -1: never; 0: the next call fails */

void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n) {
    if (realloc_fails_in == 0)
        return NULL;
    if (realloc_fails_in > 0)
        realloc_fails_in--;
    return __real_realloc(p, n);
}

/* A site's two links go into a batch both or neither: a batch that took one
 * while the site kept both would have it destroyed twice. */
static void test_close_batch_all_or_nothing(void) {
    struct np_close_batch *b = np_close_batch_new();
    CHECK(b != NULL);
    struct np_probe_site sites[64];
    memset(sites, 0, sizeof(sites));
    /* 63 single-link sites: the batch's first block (64 links) has one slot left */
    for (int i = 0; i < 63; i++) {
        sites[i].id = (uint32_t)i + 1;
        sites[i].link = (struct bpf_link *)(uintptr_t)(0x1000 + i); /* never destroyed here */
        CHECK(np_close_batch_add_site(b, &sites[i]));
        CHECK(sites[i].link == NULL);
    }
    struct np_probe_site *both = &sites[63];
    both->id = 64;
    both->link = (struct bpf_link *)(uintptr_t)0x2000;
    both->ret_link = (struct bpf_link *)(uintptr_t)0x2001;
    realloc_fails_in = 0;
    CHECK(!np_close_batch_add_site(b, both));
    realloc_fails_in = -1;
    size_t links, fds, ids;
    np_close_batch_counts(b, &links, &fds, &ids);
    CHECK(links == 63 && ids == 63);                     /* the batch took neither ... */
    CHECK(both->link != NULL && both->ret_link != NULL); /* ... the site keeps both */
    CHECK(np_close_batch_add_site(b, both));             /* with memory: both */
    np_close_batch_counts(b, &links, &fds, &ids);
    CHECK(links == 65 && ids == 64 && both->link == NULL && both->ret_link == NULL);
    realloc_fails_in = 0;
    CHECK(!np_close_batch_add_fd(b, 5)); /* not taken: the caller closes it */
    realloc_fails_in = -1;
    CHECK(np_close_batch_add_fd(b, 5));
    np_close_batch_counts(b, &links, &fds, &ids);
    CHECK(fds == 1);
    np_close_batch_free(b); /* frees the arrays only: nothing here is a real link */
}

/* np_err must leave errno alone: callers say what failed, then return -errno. */
static void test_log_keeps_errno(void) {
    int saved = dup(STDERR_FILENO);
    int full = open("/dev/full", O_WRONLY);
    CHECK(saved >= 0 && full >= 0);
    dup2(full, STDERR_FILENO); /* every write to stderr fails with ENOSPC */
    unsigned before = np_log_errors();
    errno = EACCES;
    np_err("cannot open %s: %s", "x", strerror(EACCES));
    int after_err = errno;
    errno = EPERM;
    np_warn("a warning");
    int after_warn = errno;
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(full);
    CHECK(after_err == EACCES);
    CHECK(after_warn == EPERM);
    CHECK(np_log_errors() == before + 1); /* errors are counted; warnings are not */
}

int main(void) {
    test_close_batch_all_or_nothing();
    test_log_keeps_errno();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
