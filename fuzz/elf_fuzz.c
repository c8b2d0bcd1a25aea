/* elf_fuzz.c - crafted ELF files as attach reads libraries: the probe-point
 * scan (src/attach/elfscan.c: symbol tables, thunks, build id, segments), the
 * DWARF struct layouts (src/attach/dwarf_layout.c) and NCCL's layout loader
 * on top of them (src/attach/nccl_layout.c). Contract: an error for what is
 * not a readable x86-64 ELF, matches inside the file, never a crash. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "attach/dwarf_layout.h"
#include "attach/elfscan.h"
#include "attach/nccl_layout.h"
#include "fuzz.h"

static void on_enumerator(void *ctx, size_t enum_index, const char *name, int64_t value) {
    (void)ctx, (void)enum_index, (void)value;
    FUZZ_CHECK(name != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("lib.so", data, size);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    FUZZ_CHECK(fd >= 0);

    struct np_elf_scan scan = {0};
    if (np_elf_scan_fd(fd, &scan) == 0) {
        FUZZ_CHECK(strlen(scan.build_id) <= 40);
        for (size_t i = 0; i < scan.count; i++)
            FUZZ_CHECK(scan.matches[i].thunk_target < (int)scan.count);
        np_elf_scan_free(&scan);
    }
    char buf[16];
    struct np_elf_symbol_query q[] = {{.name = "ncclLaunchKernel", .buf = buf, .len = sizeof(buf)},
                                      {.name = "_PyRuntime", .buf = buf, .len = 8}};
    (void)np_elf_read_symbols(fd, q, 2);
    (void)np_elf_read_dynsyms(fd, q, 2);
    struct np_elf_segment seg;
    (void)np_elf_exec_segment(fd, &seg);
    bool has_symtab;
    char text[256];
    if (np_elf_describe(fd, "lib", &has_symtab, text, sizeof(text)) == 0)
        FUZZ_CHECK(memchr(text, 0, sizeof(text)) != NULL);
    uint64_t bias, vaddr;
    (void)np_elf_load_bias(fd, 0x7f0000000000ull, 0, &bias);
    static const uint8_t pattern[] = {0xf3, 0x0f, 0x1e, 0xfa};
    (void)np_elf_find_code(fd, pattern, sizeof(pattern), &vaddr);
    (void)np_decode_thunk(data, size, 0x1000, &vaddr);
    close(fd);

    static const struct np_field_query fields[] = {
        {"ncclComm", "rank"}, {"ncclComm", "planner.streams"}, {"ncclProxyOp", "nsteps"}};
    struct np_field out[3];
    static const char *const enums[] = {"ncclPattern_t", "ncclFunc_t"};
    struct np_dwarf_request req = {.fields = fields,
                                   .nfields = 3,
                                   .out = out,
                                   .enums = enums,
                                   .nenums = 2,
                                   .on_enumerator = on_enumerator};
    if (np_dwarf_read(path, &req) == 0)
        for (int i = 0; i < 3; i++)
            FUZZ_CHECK(out[i].offset >= -1);
    struct np_nccl_layout layout;
    np_nccl_layout_load(path, &layout);
    return 0;
}
