/* names.c - late names for libncclprobe_cupti.so (see names.h).
 *
 * The handles seen are kept in a fixed open-addressing set of 2^17 slots,
 * filled to at most 64k handles (a full set names no more; the load stays
 * at most one half, so probes are short), lock-free: a slot's handle is
 * claimed with one compare-and-swap and never changes again. Each slot
 * remembers two connections: the one a thread took on naming the handle
 * for (`claimed`: the thread that moves it to the current connection, by
 * another compare-and-swap) and the one its name was queued on (`named`).
 * So a handle is named once per connection, and again to the next daemon.
 *
 * The frame is queued on the launching thread, at the ENTER callback:
 * CUPTI completes the launch's records later and they are queued behind it,
 * so ncclprobe has the name before it sees the records. That holds for
 * every thread: one that launches the handle while another has claimed it
 * but not queued its name yet (claimed, not named) queues the name itself
 * rather than wait, so its own records cannot overtake the name - a
 * repeat of the same name, rare and harmless. A frame the queue refuses
 * (full) gives the slot back, so the next launch tries again. The
 * driver's queries run on the launching thread too, once per handle and
 * connection, only when CUPTI gave no symbolName; they are never called on
 * a runtime launch's func (a host stub is no driver handle). */
#define _GNU_SOURCE
#include "cupti/names.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

#include "cupti/sink.h"
#include "ncclprobe/gpu_wire.h"

#define SET_BITS 17
#define SET_SLOTS (1u << SET_BITS)
#define SET_MAX (1u << 16) /* handles named at most */

struct seen {
    uint64_t handle;  /* 0: free; set once */
    uint32_t claimed; /* the connection a thread took on naming it for */
    uint32_t named;   /* the connection its name was queued on (or found to be none) */
};

static struct seen seen_set[SET_SLOTS];
static uint32_t seen_count;

/* cuFuncGetName(const char **, CUfunction) and cuKernelGetName(const char
 * **, CUkernel): both take a handle pointer, so one type serves. Two
 * candidates each: libcuda.so.1's, and the first in the global scope when
 * that is another one (a process with a driver library of its own). */
typedef CUresult (*get_name_fn)(const char **name, void *handle);
static struct {
    bool resolved;
    get_name_fn func[2], kernel[2];
} driver;

static void resolve(void *cuda, const char *symbol, get_name_fn out[2]) {
    void *own = cuda ? dlsym(cuda, symbol) : NULL;
    void *global = dlsym(RTLD_DEFAULT, symbol);
    *(void **)&out[0] = own ? own : global;
    *(void **)&out[1] = own && global != own ? global : NULL;
}

void np_names_init(void) {
    if (__atomic_load_n(&driver.resolved, __ATOMIC_ACQUIRE))
        return;
    /* only a libcuda already loaded: never load one (a reference, kept) */
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    resolve(cuda, "cuFuncGetName", driver.func);
    resolve(cuda, "cuKernelGetName", driver.kernel);
    __atomic_store_n(&driver.resolved, true, __ATOMIC_RELEASE);
}

static uint32_t slot_of(uint64_t handle) {
    return (uint32_t)((handle * 0x9E3779B97F4A7C15ull) >> (64 - SET_BITS));
}

/* The handle's slot, claimed if it is new; NULL when the set is full. */
static struct seen *find_or_add(uint64_t handle) {
    uint32_t i = slot_of(handle);
    for (uint32_t n = 0; n < SET_SLOTS; n++, i = (i + 1) & (SET_SLOTS - 1)) {
        struct seen *s = &seen_set[i];
        uint64_t h = __atomic_load_n(&s->handle, __ATOMIC_ACQUIRE);
        if (h == handle)
            return s;
        if (h != 0)
            continue;
        if (__atomic_load_n(&seen_count, __ATOMIC_RELAXED) >= SET_MAX)
            return NULL;
        if (__atomic_compare_exchange_n(&s->handle, &h, handle, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            __atomic_fetch_add(&seen_count, 1, __ATOMIC_RELAXED);
            return s;
        }
        if (h == handle) /* another thread claimed it for this handle */
            return s;
    }
    return NULL;
}

/* Whether this thread takes on naming s's handle on connection: true for
 * the one thread that moves `claimed` there. */
static bool claim(struct seen *s, uint32_t connection) {
    uint32_t was = __atomic_load_n(&s->claimed, __ATOMIC_RELAXED);
    return was != connection && __atomic_compare_exchange_n(&s->claimed, &was, connection, false,
                                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* The first of the driver's queries that names the handle, or NULL. */
static const char *ask(get_name_fn fns[2], uint64_t handle) {
    for (int i = 0; i < 2 && fns[i]; i++) {
        const char *name = NULL;
        if (fns[i](&name, (void *)(uintptr_t)handle) == CUDA_SUCCESS && name && name[0])
            return name;
    }
    return NULL;
}

/* The driver's name for a handle: a CUkernel by cuKernelGetName; a driver
 * launch's CUfunction by cuFuncGetName, else cuKernelGetName (a CUkernel
 * may be launched as a CUfunction); a runtime func never. */
static const char *driver_name(const struct np_launch_fn *fn) {
    if (!__atomic_load_n(&driver.resolved, __ATOMIC_ACQUIRE) || fn->kind == NP_FN_RUNTIME)
        return NULL;
    const char *name = fn->kind == NP_FN_FUNCTION ? ask(driver.func, fn->handle) : NULL;
    return name ? name : ask(driver.kernel, fn->handle);
}

/* Queues a NAMES frame of one entry; false if it could not be. */
static bool send_name(uint64_t handle, const char *name) {
    uint32_t len = (uint32_t)strnlen(name, NP_WIRE_MAX_NAME);
    uint32_t size = np_wire_name_size(len);
    struct np_frame *f = np_frame_new(NP_WIRE_NAMES, sizeof(struct np_wire_names) + size);
    if (!f)
        return false;
    struct np_wire_name *e = (struct np_wire_name *)(f->data + f->len);
    memset(e, 0, size);
    e->handle = handle;
    e->name_len = (uint16_t)len;
    memcpy(e->name, name, len);
    f->len += size;
    f->count = 1;
    return np_sink_submit(f);
}

void np_names_note(uint32_t connection, const struct np_launch_fn *fn, const char *symbol_name) {
    struct seen *s = find_or_add(fn->handle);
    if (!s || __atomic_load_n(&s->named, __ATOMIC_ACQUIRE) == connection)
        return;
    bool claimer = claim(s, connection);
    if (!claimer && __atomic_load_n(&s->claimed, __ATOMIC_RELAXED) != connection)
        return; /* the connection changed under us: the next launch names it */
    const char *name = symbol_name && symbol_name[0] ? symbol_name : driver_name(fn);
    bool queued = name && send_name(fn->handle, name);
    if (!claimer)
        return;          /* named for this launch's records; the claimer settles the slot */
    if (queued || !name) /* no name to be had: not asked again per launch */
        __atomic_store_n(&s->named, connection, __ATOMIC_RELEASE);
    else /* the queue was full: the next launch tries again */
        __atomic_compare_exchange_n(&s->claimed, &connection, 0, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
}
