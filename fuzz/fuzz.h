/* fuzz.h - what every harness of fuzz/ shares: a scratch file or directory
 * that the input is written into, for the readers that take a path.
 *
 * Each harness is a libFuzzer target (LLVMFuzzerTestOneInput) built by
 * `make fuzz` with ASan+UBSan (fuzz/fuzz.mk). A harness fails the run by
 * crashing (a sanitizer report) or by abort() when a documented contract
 * breaks: an error return without a message, a count that does not add up. */
#ifndef NP_FUZZ_H
#define NP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A directory of this process's own under /tmp (made once, kept), and a
 * path in it: NAME, rewritten with data[0..size). Aborts on I/O errors,
 * which are the harness's, not the code's under test. */
const char *fuzz_dir(void);
const char *fuzz_file(const char *name, const void *data, size_t size);
/* Removes every file of fuzz_dir() (between inputs that write several). */
void fuzz_clear_dir(void);

/* A CPython 3.12-shaped code-object layout, the offsets of the images the
 * harnesses build (pycode_fuzz, ingest_fuzz). */
struct np_python_layout;
void fuzz_python_layout(struct np_python_layout *out);

/* Aborts with a message when cond is false: a contract the code under test
 * documents did not hold. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fuzz_fail(__FILE__, __LINE__, #cond);                                                  \
    } while (0)
_Noreturn void fuzz_fail(const char *file, int line, const char *what);

#endif
