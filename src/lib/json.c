/* json.c - JSON string escaping, UTF-8 cleaning and the cJSON helpers
 * (see json.h). */
#include "lib/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s, 0 if it is not valid. */
static size_t utf8_seq_len(const unsigned char *s) {
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

void np_json_string(struct np_str *out, const char *s) {
    const unsigned char *p = (const unsigned char *)s;

    np_str_append(out, "\"");
    while (*p) {
        const unsigned char *run = p; /* printable ASCII, copied as one piece */
        while (*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\')
            p++;
        if (p > run)
            np_str_append_n(out, (const char *)run, (size_t)(p - run));
        if (!*p)
            break;
        size_t n = utf8_seq_len(p);
        if (n == 0) {
            np_str_append(out, "\\ufffd");
            p++;
            continue;
        }
        if (n > 1) {
            np_str_append_n(out, (const char *)p, n);
            p += n;
            continue;
        }
        unsigned char c = *p++;
        if (c == '"')
            np_str_append(out, "\\\"");
        else if (c == '\\')
            np_str_append(out, "\\\\");
        else if (c == '\n')
            np_str_append(out, "\\n");
        else if (c == '\t')
            np_str_append(out, "\\t");
        else if (c < 0x20 || c == 0x7f)
            np_str_appendf(out, "\\u%04x", c);
        else
            np_str_append_n(out, (const char *)&c, 1);
    }
    np_str_append(out, "\"");
}

char *np_utf8_clean(const char *s) {
    struct np_str out;
    np_str_init(&out);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_seq_len(p);
        if (n == 0) {
            np_str_append(&out, "\xef\xbf\xbd");
            p++;
        } else {
            np_str_append_n(&out, (const char *)p, n);
            p += n;
        }
    }
    if (out.failed) {
        np_str_free(&out);
        return NULL;
    }
    if (!out.buf)
        return strdup("");
    return out.buf;
}

static int fill_text_line(FILE *f, void *ctx) {
    return fputs(ctx, f) < 0 || fputc('\n', f) < 0 ? -EIO : 0;
}

int np_json_write_file(const char *path, struct cJSON *root) {
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return -ENOMEM;
    int err = np_write_atomic(path, fill_text_line, text);
    free(text);
    return err;
}

void np_json_add_text(struct cJSON *o, const char *key, const char *text) {
    char *clean = np_utf8_clean(text ? text : "");
    cJSON_AddStringToObject(o, key, clean ? clean : "");
    free(clean);
}

void np_json_add_u64(struct cJSON *o, const char *key, uint64_t value) {
    char text[32];
    snprintf(text, sizeof(text), "%" PRIu64, value);
    cJSON_AddRawToObject(o, key, text);
}
