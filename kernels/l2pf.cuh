/* l2pf.cuh - the device side of struct ds_k_l2pf: a kernel's blocks ask L2 to fetch part of the
 * next kernel's weights.
 *
 * Key decision: the requests are bulk prefetches (cp.async.bulk.prefetch.L2, sm_90), one per
 * chunk, so a few threads keep DRAM busy without holding registers or waiting: the issuing
 * block finishes at once and never delays the kernel that depends on it. Before sm_90 each
 * thread prefetches 128-byte lines instead. Part p of np issues chunks p, p + np, ... so every
 * block's requests are spread over the whole range. Nothing is read into registers: results
 * never change. */
#ifndef DS_L2PF_CUH
#define DS_L2PF_CUH

#include "kernels.h"

__device__ __forceinline__ void ds_l2pf_issue(const struct ds_k_l2pf &pf, unsigned part,
                                              unsigned n_parts)
{
#if defined(__CUDA_ARCH__)
	unsigned step = n_parts * blockDim.x;
	for (unsigned i = part + n_parts * threadIdx.x; i < pf.n; i += step) {
		const char *a = (const char *)pf.base + (size_t)i * pf.stride;
#if __CUDA_ARCH__ >= 900
		asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a), "r"(pf.chunk)
		             : "memory");
#else
		for (unsigned o = 0; o < pf.chunk; o += 128)
			asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a + o));
#endif
	}
#else
	(void)pf;
	(void)part;
	(void)n_parts;
#endif
}

#endif
