/* pyline_check.c - oracle check of the CPython line-table decoders
 * (np_py_line_310, np_py_line_311 in src/symbolize/pycode.c) against what
 * the real interpreters report. tests/test_pylines.py has each interpreter
 * walk its code objects and feeds the answers here, one per line:
 *
 *     FORMAT FIRSTLINENO HEXTABLE ADDR EXPECTED
 *
 * FORMAT is 310 (PEP 626 table) or 311 (3.11+ location table), HEXTABLE the
 * line table in hex ("-" when empty, "=" for the previous line's table, which
 * keeps the input small for the many offsets of one code object), EXPECTED the
 * line CPython gives for the instruction at byte offset ADDR (-1 for None).
 * Prints the mismatches (the first MAX_SHOWN) and "checked N mismatches M";
 * exits 1 on any mismatch, 2 on bad input. */
#define _GNU_SOURCE /* getline, strdup */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize/pycode.h"

#define MAX_SHOWN 50 /* mismatches printed in full; the rest only counted */

static int hexval(int c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes hex into buf (grown as needed): the byte count, or -1. */
static long unhex(const char *hex, uint8_t **buf, size_t *cap) {
    if (strcmp(hex, "-") == 0)
        return 0;
    size_t n = strlen(hex);
    if (n % 2)
        return -1;
    if (n / 2 > *cap) {
        uint8_t *grown = realloc(*buf, n / 2);
        if (!grown)
            return -1;
        *buf = grown;
        *cap = n / 2;
    }
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        (*buf)[i] = (uint8_t)(hi << 4 | lo);
    }
    return (long)(n / 2);
}

int main(void) {
    char *line = NULL, *hex = NULL, *table_hex = NULL; /* the table as given, for reports */
    size_t line_cap = 0, table_cap = 0;
    uint8_t *table = NULL;
    long checked = 0, mismatches = 0, lineno = 0, len = -1; /* no table yet */
    int status = 0;

    while (getline(&line, &line_cap, stdin) > 0) {
        lineno++;
        int format, firstlineno, addr, expected;
        if (line[0] == '\n' || line[0] == '#')
            continue;
        free(hex);
        hex = malloc(strlen(line) + 1);
        if (!hex ||
            sscanf(line, "%d %d %s %d %d", &format, &firstlineno, hex, &addr, &expected) != 5 ||
            (format != 310 && format != 311)) {
            fprintf(stderr, "line %ld: bad input: %s", lineno, line);
            status = 2;
            break;
        }
        if (strcmp(hex, "=") != 0) {
            len = unhex(hex, &table, &table_cap);
            free(table_hex);
            table_hex = strdup(hex);
        }
        if (len < 0 || !table_hex) {
            fprintf(stderr, "line %ld: bad hex table\n", lineno);
            status = 2;
            break;
        }
        int got = format == 310 ? np_py_line_310(table, (size_t)len, firstlineno, addr)
                                : np_py_line_311(table, (size_t)len, firstlineno, addr);
        checked++;
        if (got != expected) {
            if (++mismatches <= MAX_SHOWN)
                printf("MISMATCH format=%d firstlineno=%d table=%s addr=%d expected=%d got=%d\n",
                       format, firstlineno, table_hex, addr, expected, got);
        }
    }
    free(line);
    free(hex);
    free(table_hex);
    free(table);
    printf("checked %ld mismatches %ld\n", checked, mismatches);
    if (status)
        return status;
    return mismatches ? 1 : 0;
}
