/* kernels.c - kernel handle -> name table of one process (see kernels.h). */
#define _GNU_SOURCE
#include "correlate/kernels.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attach/probes.h"
#include "lib/hashmap.h"
#include "lib/util.h"
#include "symbolize/symbolize.h"

struct np_kernel_names {
    struct np_map by_handle; /* handle -> char * */
};

struct np_kernel_names *np_kernel_names_new(void) {
    struct np_kernel_names *k = calloc(1, sizeof(*k));
    if (k)
        np_map_init(&k->by_handle);
    return k;
}

void np_kernel_names_free(struct np_kernel_names *k) {
    if (!k)
        return;
    np_map_free(&k->by_handle, free);
    free(k);
}

const char *np_kernel_names_lookup(const struct np_kernel_names *k, uint64_t handle) {
    return handle ? np_map_get_u64(&k->by_handle, handle) : NULL;
}

const char *np_kernel_name_from_stub(struct np_symbolizer *sym, uint64_t stub) {
    if (!stub || !sym)
        return NULL;
    const struct np_frame *f = np_symbolize(sym, stub, false);
    return f->known ? f->name : NULL;
}

static int remember(struct np_kernel_names *k, uint64_t handle, const char *name) {
    size_t size = strlen(name) * 3 + 1; /* invalid bytes become U+FFFD (3 bytes) */
    char *copy = malloc(size);
    if (!copy)
        return -ENOMEM;
    np_sanitize_frame(copy, size, name, false);
    free(np_map_get_u64(&k->by_handle, handle));
    int err = np_map_put_u64(&k->by_handle, handle, copy);
    if (err)
        free(copy);
    return err;
}

int np_kernel_names_add(struct np_kernel_names *k, uint64_t handle, const char *name) {
    return remember(k, handle, name);
}

int np_kernel_names_on_handle(struct np_kernel_names *k, struct np_symbolizer *sym,
                              const struct np_probe_def *def, const struct np_handle_event *h) {
    const char *name = NULL;
    char *demangled = NULL;

    switch (def->src_kind) {
    case NP_SRC_POINTER: /* NULL without a symbolizer */
        name = np_kernel_name_from_stub(sym, h->source);
        break;
    case NP_SRC_STRING:
        if (h->name_err == 0 && h->name[0]) {
            char raw[NP_NAME_LEN];
            memcpy(raw, h->name, sizeof(raw));
            raw[sizeof(raw) - 1] = '\0';
            demangled = np_demangle_short(raw);
            name = demangled;
        }
        break;
    case NP_SRC_HANDLE:
        name = np_kernel_names_lookup(k, h->source);
        break;
    }
    int err = name ? remember(k, h->handle, name) : 0;
    free(demangled);
    return err;
}
