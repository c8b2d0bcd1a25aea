/* cupti_layout_policy.c - which record layouts libncclprobe_cupti.so reads for a CUPTI API
 * version (np_cupti_layouts_pick in src/cupti/layouts.c, compiled in), for versions the table
 * knows and versions it does not. Compiled and run by tests/test_runtimes_cupti.py (not by the
 * progs Makefile).
 *
 *   cupti_layout_policy known
 *       the table: "known API KERNEL MEMCPY MEMSET API" (record sizes), oldest first
 *   cupti_layout_policy VERSION [KERNEL MEMCPY MEMSET API]
 *       the pick for a CUPTI of that version that states these record sizes
 *       (cuptiActivityGetStructSize; none given: it cannot say):
 *       "support S from API sizes K M S A confirmed BITS" and the note on stderr */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti/layouts.h"

static uint32_t stated[NP_CUPTI_RECORDS];

/* The CUPTI's answer for activity kind `kind`, by the record it is read as. */
static uint32_t size_of(void *ctx, uint32_t kind) {
    bool runtime;
    (void)ctx;
    enum np_cupti_record r = np_cupti_record_of(np_cupti_known(0), kind, &runtime);
    return r < NP_CUPTI_RECORDS ? stated[r] : 0;
}

static void known(void) {
    for (size_t i = 0; i < np_cupti_known_count(); i++) {
        const struct np_cupti_version_layouts *v = np_cupti_known(i);
        printf("known %u", v->api_version);
        for (int r = 0; r < NP_CUPTI_RECORDS; r++)
            printf(" %u", v->record[r].size);
        printf("\n");
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "known") == 0) {
        known();
        return 0;
    }
    if (argc != 2 && argc != 2 + NP_CUPTI_RECORDS) {
        fprintf(stderr, "usage: cupti_layout_policy known | VERSION [KERNEL MEMCPY MEMSET API]\n");
        return 2;
    }
    for (int r = 0; argc > 2 && r < NP_CUPTI_RECORDS; r++)
        stated[r] = (uint32_t)strtoul(argv[2 + r], NULL, 10);
    struct np_cupti_layouts l;
    np_cupti_layouts_pick((uint32_t)strtoul(argv[1], NULL, 10), argc > 2 ? size_of : NULL, NULL,
                          &l);
    printf("support %u from %u sizes", l.support, l.v ? l.v->api_version : 0);
    for (int r = 0; r < NP_CUPTI_RECORDS; r++)
        printf(" %u", l.record_size[r]);
    printf(" confirmed %u\n", l.size_confirmed);
    fprintf(stderr, "%s\n", l.note);
    return 0;
}
