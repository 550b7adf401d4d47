/* skinny_stream.cu - the streaming variants of the fast path's skinny GEMM (ds_k_skinny variants
 * DS_K_SKINNY_STREAM and DS_K_SKINNY_STREAM + 1).
 *
 * C (M, N) fp32 = A (M, K) . W (N, K)^T for decode batches, bf16 in, fp32 accumulate, as the
 * other skinny variants (same operand swap and K permutation: weight rows are the mma A operand,
 * the batch the B operand; lane (g, t) owns elements [8t, 8t + 8) of each 32-wide chunk).
 *
 * Why: the register-streaming variants keep 32-64 KB of weight loads in flight per SM, which on
 * the H200 holds them to about 3.6 TB/s on the large decode shapes, while a decode GEMM's weights
 * are a pure stream. Here one block per SM owns a contiguous run of 16-row weight tiles and a
 * producer thread copies them with TMA tensor copies into a ring of slots in shared memory, each
 * slot one tile's 256-column chunk of weights (one 16 x 256 box, 8 KB) plus the batch rows of A
 * for those columns (one more box). Up to 16 slots (128 KB of weights) are in flight per SM, with
 * no register cost, and a slot is freed as soon as the one warp that reads it is done. Boxes,
 * not row copies: on the H200 every bulk copy costs the SM's copy engine about 70 ns whatever
 * its size up to a few KB, so 512-byte row copies held the first version of this kernel to
 * 0.9 TB/s (bench/results/gpu-20261130-8cd71d0-stream). Out-of-bounds box elements (rows past N
 * or M, columns past K) arrive as zeros, so no operand needs masking.
 *
 * Under programmatic dependent launch the producer fills the whole ring with weights before
 * griddepcontrol.wait (weights are never written by the forward pass) and copies A's chunks only
 * after it, so a GEMM after RMSNorm or attention streams its first ring of weights while they
 * run. Weight copies carry an L2 evict-first hint.
 *
 * Order: slot item q (tile q / nch, chunk q % nch) is read by consumer warp q % 8, which keeps
 * its own partial tile; at a tile's end the eight warps' partials are summed in warp order. The
 * sum order depends on K only, not on M, the data or timing: runs are bit-reproducible, and the
 * fused SiLU form (A built from the fp32 gate/up rows in the slot) gives the bits of
 * ds_k_silu_mul followed by the plain form. Batches over 32 rows run as slices of 32 rows. */
#include "kernels.h"
#include "cu_common.cuh"
#include "mbar.cuh"
#include "mma_prims.cuh"
#include "pdl.cuh"
#include "silu.cuh"
#include "tma_map.cuh"

#include <stdio.h>

#define SS_CWARPS 8                      /* consumer warps */
#define SS_THREADS (SS_CWARPS * 32 + 32) /* + the producer warp */
#define SS_KC 256                        /* columns per slot (the largest box side) */
#define SS_MAX_NT 4                      /* batch tiles of 8 rows per launch */

/* A slot: the weight box (16 rows of SS_KC bf16, dense), then the batch box: 8 NT rows of SS_KC
 * bf16, or for the fused SiLU form 8 rows of (gate, up) x SS_KC fp32. Dense rows put lanes g and
 * g + 1 of a load phase in the same banks (a 2-way conflict); the consumer warps have time to
 * spare, the stream does not. */
template <int NT, bool SILU> struct ss_shape {
	static constexpr unsigned W_ROW = SS_KC * 2;
	static constexpr unsigned W_BYTES = 16 * W_ROW;
	static constexpr unsigned B_ROW = SILU ? SS_KC * 8 : SS_KC * 2;
	static constexpr unsigned SLOT = W_BYTES + 8 * NT * B_ROW;
	static constexpr unsigned SCR = SS_CWARPS * NT * 32 * 16; /* partial tiles (float4) */
	static_assert(SLOT % 128 == 0, "tensor copies need 128-byte aligned slots");
	static_assert(!SILU || NT == 1, "the fused SiLU form has one batch tile");
};

/* Shared memory of a launch with nslot slots: the ring, the partial tiles, 2 mbarriers a slot. */
template <int NT, bool SILU> static size_t ss_smem(int nslot)
{
	typedef ss_shape<NT, SILU> S;
	return (size_t)nslot * S::SLOT + S::SCR + (size_t)16 * nslot;
}

/* This block's tiles [t0, t1) (sizes differ by at most one). */
__device__ __forceinline__ void ss_tiles(int tiles, int *t0, int *t1)
{
	*t0 = (int)((long long)tiles * blockIdx.x / gridDim.x);
	*t1 = (int)((long long)tiles * (blockIdx.x + 1) / gridDim.x);
}

/* The producer (one thread): item q = (tile t0 + q / nch, chunk q % nch) into slot q % nslot;
 * the weight boxes of the first ring before the grid-dependency wait, every batch box after. */
template <int NT, bool SILU>
__device__ void ss_produce(const CUtensorMap *tw, const CUtensorMap *ta, int K, int t0, int t1,
                           unsigned ring, unsigned full, unsigned empty, int nslot)
{
	typedef ss_shape<NT, SILU> S;
	const int nch = (K + SS_KC - 1) / SS_KC, items = (t1 - t0) * nch;
	const int pre = items < nslot ? items : nslot;
	const struct ds_bulk_hint wh = ds_bulk_evict_first(true);
	asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)tw) : "memory");
	asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)ta) : "memory");
	auto dst = [&](int q) { return ring + (unsigned)(q % nslot) * S::SLOT; };
	auto bar = [&](int q) { return full + 8 * (unsigned)(q % nslot); };
	auto weights = [&](int q) {
		ds_tma_2d(dst(q), tw, (q % nch) * SS_KC, 16 * (t0 + q / nch), bar(q), wh.on,
		          wh.pol);
	};
	auto acts = [&](int q) {
		if constexpr (SILU)
			ds_tma_3d(dst(q) + S::W_BYTES, ta, (q % nch) * SS_KC, 0, 0, bar(q));
		else
			ds_tma_2d(dst(q) + S::W_BYTES, ta, (q % nch) * SS_KC, 0, bar(q), false, 0);
	};
	for (int q = 0; q < pre; q++) {
		mbar_expect_tx(bar(q), S::SLOT);
		weights(q);
	}
	ds_grid_dep_wait(); /* A is the previous kernel's output */
	asm volatile("fence.proxy.async.global;\n" ::: "memory");
	for (int q = 0; q < pre; q++)
		acts(q);
	for (int q = pre; q < items; q++) {
		mbar_wait(empty + 8 * (unsigned)(q % nslot), ((unsigned)(q / nslot) & 1u) ^ 1u);
		mbar_expect_tx(bar(q), S::SLOT);
		weights(q);
		acts(q);
	}
}

/* The batch operand of chunk column col (the lane's 8 elements) of batch tile j from the slot. */
template <int NT, bool SILU>
__device__ __forceinline__ uint4 ss_operand(const unsigned char *bs, int j, int g, int col)
{
	typedef ss_shape<NT, SILU> S;
	if constexpr (SILU) {
		const float *gp = (const float *)(bs + g * S::B_ROW) + col;
		float4 g0 = *(const float4 *)gp, g1 = *(const float4 *)(gp + 4);
		float4 u0 = *(const float4 *)(gp + SS_KC), u1 = *(const float4 *)(gp + SS_KC + 4);
		float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
		float uv[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
		unsigned w[4];
#pragma unroll
		for (int i = 0; i < 4; i++)
			w[i] = (unsigned)ds_silu_mul_bf16(gv[2 * i], uv[2 * i]) |
			       (unsigned)ds_silu_mul_bf16(gv[2 * i + 1], uv[2 * i + 1]) << 16;
		return make_uint4(w[0], w[1], w[2], w[3]);
	} else {
		return *(const uint4 *)(bs + (8 * j + g) * S::B_ROW + col * 2);
	}
}

template <int NT, bool SILU>
__global__ void __launch_bounds__(SS_THREADS, 1)
    ss_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap ta,
              float *__restrict__ C, int M, int N, int K, int nslot)
{
	typedef ss_shape<NT, SILU> S;
	extern __shared__ __align__(1024) unsigned char ss_mem[];
	const unsigned ring = (unsigned)__cvta_generic_to_shared(ss_mem);
	const unsigned full = ring + (unsigned)nslot * S::SLOT + S::SCR, empty = full + 8 * nslot;
	float4 *scr = (float4 *)(ss_mem + (size_t)nslot * S::SLOT);
	int t0, t1;
	ss_tiles((N + 15) / 16, &t0, &t1);
	if (threadIdx.x == 0) {
		for (int s = 0; s < nslot; s++) {
			mbar_init(full + 8 * s, 1);
			mbar_init(empty + 8 * s, 1);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	__syncthreads();
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	if (warp == SS_CWARPS) {
		if (lane == 0)
			ss_produce<NT, SILU>(&tw, &ta, K, t0, t1, ring, full, empty, nslot);
		else
			ds_grid_dep_wait();
		return;
	}
	ds_grid_dep_wait(); /* C may still be read by the previous kernel */
	const int nch = (K + SS_KC - 1) / SS_KC;
	for (int T = t0; T < t1; T++) {
		float acc[NT][4];
#pragma unroll
		for (int j = 0; j < NT; j++)
			acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
		const int qb = (T - t0) * nch;
		for (int c = ((warp - qb) % SS_CWARPS + SS_CWARPS) % SS_CWARPS; c < nch;
		     c += SS_CWARPS) {
			const int q = qb + c, slot = q % nslot, k0 = c * SS_KC;
			mbar_wait(full + 8 * slot, (unsigned)(q / nslot) & 1u);
			const unsigned char *ws = ss_mem + (size_t)slot * S::SLOT;
			const unsigned char *bs = ws + S::W_BYTES;
#pragma unroll
			for (int ch = 0; ch < SS_KC / 32; ch++) {
				if (k0 + ch * 32 >= K) /* the box's zeros: nothing to add */
					break;
				const int col = ch * 32 + 8 * t;
				uint4 w0 = *(const uint4 *)(ws + g * S::W_ROW + col * 2);
				uint4 w1 = *(const uint4 *)(ws + (g + 8) * S::W_ROW + col * 2);
				const unsigned lo[4] = {w0.x, w1.x, w0.y, w1.y};
				const unsigned hi[4] = {w0.z, w1.z, w0.w, w1.w};
#pragma unroll
				for (int j = 0; j < NT; j++) {
					uint4 b = ss_operand<NT, SILU>(bs, j, g, col);
					mt_mma(acc[j], lo, b.x, b.y);
					mt_mma(acc[j], hi, b.z, b.w);
				}
			}
			__syncwarp();
			if (lane == 0)
				mbar_arrive(empty + 8 * slot);
		}
		/* the tile, summed over the warps in order; rows past N and columns past M are
		 * zeros and not stored */
#pragma unroll
		for (int j = 0; j < NT; j++)
			scr[(warp * NT + j) * 32 + lane] =
			    make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
		asm volatile("bar.sync 1, %0;\n" ::"n"(SS_CWARPS * 32) : "memory");
		const float *red = (const float *)scr;
		for (int e = threadIdx.x; e < NT * 128; e += SS_CWARPS * 32) {
			int rr = e & 15, cc = (e >> 4) & 7, j = e >> 7;
			int m = j * 8 + cc, n = 16 * T + rr;
			if (m >= M || n >= N)
				continue;
			int fl = (rr & 7) * 4 + (cc >> 1), fi = (rr >> 3) * 2 + (cc & 1);
			float s = 0.0f;
#pragma unroll
			for (int w = 0; w < SS_CWARPS; w++)
				s += red[((w * NT + j) * 32 + fl) * 4 + fi];
			C[(size_t)m * N + n] = s;
		}
		asm volatile("bar.sync 1, %0;\n" ::"n"(SS_CWARPS * 32) : "memory");
	}
}

/* The ring: as many slots as fit (deep) or 8 (so a block leaves room for a kernel beside it),
 * a multiple of the 8 consumer warps: item q - nslot, the slot's previous round, is then the
 * same warp's earlier item, so no warp waits on a slot a round ahead (parity aliasing). */
template <int NT, bool SILU> static int ss_nslot(int optin, bool deep)
{
	int n = 8;
	while (deep && n < 32 && ss_smem<NT, SILU>(n + 8) + 1024 <= (size_t)optin)
		n += 8;
	return ss_smem<NT, SILU>(n) + 1024 <= (size_t)optin ? n : 0;
}

template <int NT, bool SILU>
static cudaError_t ss_launch(const void *A, const uint16_t *W, float *C, int M, int N, int K,
                             bool deep, int pdl, cudaStream_t st)
{
	int dev = 0, optin = 0, sms = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	if (e != cudaSuccess)
		return e;
	int nslot = ss_nslot<NT, SILU>(optin, deep);
	if (nslot == 0)
		return cudaErrorInvalidValue;
	size_t smem = ss_smem<NT, SILU>(nslot);
	auto fn = ss_kernel<NT, SILU>;
	if ((e = ds_allow_smem(fn, smem)) != cudaSuccess)
		return e;
	/* W (N, K) in 16 x SS_KC boxes; A (M, K) in 8 NT x SS_KC boxes, or gu (M, 2, K) fp32 in
	 * 8 x 2 x SS_KC boxes */
	CUtensorMap tw, ta;
	cuuint64_t wd[2] = {(cuuint64_t)K, (cuuint64_t)N}, ws[1] = {(cuuint64_t)K * 2};
	cuuint32_t wb[2] = {SS_KC, 16};
	e = ds_tma_encode(&tw, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, W, wd, ws, wb,
	                  CU_TENSOR_MAP_SWIZZLE_NONE);
	if (e != cudaSuccess)
		return e;
	if (SILU) {
		cuuint64_t gd[3] = {(cuuint64_t)K, 2, (cuuint64_t)M};
		cuuint64_t gs[2] = {(cuuint64_t)K * 4, (cuuint64_t)K * 8};
		cuuint32_t gb[3] = {SS_KC, 2, 8};
		e = ds_tma_encode(&ta, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, A, gd, gs, gb,
		                  CU_TENSOR_MAP_SWIZZLE_NONE);
	} else {
		cuuint64_t ad[2] = {(cuuint64_t)K, (cuuint64_t)M}, as[1] = {(cuuint64_t)K * 2};
		cuuint32_t ab[2] = {SS_KC, 8 * NT};
		e = ds_tma_encode(&ta, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, A, ad, as, ab,
		                  CU_TENSOR_MAP_SWIZZLE_NONE);
	}
	if (e != cudaSuccess)
		return e;
	int tiles = (N + 15) / 16, nb = tiles < sms ? tiles : sms;
	return ds_launch_attrs(fn, dim3((unsigned)nb), dim3(SS_THREADS), smem, st, pdl, 1, 0, tw,
	                       ta, C, M, N, K, nslot);
}

extern "C" int ds_k_skinny_stream_describe(int M, bool deep, char *buf, size_t len)
{
	int nt = M <= 8 ? 1 : M <= 16 ? 2 : 4;
	int slices = (M + 8 * SS_MAX_NT - 1) / (8 * SS_MAX_NT);
	return snprintf(buf, len, "stream_n%d%s%s", 8 * nt, deep ? "_deep" : "_s8",
	                slices > 1 ? "_sliced" : "");
}

extern "C" cudaError_t ds_k_skinny_stream(const void *A, const uint16_t *W, float *C, int M, int N,
                                          int K, bool silu, bool deep, int pdl, cudaStream_t st)
{
	if (silu)
		return M <= 8 ? ss_launch<1, true>(A, W, C, M, N, K, deep, pdl, st)
		              : cudaErrorInvalidValue;
	/* batches over 32 rows: slices of 32 rows, each its own launch */
	for (int m0 = 0; m0 < M; m0 += 8 * SS_MAX_NT) {
		int m = M - m0 < 8 * SS_MAX_NT ? M - m0 : 8 * SS_MAX_NT;
		const uint16_t *a = (const uint16_t *)A + (size_t)m0 * K;
		float *c = C + (size_t)m0 * N;
		cudaError_t e = m <= 8    ? ss_launch<1, false>(a, W, c, m, N, K, deep, pdl, st)
		                : m <= 16 ? ss_launch<2, false>(a, W, c, m, N, K, deep, pdl, st)
		                          : ss_launch<4, false>(a, W, c, m, N, K, deep, pdl, st);
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}
