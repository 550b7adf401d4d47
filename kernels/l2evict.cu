/* l2evict.cu - evicts L2 by reading a scratch buffer, for the autotuners' timed runs.
 *
 * A timed GEMM candidate must stream its weights from HBM as it does in a decode step, so L2 is
 * cleared before each run. Clearing it with a memset leaves the cache full of dirty lines that
 * the timed kernel's own reads then write back to HBM: tens of MB of write traffic inside the
 * timing, which the real step never has. Reading the buffer instead leaves clean lines. */
#include "kernels.h"

__global__ void l2_evict_kernel(uint4 *buf, size_t n16)
{
	unsigned acc = 0;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = __ldcg(buf + i);
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	/* keeps the loads; almost never true, and the buffer is scratch */
	if (acc == 0x9e3779b9u && threadIdx.x == 0 && blockIdx.x == 0)
		buf[0].x = acc;
}

extern "C" cudaError_t ds_k_l2_evict(void *buf, size_t bytes, cudaStream_t st)
{
	size_t n16 = bytes / 16;
	if (n16 == 0)
		return cudaSuccess;
	if ((uintptr_t)buf % 16 != 0)
		return cudaErrorInvalidValue;
	l2_evict_kernel<<<1024, 256, 0, st>>>((uint4 *)buf, n16);
	return cudaGetLastError();
}
