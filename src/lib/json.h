/* json.h - JSON text that stays valid whatever bytes a target's names
 * contain: string literals with control characters escaped and invalid
 * UTF-8 replaced by U+FFFD; and the few cJSON helpers everything that
 * writes JSON shares (text members made valid UTF-8, exact 64-bit numbers,
 * a file written atomically). */
#ifndef NP_JSON_H
#define NP_JSON_H

#include <stdint.h>
#include <stdio.h>

#include "lib/util.h"

void np_json_string(struct np_str *out, const char *s);
/* Returns a malloc'd copy of s with invalid UTF-8 replaced by U+FFFD (for
 * cJSON, which copies bytes as they are). */
char *np_utf8_clean(const char *s);

/* Prints root (indented) to path, atomically, and deletes root; 0 or -errno. */
struct cJSON;
int np_json_write_file(const char *path, struct cJSON *root);
/* Adds key: text, any bytes of text made valid UTF-8 (a target's names). */
void np_json_add_text(struct cJSON *o, const char *key, const char *text);
/* Adds key: value as written (not through a double: nanosecond times need 64 bits). */
void np_json_add_u64(struct cJSON *o, const char *key, uint64_t value);

#endif
