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

/* Allows kernel fn dynamic shared memory of smem bytes (over 48 KB needs an opt-in). Not a stream
 * operation: relaxed capture mode keeps the call legal while a stream is being captured. */
template <typename... KArgs>
static inline cudaError_t ds_allow_smem(void (*fn)(KArgs...), size_t smem)
{
	enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
	cudaError_t e = cudaThreadExchangeStreamCaptureMode(&mode);
	if (e != cudaSuccess)
		return e;
	e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	cudaError_t e2 = cudaThreadExchangeStreamCaptureMode(&mode);
	return e != cudaSuccess ? e : e2;
}

/* kernel<<<grid, block, smem, st>>>(args...), with the PDL attribute when pdl != 0, in
 * thread-block clusters of cluster_x blocks along x when cluster_x > 1 (grid.x a multiple), and
 * as a cooperative launch (every block resident at once, or an error) when coop != 0. */
template <typename... KArgs, typename... Args>
static inline cudaError_t ds_launch_attrs(void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                          size_t smem, cudaStream_t st, int pdl, int cluster_x,
                                          int coop, Args &&...args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[3];
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
	if (coop) {
		at[n].id = cudaLaunchAttributeCooperative;
		at[n].val.cooperative = 1;
		n++;
	}
	cfg.attrs = at;
	cfg.numAttrs = n;
	cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
	if (e != cudaSuccess)
		return e;
	return cudaGetLastError();
}

template <typename... KArgs, typename... Args>
static inline cudaError_t ds_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                            size_t smem, cudaStream_t st, int pdl, int cluster_x,
                                            Args &&...args)
{
	return ds_launch_attrs(kernel, grid, block, smem, st, pdl, cluster_x, 0,
	                       std::forward<Args>(args)...);
}

/* kernel<<<grid, block, smem, st>>>(args...), with the PDL attribute when pdl != 0. */
template <typename... KArgs, typename... Args>
static inline cudaError_t ds_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                    cudaStream_t st, int pdl, Args &&...args)
{
	return ds_launch_attrs(kernel, grid, block, smem, st, pdl, 1, 0, std::forward<Args>(args)...);
}

#endif
