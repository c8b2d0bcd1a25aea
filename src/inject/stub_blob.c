/* stub_blob.c - the stub, as the injector copies it into a target: the flat
 * binary the Makefile links from stub_entry.S + stub.c (stub.lds), embedded
 * here as np_stub_blob[] with .incbin (NP_STUB_BIN names the file; see the
 * Makefile's "injector stub" section). It is data to us, never called. */
#include "inject/target.h"

#ifndef NP_STUB_BIN
#error "NP_STUB_BIN (the path of the built stub.bin) must be defined by the Makefile"
#endif

__asm__(".section .rodata\n"
        ".globl np_stub_blob, np_stub_blob_end\n"
        ".type np_stub_blob, @object\n"
        ".balign 16\n"
        "np_stub_blob:\n"
        ".incbin \"" NP_STUB_BIN "\"\n"
        "np_stub_blob_end:\n"
        ".size np_stub_blob, np_stub_blob_end - np_stub_blob\n"
        ".previous\n");
