/* mbar.cuh - shared-memory mbarriers (sm_90): init, arrive, expect-tx, and a parity wait with a
 * watchdog. Used by the reference GEMM's TMA pipelines (gemm_ref_common.cuh) and the fused decode
 * kernel's weight ring (mega.cu). Addresses are shared-state-space (cvta) addresses. */
#ifndef DS_MBAR_CUH
#define DS_MBAR_CUH

#include <stdint.h>

/* A spin loop's watchdog, called every so many polls: traps once ~4 s have passed since its
 * first call (t0 starts at 0; a legitimate wait lasts microseconds), so a synchronization bug
 * fails the launch with an error instead of hanging a test or benchmark run. */
__device__ __forceinline__ void ds_spin_watchdog(uint64_t &t0)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	if (t0 == 0)
		t0 = t;
	else if (t - t0 > 4000000000ull)
		__trap();
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* Waits for the phase of parity `parity` of bar (with the watchdog). */
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
	unsigned ok;
	uint64_t t0 = 0;
	for (unsigned n = 1;; n++) {
		asm volatile("{\n"
		             ".reg .pred p;\n"
		             "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
		             "selp.u32 %0, 1, 0, p;\n"
		             "}\n"
		             : "=r"(ok)
		             : "r"(bar), "r"(parity)
		             : "memory");
		if (ok)
			return;
		if ((n & 4095u) == 0)
			ds_spin_watchdog(t0);
	}
}

__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
	             "r"(bytes)
	             : "memory");
}

#endif
