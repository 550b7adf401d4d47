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
 * given variant and shape; batch-variant by design). Small-N shapes (q/k/v, o, down: 256..384
 * weight tiles) keep too few loads in flight, so variants also split K over a thread-block
 * cluster of 2..8 blocks: each block sums its warps, then the blocks sum the cluster's parts
 * through distributed shared memory in rank order (no atomics, no zeroed C, no second kernel).
 * A fused variant (SILU) reads the fp32 gate/up buffer instead of A and forms
 * bf16(silu(g) * u) in registers with silu_mul's arithmetic, saving that kernel at decode.
 * Weight loads of the first iteration are issued before griddepcontrol.wait, so under
 * programmatic dependent launch they overlap the previous kernel's tail (weights are never
 * written by the forward pass); with stage > 0 the next iterations' weights are also copied
 * into shared memory before the wait (cp.async), so a GEMM after RMSNorm or the attention
 * streams part of its weights while they run (H200: the batch-8 step 4.85 vs 4.98 ms,
 * bench/results/gpu-20261129-4826cce). */
#include "kernels.h"
#include "cu_common.cuh"
#include "mma_prims.cuh"
#include "pdl.cuh"
#include "silu.cuh"

#include <cooperative_groups.h>

#include <stdio.h>

namespace cg = cooperative_groups;

/* The variants, one X(nt_index, variant, NT, WARPS, R, U, KS, PF) each: for batch tiles NT
 * (M <= 8, 16, 32, 64), WARPS warps per block, R 16-row weight tiles per warp, U 32-wide K
 * chunks per iteration (in flight per lane: 2 * R * U 16-byte weight loads, twice that with
 * PF), KS blocks per thread-block cluster splitting K (1: no cluster), PF: the next
 * iteration's weights are requested before this one's activations are read. Variants 0..5
 * are round 1's (measured on the H200), 6..11 split K, 12..13 only prefetch. The fast path
 * times them all for its shapes. Shared memory is WARPS * R * NT * 512 bytes
 * (+ R * NT * 512 for KS > 1), kept <= 48 KB (no opt-in). */
#define SKINNY_VARIANTS(X)                                                                         \
	X(0, 0, 1, 8, 1, 4, 1, 0)                                                                  \
	X(0, 1, 1, 16, 1, 4, 1, 0)                                                                 \
	X(0, 2, 1, 8, 2, 4, 1, 0)                                                                  \
	X(0, 3, 1, 4, 1, 8, 1, 0)                                                                  \
	X(0, 4, 1, 8, 1, 8, 1, 0)                                                                  \
	X(0, 5, 1, 16, 1, 2, 1, 0)                                                                 \
	X(0, 6, 1, 8, 1, 4, 2, 1)                                                                  \
	X(0, 7, 1, 8, 1, 4, 4, 1)                                                                  \
	X(0, 8, 1, 8, 1, 2, 8, 1)                                                                  \
	X(0, 9, 1, 4, 1, 8, 4, 1)                                                                  \
	X(0, 10, 1, 16, 1, 2, 4, 1)                                                                \
	X(0, 11, 1, 8, 2, 2, 4, 1)                                                                 \
	X(0, 12, 1, 8, 1, 4, 1, 1)                                                                 \
	X(0, 13, 1, 16, 1, 2, 1, 1)                                                                \
	X(1, 0, 2, 8, 1, 4, 1, 0)                                                                  \
	X(1, 1, 2, 16, 1, 2, 1, 0)                                                                 \
	X(1, 2, 2, 8, 2, 2, 1, 0)                                                                  \
	X(1, 3, 2, 4, 1, 8, 1, 0)                                                                  \
	X(1, 4, 2, 8, 1, 8, 1, 0)                                                                  \
	X(1, 5, 2, 16, 1, 4, 1, 0)                                                                 \
	X(1, 6, 2, 8, 1, 4, 2, 1)                                                                  \
	X(1, 7, 2, 8, 1, 4, 4, 1)                                                                  \
	X(1, 8, 2, 8, 1, 2, 8, 1)                                                                  \
	X(1, 9, 2, 4, 1, 8, 4, 1)                                                                  \
	X(1, 10, 2, 16, 1, 2, 4, 1)                                                                \
	X(1, 11, 2, 8, 2, 2, 4, 1)                                                                 \
	X(1, 12, 2, 8, 1, 4, 1, 1)                                                                 \
	X(1, 13, 2, 16, 1, 2, 1, 1)                                                                \
	X(2, 0, 4, 8, 1, 4, 1, 0)                                                                  \
	X(2, 1, 4, 16, 1, 2, 1, 0)                                                                 \
	X(2, 2, 4, 8, 2, 2, 1, 0)                                                                  \
	X(2, 3, 4, 4, 2, 4, 1, 0)                                                                  \
	X(2, 4, 4, 4, 1, 8, 1, 0)                                                                  \
	X(2, 5, 4, 16, 1, 4, 1, 0)                                                                 \
	X(2, 6, 4, 8, 1, 4, 2, 1)                                                                  \
	X(2, 7, 4, 8, 1, 4, 4, 1)                                                                  \
	X(2, 8, 4, 8, 1, 2, 8, 1)                                                                  \
	X(2, 9, 4, 4, 1, 8, 4, 1)                                                                  \
	X(2, 10, 4, 4, 2, 4, 4, 1)                                                                 \
	X(2, 11, 4, 8, 2, 2, 2, 1)                                                                 \
	X(2, 12, 4, 8, 1, 4, 1, 1)                                                                 \
	X(2, 13, 4, 4, 2, 4, 1, 1)                                                                 \
	X(3, 0, 8, 8, 1, 2, 1, 0)                                                                  \
	X(3, 1, 8, 8, 1, 4, 1, 0)                                                                  \
	X(3, 2, 8, 4, 2, 2, 1, 0)                                                                  \
	X(3, 3, 8, 4, 1, 4, 1, 0)                                                                  \
	X(3, 4, 8, 4, 1, 2, 1, 0)                                                                  \
	X(3, 5, 8, 4, 2, 1, 1, 0)                                                                  \
	X(3, 6, 8, 8, 1, 2, 2, 1)                                                                  \
	X(3, 7, 8, 8, 1, 2, 4, 1)                                                                  \
	X(3, 8, 8, 4, 1, 4, 4, 1)                                                                  \
	X(3, 9, 8, 4, 2, 2, 4, 1)                                                                  \
	X(3, 10, 8, 4, 1, 2, 8, 1)                                                                 \
	X(3, 11, 8, 8, 1, 4, 2, 1)                                                                 \
	X(3, 12, 8, 8, 1, 2, 1, 1)                                                                 \
	X(3, 13, 8, 4, 2, 2, 1, 1)

__device__ __forceinline__ uint4 ld_stream(const uint16_t *p)
{
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p));
	return v;
}

/* f(u, r, h, k, ok) for the weight fragments of chunks [c, c + U) of R tiles: lane element k of
 * fragment (u, r, h), ok false past K or N. */
template <int U, int R, typename F>
__device__ __forceinline__ void for_w(const bool (&wok)[R][2], int c, int t, int K, F f)
{
#pragma unroll
	for (int u = 0; u < U; u++) {
		int k = (c + u) * 32 + 8 * t;
#pragma unroll
		for (int r = 0; r < R; r++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				f(u, r, h, k, wok[r][h] && k < K);
	}
}

/* Weight fragments of chunks [c, c + U) for R tiles (zeros past K or N). */
template <int U, int R>
__device__ __forceinline__ void load_w(uint4 (&wv)[U][R][2], const uint16_t *const (&wp)[R][2],
                                       const bool (&wok)[R][2], int c, int t, int K)
{
	const uint4 zero = make_uint4(0, 0, 0, 0);
	for_w<U, R>(wok, c, t, K, [&](int u, int r, int h, int k, bool ok) {
		wv[u][r][h] = ok ? ld_stream(wp[r][h] + k) : zero;
	});
}

/* Staged weights: a thread's fragments of one iteration, (U, R, 2) uint4, each at index
 * ((u * R + r) * 2 + h) * nthr + tid of its iteration's slab, so a warp's 16-byte accesses are
 * contiguous. Every lane stages exactly the fragments it will read itself, so its own
 * cp.async.wait_group is all the synchronisation reading them back needs. */
template <int U, int R>
__device__ __forceinline__ void stage_w(uint4 *slab, const uint16_t *const (&wp)[R][2],
                                        const bool (&wok)[R][2], int c, int t, int K, int tid,
                                        int nthr)
{
	for_w<U, R>(wok, c, t, K, [&](int u, int r, int h, int k, bool ok) {
		mt_cp16(slab + ((u * R + r) * 2 + h) * nthr + tid, ok ? wp[r][h] + k : wp[r][h],
		        ok);
	});
}

template <int U, int R>
__device__ __forceinline__ void unstage_w(uint4 (&wv)[U][R][2], const uint4 *slab, int tid,
                                          int nthr)
{
#pragma unroll
	for (int u = 0; u < U; u++)
#pragma unroll
		for (int r = 0; r < R; r++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				wv[u][r][h] = slab[((u * R + r) * 2 + h) * nthr + tid];
}

/* The weights of iteration it (chunks c..): from its staged slab when it <= stage (the first
 * such read waits for this thread's copies), else from global memory. */
template <int U, int R>
__device__ __forceinline__ void next_w(uint4 (&wv)[U][R][2], const uint16_t *const (&wp)[R][2],
                                       const bool (&wok)[R][2], int c, int t, int K, int it,
                                       int stage, const uint4 *stg, int tid, int nthr)
{
	if (it <= stage) {
		if (it == 1)
			mt_wait<0>();
		unstage_w<U, R>(wv, stg + (size_t)(it - 1) * (U * R * 2) * nthr, tid, nthr);
	} else {
		load_w<U, R>(wv, wp, wok, c, t, K);
	}
}

/* The batch operand of chunk k0 for a fused variant (NT = 1): lane l forms element k0 + l of
 * every batch row m < M from the fp32 gate/up rows (gu row m: g at [0, K), u at [K, 2K)), one
 * SiLU each, and lane (g, t) gathers row g's elements [8t, 8t + 8) as bf16 pairs with shuffles;
 * so the SiLU work is spread over all lanes instead of the M lanes that hold batch rows.
 * Elements at or past K are 0, as in the unfused load. M and k0 are warp-uniform. */
__device__ __forceinline__ uint4 silu_operand(const float *__restrict__ gu, int k0, int M, int K,
                                              int lane, int g, int t)
{
	unsigned word[4] = {0u, 0u, 0u, 0u};
	const int kl = k0 + lane;
#pragma unroll
	for (int m = 0; m < 8; m++) {
		if (m >= M)
			break;
		const float *row = gu + (size_t)m * 2 * K;
		unsigned b =
		    kl < K ? (unsigned)ds_silu_mul_bf16(__ldg(row + kl), __ldg(row + K + kl)) : 0u;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			unsigned lo = __shfl_sync(0xffffffffu, b, 8 * t + 2 * i);
			unsigned hi = __shfl_sync(0xffffffffu, b, 8 * t + 2 * i + 1);
			if (g == m)
				word[i] = lo | (hi << 16);
		}
	}
	return make_uint4(word[0], word[1], word[2], word[3]);
}

/* Block (tile, rank): tile = blockIdx.x / KS owns weight rows [16 R tile, 16 R (tile + 1)),
 * rank (its place in a KS-block cluster) the K chunks (rank * WARPS + warp) * U + i * KS *
 * WARPS * U + [0, U). With KS > 1 each block sums its warps into part, the cluster syncs, and
 * block q sums the KS parts of every KS-th output element over distributed shared memory in
 * rank order (fixed: no atomics, no memset, no second kernel). */
template <int NT, int R, int U, int WARPS, int KS, bool PF, bool SILU>
__global__ void __launch_bounds__(WARPS * 32)
    skinny_kernel(const void *__restrict__ A, const uint16_t *__restrict__ W, float *__restrict__ C,
                  int M, int N, int K, int stage)
{
	/* (WARPS, R, NT, 32 lanes) fragments, then part (KS > 1), then stage slabs of weights */
	extern __shared__ float4 sk_red[];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	int rank = 0;
	if constexpr (KS > 1)
		rank = (int)cg::this_cluster().block_rank();
	const int row0 = (blockIdx.x / KS) * (16 * R);
	const int nch = (K + 31) / 32, step = KS * WARPS * U;
	static_assert(!SILU || NT == 1, "the fused SiLU operand is built for one batch tile");

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
	const uint16_t *ap[NT]; /* A's rows (unused by SILU variants, whose A is gu) */
	bool aok[NT];
#pragma unroll
	for (int j = 0; j < NT; j++) {
		int m = j * 8 + g;
		aok[j] = m < M;
		ap[j] = (const uint16_t *)A + (size_t)(m < M ? m : 0) * K;
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
	const int tid = threadIdx.x, nthr = WARPS * 32;
	int c = (rank * WARPS + warp) * U;
	load_w<U, R>(wv, wp, wok, c, t, K);
	/* the next `stage` iterations' weights go to shared memory now: under PDL, while the
	 * previous kernel (an RMSNorm or the attention, which leave DRAM mostly idle) still runs */
	const uint4 *stg = (const uint4 *)(sk_red + (WARPS + (KS > 1 ? 1 : 0)) * R * NT * 32);
	for (int it = 1; it <= stage && c + it * step < nch; it++)
		stage_w<U, R>((uint4 *)stg + (size_t)(it - 1) * (U * R * 2) * nthr, wp, wok,
		              c + it * step, t, K, tid, nthr);
	mt_commit();
	/* everything below reads activations or writes C: wait for the previous kernel */
	ds_grid_dep_wait();
	for (int it = 0; c < nch; c += step, it++) {
		const int cn = c + step;
		/* PF: the next chunks' weights are requested before this iteration's activation
		 * loads (and SiLU), so their latency is not added to the weight stream's */
		uint4 wn[PF ? U : 1][R][2];
		if constexpr (PF)
			if (cn < nch)
				next_w<U, R>(wn, wp, wok, cn, t, K, it + 1, stage, stg, tid, nthr);
#pragma unroll
		for (int u = 0; u < U; u++) {
			int k = (c + u) * 32 + 8 * t;
			uint4 av[NT];
			if constexpr (SILU) {
				av[0] =
				    silu_operand((const float *)A, (c + u) * 32, M, K, lane, g, t);
			} else {
#pragma unroll
				for (int j = 0; j < NT; j++)
					av[j] = (aok[j] && k < K)
					            ? __ldg((const uint4 *)(ap[j] + k))
					            : zero;
			}
#pragma unroll
			for (int r = 0; r < R; r++) {
				const unsigned lo[4] = {wv[u][r][0].x, wv[u][r][1].x, wv[u][r][0].y,
				                        wv[u][r][1].y};
				const unsigned hi[4] = {wv[u][r][0].z, wv[u][r][1].z, wv[u][r][0].w,
				                        wv[u][r][1].w};
#pragma unroll
				for (int j = 0; j < NT; j++) {
					mt_mma(acc[r][j], lo, av[j].x, av[j].y);
					mt_mma(acc[r][j], hi, av[j].z, av[j].w);
				}
			}
		}
		if (cn < nch) {
			if constexpr (PF) {
#pragma unroll
				for (int u = 0; u < U; u++)
#pragma unroll
					for (int r = 0; r < R; r++)
#pragma unroll
						for (int h = 0; h < 2; h++)
							wv[u][r][h] = wn[u][r][h];
			} else {
				next_w<U, R>(wv, wp, wok, cn, t, K, it + 1, stage, stg, tid, nthr);
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
	float *part = (float *)(sk_red + WARPS * R * NT * 32); /* (R * NT * 128), KS > 1 */
	for (int e = threadIdx.x; e < R * NT * 128; e += WARPS * 32) {
		int rr = e & 15, cc = (e >> 4) & 7, j = (e >> 7) % NT, r = (e >> 7) / NT;
		int m = j * 8 + cc, n = row0 + r * 16 + rr;
		if (KS == 1 && (m >= M || n >= N))
			continue;
		int fl = (rr & 7) * 4 + (cc >> 1), fi = (rr >> 3) * 2 + (cc & 1);
		float s = 0.0f;
#pragma unroll
		for (int w = 0; w < WARPS; w++)
			s += red[(((w * R + r) * NT + j) * 32 + fl) * 4 + fi];
		if (KS == 1)
			C[(size_t)m * N + n] = s;
		else
			part[e] = s;
	}
	if constexpr (KS > 1) {
		cg::cluster_group cl = cg::this_cluster();
		cl.sync(); /* every block's part is written (release/acquire across the cluster) */
		const float *parts[KS];
#pragma unroll
		for (int q = 0; q < KS; q++)
			parts[q] = cl.map_shared_rank(part, q);
		for (int e = rank * WARPS * 32 + threadIdx.x; e < R * NT * 128;
		     e += KS * WARPS * 32) {
			int rr = e & 15, cc = (e >> 4) & 7, j = (e >> 7) % NT, r = (e >> 7) / NT;
			int m = j * 8 + cc, n = row0 + r * 16 + rr;
			if (m >= M || n >= N)
				continue;
			float s = 0.0f;
#pragma unroll
			for (int q = 0; q < KS; q++)
				s += parts[q][e];
			C[(size_t)m * N + n] = s;
		}
		cl.sync(); /* no block leaves while another still reads its part */
	}
}

/* Shared memory for the staged weights of one block at most (the rest of an SM's 227 KB is left
 * to a second block and to the kernel before it, which PDL runs alongside) */
#define SKINNY_STAGE_BYTES (96 * 1024)

template <int NT, int R, int U, int WARPS, int KS, bool PF, bool SILU>
static cudaError_t skinny_launch(const void *A, const uint16_t *W, float *C, int M, int N, int K,
                                 int pdl, int stage, cudaStream_t st)
{
	constexpr size_t red = (size_t)(WARPS + (KS > 1 ? 1 : 0)) * R * NT * 32 * sizeof(float4);
	constexpr size_t slab = (size_t)U * R * 2 * WARPS * 32 * sizeof(uint4);
	static_assert(red <= 48 * 1024, "skinny variant needs more than 48 KB of shared memory");
	static_assert(KS >= 1 && KS <= 8, "cluster size must be portable (<= 8)");
	unsigned tiles = (unsigned)((N + 16 * R - 1) / (16 * R));
	if ((size_t)tiles * KS > 0x7fffffffu)
		return cudaErrorInvalidValue;
	/* no more iterations than the block has after its first, and what fits the budget */
	int nch = (K + 31) / 32, step = KS * WARPS * U;
	stage = DS_MIN(stage, (nch + step - 1) / step - 1);
	stage = DS_MAX(DS_MIN(stage, (int)(SKINNY_STAGE_BYTES / slab)), 0);
	size_t smem = red + (size_t)stage * slab;
	auto fn = skinny_kernel<NT, R, U, WARPS, KS, PF, SILU>;
	if (smem > 48 * 1024) {
		cudaError_t e = ds_allow_smem(fn, smem);
		if (e != cudaSuccess)
			return e;
	}
	return ds_launch_cluster(fn, dim3(tiles * KS), dim3(WARPS * 32), smem, st, pdl, KS, A, W, C,
	                         M, N, K, stage);
}

/* Variant I of a batch tile, fused SiLU or not. The fused SiLU variants exist for the first batch
 * tile only (M <= 8): above it every block recomputing the activations costs more than the
 * separate kernel saves. */
template <int I, int NT, int R, int U, int WARPS, int KS, bool PF, bool SILU>
static cudaError_t skinny_launch_v(const void *A, const uint16_t *W, float *C, int M, int N, int K,
                                   int pdl, int stage, cudaStream_t st)
{
	if constexpr (SILU && I != 0)
		return cudaErrorInvalidValue;
	else
		return skinny_launch<NT, R, U, WARPS, KS, PF, SILU>(A, W, C, M, N, K, pdl, stage,
		                                                    st);
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
#define SKINNY_DESC(i, v, nt, w, r, u, ks, pf)                                                     \
	case i * 16 + v:                                                                           \
		return snprintf(buf, len, "skinny_n%d_w%d_r%d_u%d%s%s", 8 * nt, w, r, u,           \
		                ks == 2   ? "_k2"                                                  \
		                : ks == 4 ? "_k4"                                                  \
		                : ks == 8 ? "_k8"                                                  \
		                          : "",                                                    \
		                pf ? "_pf" : "");
		SKINNY_VARIANTS(SKINNY_DESC)
#undef SKINNY_DESC
	default:
		return -1;
	}
}

/* Checks the arguments and launches variant `variant` for M's batch tile (A: bf16 activations, or
 * the fp32 gate/up buffer when SILU). */
template <bool SILU>
static cudaError_t skinny_dispatch(const void *A, const uint16_t *W, float *C, int M, int N, int K,
                                   int variant, int pdl, int stage, cudaStream_t st)
{
	if (M <= 0 || N <= 0)
		return cudaSuccess;
	if (M > (SILU ? DS_K_SKINNY_SILU_MAX_M : DS_K_SKINNY_MAX_M) || K <= 0 || K % 8 != 0 ||
	    variant < 0 || variant >= DS_K_SKINNY_VARIANTS || stage < 0 ||
	    stage > DS_K_SKINNY_MAX_STAGE || ((uintptr_t)A | (uintptr_t)W) % 16 != 0)
		return cudaErrorInvalidValue;
	switch (skinny_nt_index(M) * 16 + variant) {
#define SKINNY_CASE(i, v, nt, w, r, u, ks, pf)                                                     \
	case i * 16 + v:                                                                           \
		return skinny_launch_v<i, nt, r, u, w, ks, pf, SILU>(A, W, C, M, N, K, pdl, stage, \
		                                                     st);
		SKINNY_VARIANTS(SKINNY_CASE)
#undef SKINNY_CASE
	default:
		return cudaErrorInvalidValue;
	}
}

extern "C" cudaError_t ds_k_skinny(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                   int K, int variant, int pdl, int stage, cudaStream_t st)
{
	return skinny_dispatch<false>(A, W, C, M, N, K, variant, pdl, stage, st);
}

extern "C" cudaError_t ds_k_skinny_silu(const float *gu, const uint16_t *W, float *C, int M, int N,
                                        int K, int variant, int pdl, int stage, cudaStream_t st)
{
	return skinny_dispatch<true>(gu, W, C, M, N, K, variant, pdl, stage, st);
}
