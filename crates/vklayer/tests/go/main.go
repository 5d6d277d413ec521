// A cgo program shaped like Ollama's runner for the Vulkan layer's crash tests (tests/vulkan/crash.rs): the Go
// runtime starts first (installing its signal handlers), then C code (crates/vklayer/tests/c/vkcrash.c) does the
// Vulkan work and dies in C, as ggml-vulkan would inside the runner. Go's own crash report and exit status 2 must
// be the same with and without the layer, whose handler is installed later and chains to Go's.
// Usage: govkcrash SPIRV_FILE segv|abort|exit
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../c -Dmain=vkcrash_main
#cgo LDFLAGS: -lvulkan
#include "vkcrash.c"
static int run(char *spirv, char *mode) {
    char *argv[] = {"govkcrash", spirv, mode, 0};
    return vkcrash_main(3, argv);
}
*/
import "C"

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: govkcrash SPIRV_FILE MODE")
		os.Exit(2)
	}
	fmt.Println("govkcrash: Go runtime up, calling into C")
	rc := C.run(C.CString(os.Args[1]), C.CString(os.Args[2]))
	fmt.Println("govkcrash: C returned", rc)
}
