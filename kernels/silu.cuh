/* silu.cuh - bf16(silu(g) * u) for one element: the arithmetic every SiLU*mul of the project
 * repeats (the silu_mul kernel, the fused skinny GEMM, the mega kernel and the reference
 * GEMM's fused gate/up epilogue), so a fused product equals what the kernel stores. */
#ifndef DS_SILU_CUH
#define DS_SILU_CUH

#include "cu_common.cuh" /* ds_f32_to_bf16 */

__device__ __forceinline__ uint16_t ds_silu_mul_bf16(float g, float u)
{
	return ds_f32_to_bf16(__fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), u));
}

#endif
