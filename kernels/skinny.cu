/* skinny.cu - the fast path's tensor-core GEMM for decode batches of 1..64 rows.
 *
 * C (M, N) fp32 = A (M, K) . W (N, K)^T, bf16 in, fp32 accumulate. The operands are swapped:
 * rows of W are the mma "A" operand (m16n8k16, 16 weight rows per tile) and the batch is the
 * "B" operand (n = 8, 16, 32 or 64 padded rows), so a decode GEMM is a stream over W with no
 * shared-memory staging. The path may reorder the K sum, so K is permuted inside each 32-wide
 * chunk: lane (g, t) owns physical elements [8t, 8t + 8) of the chunk for weight rows g and g + 8
 * and for batch row g, which is exactly its fragment for two k16 steps; every operand is one
 * 16-byte load. The warps of a block split K (contiguous U-chunk runs per warp, interleaved),
 * and their partial tiles are summed in shared memory in a fixed warp order (deterministic for a
 * given variant and shape; batch-variant by design). Weight loads of the first iteration are
 * issued before griddepcontrol.wait, so under programmatic dependent launch they overlap the
 * previous kernel's tail (weights are never written by the forward pass). */
#include "kernels.h"
#include "pdl.cuh"

#include <stdio.h>

/* The variants, one X(nt_index, variant, NT, WARPS, R, U) each: for batch tiles NT (M <= 8, 16,
 * 32, 64), WARPS warps per block, R 16-row weight tiles per warp, U 32-wide K chunks per
 * iteration (in flight per lane: 2 * R * U 16-byte weight loads). The fast path times them all
 * for its shapes. Shared memory is WARPS * R * NT * 512 bytes, kept <= 48 KB (no opt-in). */
#define SKINNY_VARIANTS(X)                                                                         \
	X(0, 0, 1, 8, 1, 4)                                                                        \
	X(0, 1, 1, 16, 1, 4)                                                                       \
	X(0, 2, 1, 8, 2, 4)                                                                        \
	X(0, 3, 1, 4, 1, 8)                                                                        \
	X(0, 4, 1, 8, 1, 8)                                                                        \
	X(0, 5, 1, 16, 1, 2)                                                                       \
	X(1, 0, 2, 8, 1, 4)                                                                        \
	X(1, 1, 2, 16, 1, 2)                                                                       \
	X(1, 2, 2, 8, 2, 2)                                                                        \
	X(1, 3, 2, 4, 1, 8)                                                                        \
	X(1, 4, 2, 8, 1, 8)                                                                        \
	X(1, 5, 2, 16, 1, 4)                                                                       \
	X(2, 0, 4, 8, 1, 4)                                                                        \
	X(2, 1, 4, 16, 1, 2)                                                                       \
	X(2, 2, 4, 8, 2, 2)                                                                        \
	X(2, 3, 4, 4, 2, 4)                                                                        \
	X(2, 4, 4, 4, 1, 8)                                                                        \
	X(2, 5, 4, 16, 1, 4)                                                                       \
	X(3, 0, 8, 8, 1, 2)                                                                        \
	X(3, 1, 8, 8, 1, 4)                                                                        \
	X(3, 2, 8, 4, 2, 2)                                                                        \
	X(3, 3, 8, 4, 1, 4)                                                                        \
	X(3, 4, 8, 4, 1, 2)                                                                        \
	X(3, 5, 8, 4, 2, 1)

__device__ __forceinline__ uint4 ld_stream(const uint16_t *p)
{
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p));
	return v;
}

__device__ __forceinline__ void mma16816(float *c, unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int NT, int R, int U, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    skinny_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ W,
                  float *__restrict__ C, int M, int N, int K)
{
	extern __shared__ float4 sk_red[]; /* (WARPS, R, NT, 32 lanes) fragments */
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int row0 = blockIdx.x * (16 * R);
	const int nch = (K + 31) / 32, step = WARPS * U;

	/* rows outside N / M read row 0 under a false predicate and contribute zeros */
	const uint16_t *wp[R][2];
	bool wok[R][2];
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int n = row0 + r * 16 + h * 8 + g;
			wok[r][h] = n < N;
			wp[r][h] = W + (size_t)(n < N ? n : 0) * K;
		}
	const uint16_t *ap[NT];
	bool aok[NT];
#pragma unroll
	for (int j = 0; j < NT; j++) {
		int m = j * 8 + g;
		aok[j] = m < M;
		ap[j] = A + (size_t)(m < M ? m : 0) * K;
	}

	float acc[R][NT][4];
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				acc[r][j][i] = 0.0f;

	uint4 wv[U][R][2];
	const uint4 zero = make_uint4(0, 0, 0, 0);
	int c = warp * U;
#pragma unroll
	for (int u = 0; u < U; u++) {
		int k = (c + u) * 32 + 8 * t;
#pragma unroll
		for (int r = 0; r < R; r++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				wv[u][r][h] = (wok[r][h] && k < K) ? ld_stream(wp[r][h] + k) : zero;
	}
	/* everything below reads activations or writes C: wait for the previous kernel */
	ds_grid_dep_wait();
	for (; c < nch; c += step) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			int k = (c + u) * 32 + 8 * t;
			uint4 av[NT];
#pragma unroll
			for (int j = 0; j < NT; j++)
				av[j] =
				    (aok[j] && k < K) ? __ldg((const uint4 *)(ap[j] + k)) : zero;
#pragma unroll
			for (int r = 0; r < R; r++)
#pragma unroll
				for (int j = 0; j < NT; j++) {
					mma16816(acc[r][j], wv[u][r][0].x, wv[u][r][1].x,
					         wv[u][r][0].y, wv[u][r][1].y, av[j].x, av[j].y);
					mma16816(acc[r][j], wv[u][r][0].z, wv[u][r][1].z,
					         wv[u][r][0].w, wv[u][r][1].w, av[j].z, av[j].w);
				}
		}
		int cn = c + step;
		if (cn < nch) {
#pragma unroll
			for (int u = 0; u < U; u++) {
				int k = (cn + u) * 32 + 8 * t;
#pragma unroll
				for (int r = 0; r < R; r++)
#pragma unroll
					for (int h = 0; h < 2; h++)
						wv[u][r][h] = (wok[r][h] && k < K)
						                  ? ld_stream(wp[r][h] + k)
						                  : zero;
			}
		}
	}

#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int j = 0; j < NT; j++)
			sk_red[((warp * R + r) * NT + j) * 32 + lane] =
			    make_float4(acc[r][j][0], acc[r][j][1], acc[r][j][2], acc[r][j][3]);
	__syncthreads();
	/* output element e: weight row rr (fastest, so stores to C coalesce), batch column cc */
	const float *red = (const float *)sk_red;
	for (int e = threadIdx.x; e < R * NT * 128; e += WARPS * 32) {
		int rr = e & 15, cc = (e >> 4) & 7, j = (e >> 7) % NT, r = (e >> 7) / NT;
		int m = j * 8 + cc, n = row0 + r * 16 + rr;
		if (m >= M || n >= N)
			continue;
		int fl = (rr & 7) * 4 + (cc >> 1), fi = (rr >> 3) * 2 + (cc & 1);
		float s = 0.0f;
#pragma unroll
		for (int w = 0; w < WARPS; w++)
			s += red[(((w * R + r) * NT + j) * 32 + fl) * 4 + fi];
		C[(size_t)m * N + n] = s;
	}
}

template <int NT, int R, int U, int WARPS>
static cudaError_t skinny_launch(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                 int K, int pdl, cudaStream_t st)
{
	return ds_launch(skinny_kernel<NT, R, U, WARPS>,
	                 dim3((unsigned)((N + 16 * R - 1) / (16 * R))), dim3(WARPS * 32),
	                 (size_t)WARPS * R * NT * 32 * sizeof(float4), st, pdl, A, W, C, M, N, K);
}

static int skinny_nt_index(int M)
{
	return M <= 8 ? 0 : M <= 16 ? 1 : M <= 32 ? 2 : 3;
}

extern "C" int ds_k_skinny_describe(int M, int variant, char *buf, size_t len)
{
	if (M < 1 || M > DS_K_SKINNY_MAX_M || variant < 0 || variant >= DS_K_SKINNY_VARIANTS)
		return -1;
	switch (skinny_nt_index(M) * 16 + variant) {
#define SKINNY_DESC(i, v, nt, w, r, u)                                                             \
	case i * 16 + v:                                                                           \
		return snprintf(buf, len, "skinny_n%d_w%d_r%d_u%d", 8 * nt, w, r, u);
		SKINNY_VARIANTS(SKINNY_DESC)
#undef SKINNY_DESC
	default:
		return -1;
	}
}

extern "C" cudaError_t ds_k_skinny(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                   int K, int variant, int pdl, cudaStream_t st)
{
	if (M <= 0 || N <= 0)
		return cudaSuccess;
	if (M > DS_K_SKINNY_MAX_M || K <= 0 || K % 8 != 0 || variant < 0 ||
	    variant >= DS_K_SKINNY_VARIANTS || ((uintptr_t)A | (uintptr_t)W) % 16 != 0)
		return cudaErrorInvalidValue;
	switch (skinny_nt_index(M) * 16 + variant) {
#define SKINNY_CASE(i, v, nt, w, r, u)                                                             \
	case i * 16 + v:                                                                           \
		return skinny_launch<nt, r, u, w>(A, W, C, M, N, K, pdl, st);
		SKINNY_VARIANTS(SKINNY_CASE)
#undef SKINNY_CASE
	default:
		return cudaErrorInvalidValue;
	}
}
