// spin.cu: lb_spin, for tests: it releases the kernel launched after it
// (programmatic dependent launch), then holds the stream for ns
// nanoseconds, so that the next kernel's work before its wait (the bulk
// GEMVs' early weight copies, their first span taken into registers, the
// residual's old values) is done before its release, as a decode step's o
// projection finds it behind the attention. One warp; no memory touched.
extern "C" __global__ void lb_spin(long long ns) {
	lb_pdl_wait();
	u64 t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < (u64)ns);
}
