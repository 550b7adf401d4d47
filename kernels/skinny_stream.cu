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
 * producer thread copies them with TMA tensor copies into a ring of slots in shared memory, one
 * slot per 16 x 256 box (8 KB) of a tile. Up to 24 slots (192 KB) are in flight per SM, with no
 * register cost, and a slot is freed as soon as the one warp that reads it is done. The batch
 * operand (small, in L2) is read by the consumer warps themselves, an item's loads issued before
 * they wait for its weights. What the H200 showed (bench/results/gpu-20261130-8cd71d0-stream,
 * gpu-20261130-0215c2c-box): a bulk copy of a 512-byte row costs the SM's copy engine about
 * 70 ns, so row copies held the first version to 0.9 TB/s; with boxes, weights plus the batch
 * rows in the ring moved about 37 bytes/ns per SM in all (3.1 TB/s of weights), the rate at
 * which the fused decode kernel's ring also tops out, so only weights go through it. Boxes'
 * out-of-bounds elements (rows past N, columns past K) arrive as zeros.
 *
 * Under programmatic dependent launch the producer fills the whole ring with weights before
 * griddepcontrol.wait (weights are never written by the forward pass), so a GEMM after RMSNorm
 * or attention streams its first ring of weights while they run. Weight copies carry an L2
 * evict-first hint.
 *
 * Order: slot item q (tile q / nch, chunk q % nch) is read by consumer warp q % 8, which keeps
 * its own partial tile; at a tile's end the eight warps' partials are summed in warp order. The
 * sum order depends on K only, not on M, the data or timing: runs are bit-reproducible, and the
 * fused SiLU form (the batch operand built from the fp32 gate/up rows) gives the bits of
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
#define SS_WC 256                        /* columns a consumer warp reads of an item */
#define SS_MAX_NT 4                      /* batch tiles of 8 rows per launch */

/* A slot: the weight box, 16 rows of KC = WPS x SS_WC bf16, dense (rows g and g + 1 of a load
 * phase share banks: a 2-way conflict; the consumer warps have time to spare, the stream does
 * not), read by WPS warps, SS_WC columns each. Boxes wider than 256 bf16 columns view W as int64
 * elements (a box side is at most 256 elements). */
template <int NT, int WPS> struct ss_shape {
	static constexpr int KC = WPS * SS_WC;
	static constexpr unsigned WROW = KC * 2;
	static constexpr unsigned SLOT = 16 * WROW;
	static constexpr unsigned SCR = SS_CWARPS * NT * 32 * 16; /* partial tiles (float4) */
	static constexpr int GROUPS = SS_CWARPS / WPS;            /* warp groups */
	static_assert(SS_CWARPS % WPS == 0 && KC / 4 <= 256, "a box side is at most 256 elements");
};

/* Shared memory of a launch with nslot slots: the ring, the partial tiles, 2 mbarriers a slot. */
template <int NT, int WPS> static size_t ss_smem(int nslot)
{
	typedef ss_shape<NT, WPS> S;
	return (size_t)nslot * S::SLOT + S::SCR + (size_t)16 * nslot;
}

/* This block's tiles [t0, t1) (sizes differ by at most one). */
__device__ __forceinline__ void ss_tiles(int tiles, int *t0, int *t1)
{
	*t0 = (int)((long long)tiles * blockIdx.x / gridDim.x);
	*t1 = (int)((long long)tiles * (blockIdx.x + 1) / gridDim.x);
}

/* The producer (one thread): item q = (tile t0 + q / nch, chunk q % nch) into slot q % nslot,
 * the first ring before the grid-dependency wait. */
template <int NT, int WPS>
__device__ void ss_produce(const CUtensorMap *tw, int K, int t0, int t1, unsigned ring,
                           unsigned full, unsigned empty, int nslot)
{
	typedef ss_shape<NT, WPS> S;
	const int nch = (K + S::KC - 1) / S::KC, items = (t1 - t0) * nch;
	const int cu = WPS > 1 ? S::KC / 4 : S::KC; /* box columns in the map's elements */
	const struct ds_bulk_hint wh = ds_bulk_evict_first(true);
	asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)tw) : "memory");
	for (int q = 0; q < items; q++) {
		unsigned slot = (unsigned)(q % nslot), bar = full + 8 * slot;
		if (q == nslot)
			ds_grid_dep_wait(); /* lets the next kernel launch; nothing here reads A */
		if (q >= nslot)
			mbar_wait(empty + 8 * slot, ((unsigned)(q / nslot) & 1u) ^ 1u);
		mbar_expect_tx(bar, S::SLOT);
		ds_tma_2d(ring + slot * S::SLOT, tw, (q % nch) * cu, 16 * (t0 + q / nch), bar,
		          wh.on, wh.pol);
	}
	if (items <= nslot)
		ds_grid_dep_wait();
}

/* The batch operand of an item: lane (g, t)'s 8 elements of chunk ch for batch tile j, as bf16
 * pairs; zeros past M or K. From A (M, K) bf16, or with SILU bf16(silu(g) * u) of the fp32
 * gate/up rows gu (M, 2K), ds_silu_mul's arithmetic. */
template <int NT, bool SILU>
__device__ __forceinline__ void ss_load_b(const void *A, int M, int K, int k0, int g, int t,
                                          uint4 (&b)[SS_WC / 32][NT])
{
#pragma unroll
	for (int ch = 0; ch < SS_WC / 32; ch++)
#pragma unroll
		for (int j = 0; j < NT; j++) {
			int m = 8 * j + g, k = k0 + ch * 32 + 8 * t;
			b[ch][j] = make_uint4(0, 0, 0, 0);
			if (m >= M || k >= K)
				continue;
			if constexpr (SILU) {
				const float *gp = (const float *)A + (size_t)m * 2 * K + k;
				float4 g0 = __ldg((const float4 *)gp),
				       g1 = __ldg((const float4 *)gp + 1);
				float4 u0 = __ldg((const float4 *)(gp + K)),
				       u1 = __ldg((const float4 *)(gp + K) + 1);
				float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
				float uv[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
				unsigned w[4];
#pragma unroll
				for (int i = 0; i < 4; i++)
					w[i] =
					    (unsigned)ds_silu_mul_bf16(gv[2 * i], uv[2 * i]) |
					    (unsigned)ds_silu_mul_bf16(gv[2 * i + 1], uv[2 * i + 1])
					        << 16;
				b[ch][j] = make_uint4(w[0], w[1], w[2], w[3]);
			} else {
				b[ch][j] =
				    __ldg((const uint4 *)((const uint16_t *)A + (size_t)m * K + k));
			}
		}
}

template <int NT, bool SILU, int WPS>
__global__ void __launch_bounds__(SS_THREADS, 1)
    ss_kernel(const __grid_constant__ CUtensorMap tw, const void *__restrict__ A,
              float *__restrict__ C, int M, int N, int K, int nslot)
{
	typedef ss_shape<NT, WPS> S;
	extern __shared__ __align__(1024) unsigned char ss_mem[];
	const unsigned ring = (unsigned)__cvta_generic_to_shared(ss_mem);
	const unsigned full = ring + (unsigned)nslot * S::SLOT + S::SCR;
	const unsigned empty = full + 8 * nslot;
	float4 *scr = (float4 *)(ss_mem + (size_t)nslot * S::SLOT);
	int t0, t1;
	ss_tiles((N + 15) / 16, &t0, &t1);
	if (threadIdx.x == 0) {
		for (int s = 0; s < nslot; s++) {
			mbar_init(full + 8 * s, 1);
			mbar_init(empty + 8 * s, WPS);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	__syncthreads();
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	if (warp == SS_CWARPS) {
		if (lane == 0)
			ss_produce<NT, WPS>(&tw, K, t0, t1, ring, full, empty, nslot);
		else
			ds_grid_dep_wait();
		return;
	}
	ds_grid_dep_wait(); /* A is the previous kernel's output, C may still be read by it */
	/* items of group warp / WPS; this warp reads columns [sub, sub + SS_WC) of each */
	const int nch = (K + S::KC - 1) / S::KC, grp = warp / WPS, sub = (warp % WPS) * SS_WC;
	for (int T = t0; T < t1; T++) {
		float acc[NT][4];
#pragma unroll
		for (int j = 0; j < NT; j++)
			acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
		const int qb = (T - t0) * nch;
		/* with one batch tile, the next item's batch operand is loaded before this item's
		 * weights are waited for and read (its L2 latency off the item's path) */
		constexpr bool PRE = NT == 1;
		uint4 b[SS_WC / 32][NT], bn[PRE ? SS_WC / 32 : 1][NT];
		int c = ((grp - qb) % S::GROUPS + S::GROUPS) % S::GROUPS;
		if (PRE && c < nch)
			ss_load_b<NT, SILU>(A, M, K, c * S::KC + sub, g, t, b);
		for (; c < nch; c += S::GROUPS) {
			const int q = qb + c, slot = q % nslot, k0 = c * S::KC + sub;
			if constexpr (PRE) {
				if (c + S::GROUPS < nch)
					ss_load_b<NT, SILU>(A, M, K, k0 + S::GROUPS * S::KC, g, t,
					                    bn);
			} else {
				ss_load_b<NT, SILU>(A, M, K, k0, g, t, b);
			}
			mbar_wait(full + 8 * slot, (unsigned)(q / nslot) & 1u);
			const unsigned char *ws = ss_mem + (size_t)slot * S::SLOT + sub * 2;
#pragma unroll
			for (int ch = 0; ch < SS_WC / 32; ch++) {
				if (k0 + ch * 32 >= K) /* the box's zeros: nothing to add */
					break;
				const int col = ch * 32 + 8 * t;
				uint4 w0 = *(const uint4 *)(ws + g * S::WROW + col * 2);
				uint4 w1 = *(const uint4 *)(ws + (g + 8) * S::WROW + col * 2);
				const unsigned lo[4] = {w0.x, w1.x, w0.y, w1.y};
				const unsigned hi[4] = {w0.z, w1.z, w0.w, w1.w};
#pragma unroll
				for (int j = 0; j < NT; j++) {
					mt_mma(acc[j], lo, b[ch][j].x, b[ch][j].y);
					mt_mma(acc[j], hi, b[ch][j].z, b[ch][j].w);
				}
			}
			__syncwarp();
			if (lane == 0)
				mbar_arrive(empty + 8 * slot);
			if constexpr (PRE)
#pragma unroll
				for (int ch = 0; ch < SS_WC / 32; ch++)
					b[ch][0] = bn[ch][0];
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

/* The ring: as many slots as fit in 200 KB, a multiple of the warp groups: item q - nslot, the
 * slot's previous round, is then read by the same warps earlier, so no warp waits on a slot a
 * round ahead (parity aliasing). */
template <int NT, int WPS> static int ss_nslot(int optin)
{
	const int step = ss_shape<NT, WPS>::GROUPS;
	int n = 0;
	while (ss_smem<NT, WPS>(n + step) <= (size_t)200 * 1024 &&
	       ss_smem<NT, WPS>(n + step) + 1024 <= (size_t)optin)
		n += step;
	return n;
}

template <int NT, bool SILU, int WPS>
static cudaError_t ss_launch(const void *A, const uint16_t *W, float *C, int M, int N, int K,
                             int pdl, cudaStream_t st)
{
	typedef ss_shape<NT, WPS> S;
	int dev = 0, optin = 0, sms = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	if (e != cudaSuccess)
		return e;
	int nslot = ss_nslot<NT, WPS>(optin);
	if (nslot == 0)
		return cudaErrorInvalidValue;
	size_t smem = ss_smem<NT, WPS>(nslot);
	auto fn = ss_kernel<NT, SILU, WPS>;
	if ((e = ds_allow_smem(fn, smem)) != cudaSuccess)
		return e;
	/* W (N, K) in boxes of 16 rows x KC columns (as int64 elements of 4 columns when KC > 256:
	 * K % 8 == 0) */
	CUtensorMap tw;
	const int ew = WPS > 1 ? 4 : 1;
	cuuint64_t wd[2] = {(cuuint64_t)(K / ew), (cuuint64_t)N}, ws[1] = {(cuuint64_t)K * 2};
	cuuint32_t wb[2] = {(cuuint32_t)(S::KC / ew), 16};
	e = ds_tma_encode(
	    &tw, WPS > 1 ? CU_TENSOR_MAP_DATA_TYPE_INT64 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, W,
	    wd, ws, wb, CU_TENSOR_MAP_SWIZZLE_NONE);
	if (e != cudaSuccess)
		return e;
	int tiles = (N + 15) / 16, nb = tiles < sms ? tiles : sms;
	return ds_launch_attrs(fn, dim3((unsigned)nb), dim3(SS_THREADS), smem, st, pdl, 1, 0, tw, A,
	                       C, M, N, K, nslot);
}

/* The two variants: 1024-column boxes (32 KB, 4 warps each) and 512-column boxes (16 KB). */
static int ss_wps(bool deep)
{
	return deep ? 4 : 2;
}

extern "C" int ds_k_skinny_stream_describe(int M, bool deep, char *buf, size_t len)
{
	int nt = M <= 8 ? 1 : M <= 16 ? 2 : 4;
	int slices = (M + 8 * SS_MAX_NT - 1) / (8 * SS_MAX_NT);
	return snprintf(buf, len, "stream_n%d_k%d%s", 8 * nt, ss_wps(deep) * SS_WC,
	                slices > 1 ? "_sliced" : "");
}

template <int WPS>
static cudaError_t ss_dispatch(const void *A, const uint16_t *W, float *C, int M, int N, int K,
                               bool silu, int pdl, cudaStream_t st)
{
	if (silu)
		return M <= 8 ? ss_launch<1, true, WPS>(A, W, C, M, N, K, pdl, st)
		              : cudaErrorInvalidValue;
	/* batches over 32 rows: slices of 32 rows, each its own launch */
	for (int m0 = 0; m0 < M; m0 += 8 * SS_MAX_NT) {
		int m = M - m0 < 8 * SS_MAX_NT ? M - m0 : 8 * SS_MAX_NT;
		const uint16_t *a = (const uint16_t *)A + (size_t)m0 * K;
		float *c = C + (size_t)m0 * N;
		cudaError_t e = m <= 8    ? ss_launch<1, false, WPS>(a, W, c, m, N, K, pdl, st)
		                : m <= 16 ? ss_launch<2, false, WPS>(a, W, c, m, N, K, pdl, st)
		                          : ss_launch<4, false, WPS>(a, W, c, m, N, K, pdl, st);
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

extern "C" cudaError_t ds_k_skinny_stream(const void *A, const uint16_t *W, float *C, int M, int N,
                                          int K, bool silu, bool deep, int pdl, cudaStream_t st)
{
	return deep ? ss_dispatch<4>(A, W, C, M, N, K, silu, pdl, st)
	            : ss_dispatch<2>(A, W, C, M, N, K, silu, pdl, st);
}
