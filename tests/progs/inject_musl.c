/* inject_musl.c - for tests/test_inject.py: a dynamically linked musl
 * program (built with musl-gcc when it is installed) resting in
 * read(stdin): the injector must refuse it, untouched. Prints "READY pid", exits 0 at EOF. */
#include <stdio.h>
#include <unistd.h>

int main(void) {
    char buf[64];

    printf("READY %d\n", (int)getpid());
    fflush(stdout);
    while (read(0, buf, sizeof(buf)) > 0)
        ;
    printf("RESULT OK\n");
    return 0;
}
