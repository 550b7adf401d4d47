/* synth.cu - generates synthetic weights on the device (model/synth.h's formula).
 *
 * The generator is counter-based, so each thread computes its element from (seed, key, index)
 * alone. The arithmetic is written with explicit round-to-nearest intrinsics so the compiler
 * cannot contract it into an FMA: the host computes offset + scale * u as two roundings, and
 * the device must produce the same bits. */
#include "kernels.h"
#include "cu_common.cuh"

__global__ void synth_fill_kernel(uint16_t *dst, size_t n, uint64_t first, uint64_t seed,
                                  uint64_t key, float scale, float offset)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		float u = ds_hash_unit_pm1(ds_hash3(seed, key, first + i));
		dst[i] = ds_f32_to_bf16(__fadd_rn(offset, __fmul_rn(scale, u)));
	}
}

extern "C" cudaError_t ds_k_synth_fill(uint16_t *dst, size_t n, uint64_t first, uint64_t seed,
                                       uint64_t key, float scale, float offset, cudaStream_t st)
{
	if (n == 0)
		return cudaSuccess;
	size_t blocks = (n + 255) / 256;
	if (blocks > 132 * 64)
		blocks = 132 * 64;
	synth_fill_kernel<<<(unsigned)blocks, 256, 0, st>>>(dst, n, first, seed, key, scale,
	                                                    offset);
	return cudaGetLastError();
}
