// Crash test program shaped like Ollama's runner: a Go program whose GPU work runs in C through cgo
// (libgokernel.so, built from kernel.hip). It launches a HIP kernel 4 times, then, by its argument:
//   c-segv      writes through a null pointer in C (Go reports "[signal SIGSEGV: segmentation
//               violation ...]" with its goroutine dump and exits with status 2)
//   c-abort     calls abort() in C (Go reports "SIGABRT: abort" and exits with status 2)
//   go-recover  dereferences a nil pointer in Go code, recovers from the panic, goes on for 3 s and
//               exits normally
package main

/*
int launch_add_one(int times);
void crash_null_write(void);
void crash_abort(void);
*/
import "C"

import (
	"fmt"
	"os"
	"time"
)

func main() {
	failed := C.launch_add_one(4)
	fmt.Printf("launched add_one 4 times, %d failed\n", int(failed))
	switch os.Args[1] {
	case "c-segv":
		C.crash_null_write()
	case "c-abort":
		C.crash_abort()
	case "go-recover":
		func() {
			defer func() { fmt.Printf("recovered: %v\n", recover() != nil) }()
			var p *int
			*p = 1
		}()
		time.Sleep(3 * time.Second)
	}
	fmt.Println("exiting normally")
}
