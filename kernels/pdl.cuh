/* pdl.cuh - programmatic dependent launch (PDL) for the fast path's decode chain.
 *
 * A kernel launched with programmatic stream serialization may start while the previous kernel
 * in the stream is still finishing; griddepcontrol.wait then blocks until that kernel has
 * completed and its memory is visible. So every kernel that can be launched this way calls
 * ds_grid_dep_wait() before it touches any memory another kernel writes or reads (in practice:
 * first thing, in every block); the wait also lets the next PDL kernel launch. Without the
 * launch attribute (for this kernel or the next) both are no-ops, so the same kernels serve
 * launches with and without PDL, and the arithmetic never changes. */
#ifndef DS_PDL_CUH
#define DS_PDL_CUH

#include <utility>

#include <cuda_runtime.h>

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

/* kernel<<<grid, block, smem, st>>>(args...), with the PDL attribute when pdl != 0. */
template <typename... KArgs, typename... Args>
static inline cudaError_t ds_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                    cudaStream_t st, int pdl, Args &&...args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1];
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at;
	cfg.numAttrs = pdl ? 1 : 0;
	cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
	if (e != cudaSuccess)
		return e;
	return cudaGetLastError();
}

#endif
