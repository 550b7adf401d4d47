/* gemm_mma.cu - the previous reference GEMM (mma.sync m16n8k16, 128x128x32, 4 stages), kept as a
 * comparison point for the wgmma kernel in gemm_ref.cu: same contract, same invariance
 * argument (fixed K order per element, no split-K). The reference path does not use it. */
#include "kernels.h"

#define BM 128
#define BN 128
#define BK 32
#define STAGES 4
#define THREADS 256

/* Shared tiles are rows of BK bf16 = 4 chunks of 16 bytes; the chunk index is XORed with
 * (row >> 1) & 3 so ldmatrix's 8 rows hit 8 distinct bank groups. */
__device__ __forceinline__ int swz(int row, int chunk)
{
	return row * BK + ((chunk ^ ((row >> 1) & 3)) << 3);
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}

__device__ __forceinline__ void ldsm_x4(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3,
                                        const void *smem)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
	             : "r"(s));
}

__device__ __forceinline__ void mma_bf16(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(THREADS, 2)
    gemm_mma_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ W,
                    float *__restrict__ C, int M, int N, int K)
{
	extern __shared__ __align__(128) uint16_t smem[];
	uint16_t *As = smem;                    /* (STAGES, BM, BK) */
	uint16_t *Bs = smem + STAGES * BM * BK; /* (STAGES, BN, BK) */
	int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
	int wm = warp >> 2, wn = warp & 3;
	int KT = (K + BK - 1) / BK;

	float acc[4][4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int k = 0; k < 4; k++)
				acc[i][j][k] = 0.0f;

	auto load_stage = [&](int stage, int kt) {
		int k0 = kt * BK;
#pragma unroll
		for (int i = 0; i < 2; i++) {
			int c = tid + i * THREADS;
			int row = c >> 2, ch = c & 3;
			int col = k0 + ch * 8;
			int gr = m0 + row;
			bool ok = gr < M && col < K;
			const uint16_t *src = ok ? A + (size_t)gr * K + col : A;
			cp_async16(As + stage * BM * BK + swz(row, ch), src, ok);
			int gn = n0 + row;
			ok = gn < N && col < K;
			src = ok ? W + (size_t)gn * K + col : W;
			cp_async16(Bs + stage * BN * BK + swz(row, ch), src, ok);
		}
	};

#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < KT)
			load_stage(s, s);
		asm volatile("cp.async.commit_group;\n" ::);
	}

	for (int kt = 0; kt < KT; kt++) {
		asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
		__syncthreads();
		int pf = kt + STAGES - 1;
		if (pf < KT)
			load_stage(pf % STAGES, pf);
		asm volatile("cp.async.commit_group;\n" ::);

		const uint16_t *as = As + (kt % STAGES) * BM * BK;
		const uint16_t *bs = Bs + (kt % STAGES) * BN * BK;
#pragma unroll
		for (int ks = 0; ks < BK / 16; ks++) {
			unsigned af[4][4], bf[4][2];
#pragma unroll
			for (int mi = 0; mi < 4; mi++) {
				int row = wm * 64 + mi * 16 + (lane & 15);
				int ch = ks * 2 + (lane >> 4);
				ldsm_x4(af[mi][0], af[mi][1], af[mi][2], af[mi][3],
				        as + swz(row, ch));
			}
#pragma unroll
			for (int nj = 0; nj < 2; nj++) {
				int row = wn * 32 + nj * 16 + ((lane >> 4) << 3) + (lane & 7);
				int ch = ks * 2 + ((lane >> 3) & 1);
				ldsm_x4(bf[2 * nj][0], bf[2 * nj][1], bf[2 * nj + 1][0],
				        bf[2 * nj + 1][1], bs + swz(row, ch));
			}
#pragma unroll
			for (int mi = 0; mi < 4; mi++)
#pragma unroll
				for (int ni = 0; ni < 4; ni++)
					mma_bf16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
		}
	}
	asm volatile("cp.async.wait_group 0;\n" ::);

#pragma unroll
	for (int mi = 0; mi < 4; mi++) {
#pragma unroll
		for (int ni = 0; ni < 4; ni++) {
			int col = n0 + wn * 32 + ni * 8 + 2 * (lane & 3);
#pragma unroll
			for (int hlf = 0; hlf < 2; hlf++) {
				int row = m0 + wm * 64 + mi * 16 + (lane >> 2) + hlf * 8;
				if (row >= M)
					continue;
				float *dst = C + (size_t)row * N + col;
				float v0 = acc[mi][ni][2 * hlf], v1 = acc[mi][ni][2 * hlf + 1];
				if (col + 1 < N && (N & 1) == 0) {
					*(float2 *)dst = make_float2(v0, v1);
				} else {
					if (col < N)
						dst[0] = v0;
					if (col + 1 < N)
						dst[1] = v1;
				}
			}
		}
	}
}

extern "C" cudaError_t ds_k_gemm_mma(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                     int K, cudaStream_t st)
{
	if (M <= 0 || N <= 0)
		return cudaSuccess;
	if (K <= 0 || K % 8 != 0)
		return cudaErrorInvalidValue;
	size_t shm = (size_t)STAGES * (BM + BN) * BK * sizeof(uint16_t);
	dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
	gemm_mma_kernel<<<grid, THREADS, shm, st>>>(A, W, C, M, N, K);
	return cudaGetLastError();
}

extern "C" cudaError_t ds_k_gemm_mma_setup(void)
{
	size_t shm = (size_t)STAGES * (BM + BN) * BK * sizeof(uint16_t);
	return cudaFuncSetAttribute(gemm_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                            (int)shm);
}
