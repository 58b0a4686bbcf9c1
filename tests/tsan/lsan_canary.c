/* lsan_canary — leaks one block on purpose: LeakSanitizer must fail it
 * (tests/tsan/CMakeLists.txt registers it WILL_FAIL under ASan). */
#include <stdio.h>
#include <stdlib.h>

static void *volatile keep;

int main(void)
{
    keep = malloc(4096);
    keep = NULL; /* the only pointer is gone: a definite leak */
    puts("leaked 4096 bytes");
    return 0;
}
