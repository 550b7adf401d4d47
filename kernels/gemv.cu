/* gemv.cu - the fast path's skinny GEMM for decode batches of 1..4 rows.
 *
 * C (M, N) fp32 = A (M, K) . W (N, K)^T for M <= 4, bound by reading W once. One warp per
 * output column streams its row of W with 16-byte loads, four in flight per lane, and keeps M
 * accumulators; A (a few KB) stays in L1/L2. cuBLASLt leaves a third of the bandwidth unused on
 * these shapes (N of 4096..6144 gives it too few tiles). Batch-variant by design: the fast
 * path picks this kernel or cuBLASLt by M.
 * Under programmatic dependent launch each lane first loads its first PRE groups of weights
 * (GEMV_UNROLL 16-byte loads each) into registers, then waits for the previous kernel: the
 * weights stream while that kernel (an RMSNorm, the attention) finishes. The sums run in the
 * same order either way: the same bits with and without PDL. */
#include "kernels.h"
#include "pdl.cuh"

#define GEMV_WARPS 8
#define GEMV_UNROLL 4
#define GEMV_PRE 2 /* groups loaded before the PDL wait */

__device__ __forceinline__ void unpack8(uint4 v, float *f)
{
	f[0] = __uint_as_float(v.x << 16);
	f[1] = __uint_as_float(v.x & 0xffff0000u);
	f[2] = __uint_as_float(v.y << 16);
	f[3] = __uint_as_float(v.y & 0xffff0000u);
	f[4] = __uint_as_float(v.z << 16);
	f[5] = __uint_as_float(v.z & 0xffff0000u);
	f[6] = __uint_as_float(v.w << 16);
	f[7] = __uint_as_float(v.w & 0xffff0000u);
}

/* acc[m] += W group wv (its 32-lane stride at k) . A rows (the one arithmetic of every group) */
template <int M>
__device__ __forceinline__ void gemv_group(float (&acc)[M], const uint4 (&wv)[GEMV_UNROLL],
                                           const uint16_t *__restrict__ A, int k, int K, int K8)
{
#pragma unroll
	for (int u = 0; u < GEMV_UNROLL; u++) {
		if (k + u * 32 >= K8)
			break;
		float wf[8];
		unpack8(wv[u], wf);
#pragma unroll
		for (int m = 0; m < M; m++) {
			float af[8];
			unpack8(__ldg((const uint4 *)(A + (size_t)m * K) + k + u * 32), af);
#pragma unroll
			for (int i = 0; i < 8; i++)
				acc[m] = fmaf(wf[i], af[i], acc[m]);
		}
	}
}

__device__ __forceinline__ void gemv_load(uint4 (&wv)[GEMV_UNROLL], const uint4 *w, int k, int K8)
{
#pragma unroll
	for (int u = 0; u < GEMV_UNROLL; u++)
		if (k + u * 32 < K8)
			wv[u] = __ldcs(w + k + u * 32);
}

/* PRE groups of weights loaded before the wait (0: the wait comes first) */
template <int M, int PRE>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ W,
                float *__restrict__ C, int N, int K)
{
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int n = blockIdx.x * GEMV_WARPS + warp;
	int K8 = K / 8;
	const uint4 *w = (const uint4 *)(W + (size_t)(n < N ? n : 0) * K);
	constexpr int STEP = 32 * GEMV_UNROLL;
	uint4 pre[PRE > 0 ? PRE : 1][GEMV_UNROLL];
#pragma unroll
	for (int p = 0; p < PRE; p++)
		if (n < N)
			gemv_load(pre[p], w, lane + p * STEP, K8);
	ds_grid_dep_wait(); /* no-op unless launched with PDL */
	if (n >= N)
		return;
	float acc[M];
#pragma unroll
	for (int m = 0; m < M; m++)
		acc[m] = 0.0f;
#pragma unroll
	for (int p = 0; p < PRE; p++)
		if (lane + p * STEP < K8)
			gemv_group<M>(acc, pre[p], A, lane + p * STEP, K, K8);
	for (int k = lane + PRE * STEP; k < K8; k += STEP) {
		uint4 wv[GEMV_UNROLL];
		gemv_load(wv, w, k, K8);
		gemv_group<M>(acc, wv, A, k, K, K8);
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

template <int M>
static cudaError_t gemv_launch(const uint16_t *A, const uint16_t *W, float *C, int N, int K,
                               int pdl, cudaStream_t st)
{
	dim3 grid((unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS));
	if (pdl)
		return ds_launch(gemv_kernel<M, GEMV_PRE>, grid, dim3(GEMV_WARPS * 32), 0, st, 1, A, W,
		                 C, N, K);
	return ds_launch(gemv_kernel<M, 0>, grid, dim3(GEMV_WARPS * 32), 0, st, 0, A, W, C, N, K);
}

extern "C" cudaError_t ds_k_gemv(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                 int K, int pdl, cudaStream_t st)
{
	if (M <= 0 || N <= 0)
		return cudaSuccess;
	if (M > DS_K_GEMV_MAX_M || K <= 0 || K % 8 != 0)
		return cudaErrorInvalidValue;
	switch (M) {
	case 1:
		return gemv_launch<1>(A, W, C, N, K, pdl, st);
	case 2:
		return gemv_launch<2>(A, W, C, N, K, pdl, st);
	case 3:
		return gemv_launch<3>(A, W, C, N, K, pdl, st);
	default:
		return gemv_launch<4>(A, W, C, N, K, pdl, st);
	}
}
