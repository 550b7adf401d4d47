/* pdl.cuh - programmatic dependent launch (PDL) for the fast path's decode chain.
 *
 * A kernel launched with programmatic stream serialization may start while the previous kernel
 * in the stream is still finishing; griddepcontrol.wait then blocks until that kernel has
 * completed and its memory is visible. So every kernel that can be launched this way calls
 * ds_grid_dep_wait() before it touches any memory another kernel writes or reads (in practice:
 * first thing, in every block); the wait also lets the next PDL kernel launch. Without the
 * launch attribute (for this kernel or the next) both are no-ops, so the same kernels serve
 * launches with and without PDL, and the arithmetic never changes.
 *
 * Also here: the L2 prefetch that the latency-bound kernels of the decode chain issue for the
 * next GEMM's weights (struct ds_k_l2pf), before or after that wait. */
#ifndef DS_PDL_CUH
#define DS_PDL_CUH

#include <stdint.h>

#include <utility>

#include <cuda_runtime.h>

#include "kernels.h" /* struct ds_k_l2pf */

__device__ __forceinline__ void ds_grid_dep_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;\n" ::: "memory");
	/* The next kernel (if launched with PDL) may now be scheduled: its blocks start, issue what
	 * needs no earlier result (the skinny GEMM's weight loads) and then wait for this grid to
	 * complete. Triggering only after our own wait keeps at most two grids in flight. */
	asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem, st>>>(args...), with the PDL attribute when pdl != 0 and in
 * thread-block clusters of cluster_x blocks along x when cluster_x > 1 (grid.x a multiple). */
template <typename... KArgs, typename... Args>
static inline cudaError_t ds_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                            size_t smem, cudaStream_t st, int pdl, int cluster_x,
                                            Args &&...args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[2];
	unsigned n = 0;
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	if (pdl) {
		at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[n].val.programmaticStreamSerializationAllowed = 1;
		n++;
	}
	if (cluster_x > 1) {
		at[n].id = cudaLaunchAttributeClusterDimension;
		at[n].val.clusterDim.x = (unsigned)cluster_x;
		at[n].val.clusterDim.y = 1;
		at[n].val.clusterDim.z = 1;
		n++;
	}
	cfg.attrs = at;
	cfg.numAttrs = n;
	cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
	if (e != cudaSuccess)
		return e;
	return cudaGetLastError();
}

/* kernel<<<grid, block, smem, st>>>(args...), with the PDL attribute when pdl != 0. */
template <typename... KArgs, typename... Args>
static inline cudaError_t ds_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                    cudaStream_t st, int pdl, Args &&...args)
{
	return ds_launch_cluster(kernel, grid, block, smem, st, pdl, 1,
	                         std::forward<Args>(args)...);
}

/* ---- L2 prefetch of a read-only range (struct ds_k_l2pf, kernels.h) ---- */

#define DS_L2PF_PIECE 32768u /* bytes per cp.async.bulk.prefetch instruction */

/* Issues this block's share of the range pf (already trimmed by ds_l2pf_trim) to L2; blk and
 * nblk: the block's linear index and the grid's block count. The threads of the block take
 * turns by piece (bulk) or by 128-byte line. Touches no memory: results cannot change. */
__device__ __forceinline__ void ds_l2_prefetch(const struct ds_k_l2pf &pf, unsigned blk,
                                               unsigned nblk)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	size_t n16 = pf.bytes >> 4, per = (n16 + nblk - 1) / nblk;
	size_t lo = (size_t)blk * per, hi = lo + per < n16 ? lo + per : n16;
	if (lo >= hi)
		return;
	size_t base = __cvta_generic_to_global(pf.ptr) + lo * 16, end = base + (hi - lo) * 16;
	uint64_t pol = 0;
	bool last = (pf.flags & DS_K_L2PF_EVICT_LAST) != 0;
	if (last)
		asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pol));
	if (pf.flags & DS_K_L2PF_LINES) {
		/* every line that holds a byte of [base, end), addressed inside the range */
		size_t first = base & ~(size_t)127;
		for (size_t ln = first + (size_t)threadIdx.x * 128; ln < end;
		     ln += (size_t)blockDim.x * 128) {
			size_t a = ln < base ? base : ln;
			if (last)
				asm volatile("prefetch.global.L2::evict_last [%0];\n" ::"l"(a));
			else
				asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a));
		}
		return;
	}
	for (size_t a = base + (size_t)threadIdx.x * DS_L2PF_PIECE; a < end;
	     a += (size_t)blockDim.x * DS_L2PF_PIECE) {
		unsigned sz = end - a < DS_L2PF_PIECE ? (unsigned)(end - a) : DS_L2PF_PIECE;
		if (last)
			asm volatile(
			    "cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;\n" ::"l"(a),
			    "r"(sz), "l"(pol)
			    : "memory");
		else
			asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a), "r"(sz)
			             : "memory");
	}
#else
	(void)pf;
	(void)blk;
	(void)nblk;
#endif
}

/* ds_grid_dep_wait() with the prefetch issued before it (DS_K_L2PF_BEFORE_WAIT: the previous
 * kernel may still be streaming) or right after it (DS_K_L2PF_AFTER_WAIT). */
__device__ __forceinline__ void ds_grid_dep_wait_pf(const struct ds_k_l2pf &pf, unsigned blk,
                                                    unsigned nblk)
{
	if (pf.mode == DS_K_L2PF_BEFORE_WAIT)
		ds_l2_prefetch(pf, blk, nblk);
	ds_grid_dep_wait();
	if (pf.mode == DS_K_L2PF_AFTER_WAIT)
		ds_l2_prefetch(pf, blk, nblk);
}

/* The launch's copy of *pf: the range trimmed inward to 16-byte boundaries; all zero (no
 * prefetch) for NULL, mode OFF, no pointer or nothing left. *ok = false for a mode out of
 * range (the launcher returns cudaErrorInvalidValue). */
static inline struct ds_k_l2pf ds_l2pf_trim(const struct ds_k_l2pf *pf, bool *ok)
{
	struct ds_k_l2pf r = {};
	*ok = !pf || (pf->mode >= DS_K_L2PF_OFF && pf->mode <= DS_K_L2PF_BEFORE_WAIT);
	if (!*ok || !pf || pf->mode == DS_K_L2PF_OFF || !pf->ptr)
		return r;
	uintptr_t a = ((uintptr_t)pf->ptr + 15) & ~(uintptr_t)15;
	uintptr_t e = ((uintptr_t)pf->ptr + pf->bytes) & ~(uintptr_t)15;
	if (e <= a)
		return r;
	r = *pf;
	r.ptr = (const void *)a;
	r.bytes = (size_t)(e - a);
	return r;
}

/* Prefetch-only rows of per_row blocks to add to a grid of `blocks` so that it has at least
 * pf.min_blocks blocks (0 when pf prefetches nothing). */
static inline int ds_l2pf_extra_rows(const struct ds_k_l2pf &pf, long blocks, int per_row)
{
	if (pf.bytes == 0 || pf.min_blocks <= blocks)
		return 0;
	return (int)((pf.min_blocks - blocks + per_row - 1) / per_row);
}

#endif
