/* pycode_fuzz.c - CPython code objects, strings, bytes and line tables read
 * from hostile memory (src/symbolize/pycode.c).
 *
 * The memory is this process's own: the input, from data[5] on, is copied to
 * a fixed address (IMAGE_BASE, above the sanitizers' shadow memory), and the code object is read
 * there through the same process_vm_readv path that reads a target. Pointers inside the image may
 * point into it (IMAGE_BASE + offset), anywhere else (EFAULT), or at other objects of the image;
 * lengths and string kinds are the input's. data[0] bit 0 picks the 3.10 line table format,
 * data[1..4] the instruction offset looked up. The layout is a fixed 3.12-shaped one: the offsets
 * are ncclprobe's own (read from the target's DWARF or _Py_DebugOffsets in real use), not what is
 * under test. Contract: a name, file and line, or an error; strings are valid NUL-terminated UTF-8.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attach/python.h"
#include "fuzz.h"
#include "symbolize/pycode.h"

#define IMAGE_BASE 0x5a0000000000ull
#define IMAGE_SIZE (1u << 20)

static struct np_python_layout layout;

static uint8_t *image(void) {
    static uint8_t *base;
    if (!base) {
        void *p = mmap((void *)IMAGE_BASE, IMAGE_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        FUZZ_CHECK(p == (void *)IMAGE_BASE);
        base = p;
    }
    return base;
}

static void check_utf8(const char *s) {
    if (!s)
        return;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : 3;
        FUZZ_CHECK(*p < 0x80 || (*p >= 0xc2 && *p <= 0xf4));
        p++;
        for (int i = 0; i < n; i++, p++)
            FUZZ_CHECK((*p & 0xc0) == 0x80);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static size_t last;
    if (size < 5 || size - 5 > IMAGE_SIZE)
        return 0;
    uint8_t *img = image();
    size_t n = size - 5;
    memcpy(img, data + 5, n);
    if (last > n)
        memset(img + n, 0, last - n);
    last = n;
    fuzz_python_layout(&layout);
    layout.linetable_310 = data[0] & 1;
    layout.co_qualname = (data[0] & 2) ? NP_PY_NO_FIELD : 0x80;
    int32_t instr;
    memcpy(&instr, data + 1, sizeof(instr));

    struct np_pycode *c = np_pycode_new(getpid(), &layout);
    FUZZ_CHECK(c);
    struct np_py_location loc;
    if (np_pycode_locate(c, IMAGE_BASE, instr, &loc) == 0) {
        check_utf8(loc.name);
        check_utf8(loc.filename);
        if (loc.filename)
            check_utf8(np_py_short_filename(loc.filename));
    }
    np_pycode_free(c);

    /* The line-table decoders on the raw input as well. */
    (void)np_py_line_310(data + 5, n, (int32_t)instr >> 8, instr);
    (void)np_py_line_311(data + 5, n, (int32_t)instr >> 8, instr);
    return 0;
}
