/* gemv.cu - the fast path's skinny GEMM for decode batches of 1..4 rows.
 *
 * C (M, N) fp32 = A (M, K) . W (N, K)^T for M <= 4, bound by reading W once. One warp per
 * output column streams its row of W with 16-byte loads, four in flight per lane, and keeps M
 * accumulators; A (a few KB) stays in L1/L2. cuBLASLt leaves a third of the bandwidth unused on
 * these shapes (N of 4096..6144 gives it too few tiles). Batch-variant by design: the fast
 * path picks this kernel or cuBLASLt by M. */
#include "kernels.h"

#include "attn_decode_core.cuh" /* dattn_unpack: 8 bf16 of a uint4 to fp32 */

#define GEMV_WARPS 8
#define GEMV_UNROLL 4

template <int M>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ W,
                float *__restrict__ C, int N, int K)
{
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int n = blockIdx.x * GEMV_WARPS + warp;
	if (n >= N)
		return;
	int K8 = K / 8;
	const uint4 *w = (const uint4 *)(W + (size_t)n * K);
	float acc[M];
#pragma unroll
	for (int m = 0; m < M; m++)
		acc[m] = 0.0f;
	for (int k = lane; k < K8; k += 32 * GEMV_UNROLL) {
		uint4 wv[GEMV_UNROLL];
#pragma unroll
		for (int u = 0; u < GEMV_UNROLL; u++)
			if (k + u * 32 < K8)
				wv[u] = __ldcs(w + k + u * 32);
#pragma unroll
		for (int u = 0; u < GEMV_UNROLL; u++) {
			if (k + u * 32 >= K8)
				break;
			float wf[8];
			dattn_unpack(wv[u], wf);
#pragma unroll
			for (int m = 0; m < M; m++) {
				float af[8];
				dattn_unpack(__ldg((const uint4 *)(A + (size_t)m * K) + k + u * 32),
				             af);
#pragma unroll
				for (int i = 0; i < 8; i++)
					acc[m] = fmaf(wf[i], af[i], acc[m]);
			}
		}
	}
#pragma unroll
	for (int m = 0; m < M; m++) {
		float v = acc[m];
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, o);
		if (lane == 0)
			C[(size_t)m * N + n] = v;
	}
}

extern "C" cudaError_t ds_k_gemv(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                 int K, cudaStream_t st)
{
	if (M <= 0 || N <= 0)
		return cudaSuccess;
	if (M > DS_K_GEMV_MAX_M || K <= 0 || K % 8 != 0)
		return cudaErrorInvalidValue;
	dim3 grid((unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS));
	switch (M) {
	case 1:
		gemv_kernel<1><<<grid, GEMV_WARPS * 32, 0, st>>>(A, W, C, N, K);
		break;
	case 2:
		gemv_kernel<2><<<grid, GEMV_WARPS * 32, 0, st>>>(A, W, C, N, K);
		break;
	case 3:
		gemv_kernel<3><<<grid, GEMV_WARPS * 32, 0, st>>>(A, W, C, N, K);
		break;
	default:
		gemv_kernel<4><<<grid, GEMV_WARPS * 32, 0, st>>>(A, W, C, N, K);
		break;
	}
	return cudaGetLastError();
}
