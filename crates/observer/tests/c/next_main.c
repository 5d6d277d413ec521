/* RTLD_NEXT probe program: linked with libnext_first.so before libnext_second.so; prints what next_probe
 * returns (12 when RTLD_NEXT is resolved from its caller, as glibc specifies). */
#include <stdio.h>

int next_probe(void);

int main(void) {
    printf("next_probe=%d\n", next_probe());
    return 0;
}
