/*
 * RTLD_NEXT probe, first half: an interposer-style wrapper that finds "the next" next_probe with
 * dlsym(RTLD_NEXT, ...). glibc resolves RTLD_NEXT from the address that called dlsym, so an interposed dlsym
 * that called glibc's itself would look "after the observer" and find this very function again.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int next_probe(void) {
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "next_probe");
    if (!next) {
        fprintf(stderr, "next_first: no next next_probe: %s\n", dlerror());
        return -1;
    }
    if (next == next_probe) return -2; /* found itself: RTLD_NEXT was resolved from the wrong object */
    return 10 + next();
}
