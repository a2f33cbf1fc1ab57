//go:build cgo

package kernels

// #include <unistd.h>
// static long online_cpus(void) { return sysconf(_SC_NPROCESSORS_ONLN); }
import "C"

// Available reports whether this binary can run kernels: nil when it was built
// with cgo.
func Available() error { return nil }

// OnlineCPUs returns the number of CPUs online, as the C library sees them;
// the CPU kernels size their thread pool from it.
func OnlineCPUs() int { return int(C.online_cpus()) }
