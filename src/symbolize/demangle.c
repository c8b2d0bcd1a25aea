/* demangle.c - C++ demangling and the short frame form (see symbolize.h).
 * The short form drops the parameter list and the return type, which is
 * what debuggers print in a backtrace and what aggregates well. */
#include <stdlib.h>
#include <string.h>

#include "symbolize/symbolize.h"

char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* Index of the '(' that opens the final parameter list, or -1. Trailing
 * qualifiers (" const", " &", " noexcept") after it are allowed. */
static long params_start(const char *s, size_t len) {
    long depth = 0;
    long end = (long)len - 1;

    while (end >= 0 && s[end] != ')')
        end--;
    if (end < 0)
        return -1;
    for (long i = end; i >= 0; i--) {
        if (s[i] == ')')
            depth++;
        else if (s[i] == '(' && --depth == 0)
            return i;
    }
    return -1;
}

/* Start of the name after a leading return type ("void ns::f<int>"): the
 * last space outside <> and (), unless it belongs to "operator new" etc. */
static size_t name_start(const char *s, size_t len) {
    long angle = 0, paren = 0;
    size_t start = 0;

    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '<')
            angle++;
        else if (c == '>' && angle > 0)
            angle--;
        else if (c == '(')
            paren++;
        else if (c == ')' && paren > 0)
            paren--;
        else if (c == ' ' && angle == 0 && paren == 0) {
            if (i >= 8 && strncmp(s + i - 8, "operator", 8) == 0)
                continue;
            start = i + 1;
        }
    }
    return start;
}

char *np_demangle_short(const char *symbol) {
    int status = -1;
    char *full = NULL;

    if (symbol[0] == '_' && symbol[1] == 'Z')
        full = __cxa_demangle(symbol, NULL, NULL, &status);
    if (!full || status != 0) {
        free(full);
        return strdup(symbol);
    }
    size_t len = strlen(full);
    long open = params_start(full, len);
    if (open > 0)
        len = (size_t)open;
    size_t start = name_start(full, len);
    char *out = strndup(full + start, len - start);
    free(full);
    return out;
}
