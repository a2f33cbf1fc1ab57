package cpu

// Options configures [NewWithOptions].
type Options struct {
	// ISA forces a code path: "avx512", "avx2" or "generic". Empty picks
	// the best one the CPU supports.
	ISA string
	// Threads is the number of threads that run an op, the caller
	// included; 0 means one per online CPU.
	Threads int
}
