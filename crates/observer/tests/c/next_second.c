/* RTLD_NEXT probe, second half: the definition that comes after next_first.c's in the lookup order. */
int next_probe(void) { return 2; }
