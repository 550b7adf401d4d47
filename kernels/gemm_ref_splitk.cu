/* gemm_ref_splitk.cu - the reference GEMM's fixed split-K variants: a thread-block cluster of S
 * CTAs (S = 2 or 4) computes one 128 x BN output tile (BN = 128; 256 at S = 2 for large M), each
 * CTA a contiguous range of the k-tiles, and the S fp32 partial tiles are combined through
 * distributed shared memory.
 *
 * Why: at M <= 128 a 128 x 128 tile gives N / 128 blocks, too few for the narrow weights
 * (qkv 48, o_proj and down_proj 32 on 132 SMs), so those GEMMs stream W at a fraction of the
 * card's bandwidth. Splitting K multiplies the blocks by S without giving up invariance.
 *
 * A CTA is the TMA kernel of gemm_ref_tma.cu cut to one tile and one k-range: one producer
 * thread (warp 8) issues the TMA loads of A and W k-tiles into STAGES mbarrier-pipelined
 * stages (6: one CTA per SM; 3: two per SM), two consumer warpgroups (warps 0..7, 64 rows
 * each) issue wgmma.m64nBNk16 on one fp32 accumulator. Then the CTA writes its partial tile
 * into its own shared memory (over the stages, all consumed), the cluster synchronizes, and
 * CTA rank r reduces rows [r * 128 / S, (r + 1) * 128 / S) of the tile: for each element,
 * ((p0 + p1) + p2) + p3 with explicit round-to-nearest fp32 adds, reading partial q from CTA
 * q's shared memory, and stores it. A second cluster barrier keeps
 * every CTA (and its shared memory) alive until the others have read it. No global partials.
 *
 * Invariance (why a row's bits cannot depend on M): the k-tile ranges are a function of K and
 * S only (KT = ceil(K / 64) k-tiles, per = ceil(KT / S), split s takes [s per, (s + 1) per)
 * clipped to KT, so the last splits get fewer, possibly none); S is fixed by the variant,
 * which the caller picks from the weight's (N, K). Each partial element is accumulated by one
 * thread over its range's K slices in order into one register; the combine order is fixed.
 * M only decides how many clusters there are and which tile each takes. */
#include <cooperative_groups.h>

#include "kernels.h"
#include "gemm_ref_common.cuh"

namespace cg = cooperative_groups;

#define SK_THREADS 288 /* 2 consumer warpgroups (warps 0..7), then 1 producer warp */
#define SK_A_BYTES (DS_GR_BM * DS_GR_BK * 2)

/* A 128 x BN tile with STAGES stages. BN = 128: STAGES 6 is one CTA per SM (~194 KB), 3 is two
 * per SM (~97 KB each), so clusters find room more easily and one CTA's epilogue overlaps the
 * other's loads; either way an SM keeps 96 KB of W in flight. BN = 256 with 4 stages (~194 KB,
 * one CTA per SM) is the large-M tile: m64n256k16 reads the least shared memory per product,
 * and at M = 2048 it makes a quarter of BN = 128's clusters, each with twice the work. */
template <int BN_, int STAGES_> struct sk_cfg {
	static constexpr int BN = BN_, STAGES = STAGES_;
	static constexpr int STAGE_BYTES = (DS_GR_BM + BN) * DS_GR_BK * 2;
	/* floats per partial-tile row; the pad spreads the banks */
	static constexpr int PART_LD = BN + 8;
	/* stages, then 2 * STAGES mbarriers, plus slack to align the base to 1024 */
	static constexpr size_t SMEM = (size_t)STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
	static constexpr int MIN_BLOCKS = SMEM <= 114 * 1024 ? 2 : 1;
	static_assert(BN == 128 || BN == 256, "an m64n128k16 or m64n256k16 tile");
	static_assert((size_t)DS_GR_BM * PART_LD * 4 <= (size_t)STAGES * STAGE_BYTES,
	              "the partial tile must fit in the pipeline stages");
};

/* k-tiles [*kb, *ke) of split s of S over K: a function of K and S only. */
__device__ __forceinline__ void sk_range(int K, int S, int s, int *kb, int *ke)
{
	int KT = (K + DS_GR_BK - 1) / DS_GR_BK, per = (KT + S - 1) / S;
	*kb = min(KT, s * per);
	*ke = min(KT, (s + 1) * per);
}

template <int S, typename cfg>
__global__ void __launch_bounds__(SK_THREADS, cfg::MIN_BLOCKS)
    gemm_ref_splitk_kernel(const __grid_constant__ CUtensorMap tmA,
                           const __grid_constant__ CUtensorMap tmW, float *__restrict__ C, int M,
                           int N, int K)
{
	constexpr int BN = cfg::BN, STAGES = cfg::STAGES, STAGE_BYTES = cfg::STAGE_BYTES;
	constexpr int PART_LD = cfg::PART_LD;
	extern __shared__ __align__(1024) unsigned char smem_raw[];
	unsigned raw = (unsigned)__cvta_generic_to_shared(smem_raw);
	unsigned base = (raw + 1023u) & ~1023u;
	/* (DS_GR_BM, PART_LD) fp32, over the stages once the main loop is done */
	float *part = (float *)(smem_raw + (base - raw));
	unsigned full = base + STAGES * STAGE_BYTES, empty = full + STAGES * 8;
	cg::cluster_group cluster = cg::this_cluster();
	int split = (int)cluster.block_rank(); /* == blockIdx.x % S */
	int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
	int tiles_m = (M + DS_GR_BM - 1) / DS_GR_BM, tiles_n = (N + BN - 1) / BN;
	int tm, tn;
	gr_tile((int)blockIdx.x / S, tiles_m, tiles_n, true, &tm, &tn);
	int m0 = tm * DS_GR_BM, n0 = tn * BN;
	int kb, ke;
	sk_range(K, S, split, &kb, &ke);

	if (tid == 256) {
		asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmA) : "memory");
		asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmW) : "memory");
		for (int s = 0; s < STAGES; s++) {
			mbar_init(full + 8 * s, 1);
			mbar_init(empty + 8 * s, 8); /* lane 0 of each of the 8 consumer warps */
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	__syncthreads();

	/* it counts this CTA's k-tiles: stage it % STAGES, barrier phase (it / STAGES) & 1.
	 * No setmaxnreg: the BN / 2 accumulators fit (154 registers a thread at BN = 256), and the
	 * producer warp runs the epilogue too. */
	float d[BN / 2];
#pragma unroll
	for (int i = 0; i < BN / 2; i++)
		d[i] = 0.0f;
	if (wg == 2) {
		if (tid == 256)
			for (int kt = kb, it = 0; kt < ke; kt++, it++) {
				int s = it % STAGES;
				mbar_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);
				unsigned sa = base + s * STAGE_BYTES;
				mbar_expect_tx(full + 8 * s, STAGE_BYTES);
				tma_load(sa, &tmA, kt * DS_GR_BK, m0, full + 8 * s);
				tma_load(sa + SK_A_BYTES, &tmW, kt * DS_GR_BK, n0, full + 8 * s);
			}
	} else { /* consumer warpgroup wg: rows wg*64 .. wg*64+63 of the tile */
		for (int kt = kb, it = 0; kt < ke; kt++, it++) {
			int s = it % STAGES;
			mbar_wait(full + 8 * s, (it / STAGES) & 1);
			unsigned sa = base + s * STAGE_BYTES + wg * 64 * 128;
			unsigned sb = base + s * STAGE_BYTES + SK_A_BYTES;
			asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
			for (int ks = 0; ks < DS_GR_BK / 16; ks++)
				gr_wgmma<BN>(d, gr_desc(sa + ks * 32), gr_desc(sb + ks * 32));
			asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
			/* the group of the previous k-tile is done: its stage may be refilled */
			asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
			if (it > 0 && lane == 0)
				mbar_arrive(empty + 8 * ((it - 1) % STAGES));
		}
		asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
	}
	/* Every TMA load was waited for and every wgmma has finished reading: the stages are
	 * free for the partial tile. */
	__syncthreads();
	if (wg < 2) {
		int row = wg * 64 + warp * 16 + (lane >> 2);
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			int col = i * 8 + 2 * (lane & 3);
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int r = row + h * 8;
				if (m0 + r < M) /* rows past M are never read */
					*(float2 *)(part + r * PART_LD + col) =
					    make_float2(d[4 * i + 2 * h], d[4 * i + 2 * h + 1]);
			}
		}
	}
	cluster.sync(); /* every CTA's partial is written (release / acquire) */

	const float *src[S];
#pragma unroll
	for (int q = 0; q < S; q++)
		src[q] = cluster.map_shared_rank(part, q);
	constexpr int ROWS = DS_GR_BM / S, VEC = BN / 4;
	bool vec = (N & 3) == 0 && ((uintptr_t)C & 15u) == 0;
	for (int idx = tid; idx < ROWS * VEC; idx += SK_THREADS) {
		int r = split * ROWS + idx / VEC, c = (idx % VEC) * 4;
		int gm = m0 + r, gn = n0 + c;
		if (gm >= M || gn >= N)
			continue;
		float4 acc = *(const float4 *)(src[0] + r * PART_LD + c);
#pragma unroll
		for (int q = 1; q < S; q++) {
			float4 v = *(const float4 *)(src[q] + r * PART_LD + c);
			acc.x = __fadd_rn(acc.x, v.x);
			acc.y = __fadd_rn(acc.y, v.y);
			acc.z = __fadd_rn(acc.z, v.z);
			acc.w = __fadd_rn(acc.w, v.w);
		}
		float *dst = C + (size_t)gm * N + gn;
		if (vec) { /* then gn + 3 < N and dst is 16-byte aligned */
			*(float4 *)dst = acc;
		} else {
			float a[4] = {acc.x, acc.y, acc.z, acc.w};
			for (int j = 0; j < 4 && gn + j < N; j++)
				dst[j] = a[j];
		}
	}
	cluster.sync(); /* no CTA leaves while another may still read its shared memory */
}

static cudaLaunchConfig_t sk_launch_config(int S, size_t smem, unsigned grid, cudaStream_t st,
                                           cudaLaunchAttribute *attr)
{
	cudaLaunchConfig_t cfg = {};
	attr->id = cudaLaunchAttributeClusterDimension;
	attr->val.clusterDim.x = (unsigned)S;
	attr->val.clusterDim.y = 1;
	attr->val.clusterDim.z = 1;
	cfg.gridDim = dim3(grid);
	cfg.blockDim = dim3(SK_THREADS);
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	return cfg;
}

/* Calls f with sk_split<S, cfg> for one of the built (S, BN, STAGES); cudaErrorInvalidValue for
 * any other. */
template <int S_, typename cfg_> struct sk_split {
	static constexpr int S = S_;
	typedef cfg_ cfg;
};

template <typename F> static cudaError_t sk_dispatch(int S, int bn, int stages, F f)
{
	if (bn == 128 && stages == 6)
		return S == 4 ? f(sk_split<4, sk_cfg<128, 6>>()) : f(sk_split<2, sk_cfg<128, 6>>());
	if (bn == 128 && stages == 3)
		return S == 4 ? f(sk_split<4, sk_cfg<128, 3>>()) : f(sk_split<2, sk_cfg<128, 3>>());
	if (bn == 256 && stages == 4 && S == 2)
		return f(sk_split<2, sk_cfg<256, 4>>());
	return cudaErrorInvalidValue;
}

template <int S, typename cfg>
static cudaError_t splitk_launch(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                 int K, cudaStream_t st)
{
	CUtensorMap ta, tw;
	cudaError_t e = gr_tma_maps(A, W, M, N, K, cfg::BN, &ta, &tw);
	if (e != cudaSuccess)
		return e;
	unsigned tiles =
	    (unsigned)((M + DS_GR_BM - 1) / DS_GR_BM) * (unsigned)((N + cfg::BN - 1) / cfg::BN);
	cudaLaunchAttribute attr;
	cudaLaunchConfig_t lc = sk_launch_config(S, cfg::SMEM, tiles * S, st, &attr);
	e = cudaLaunchKernelEx(&lc, gemm_ref_splitk_kernel<S, cfg>, ta, tw, C, M, N, K);
	if (e != cudaSuccess)
		return e;
	return cudaGetLastError();
}

/* Called by ds_k_gemm_ref_variant (gemm_ref.cu), which has checked M, N > 0 and K % 8 == 0;
 * (S, bn, stages) is one of sk_dispatch's. */
cudaError_t ds_gemm_ref_splitk_launch(int S, int bn, int stages, const uint16_t *A,
                                      const uint16_t *W, float *C, int M, int N, int K,
                                      cudaStream_t st)
{
	return sk_dispatch(S, bn, stages, [&](auto x) {
		return splitk_launch<decltype(x)::S, typename decltype(x)::cfg>(A, W, C, M, N, K,
		                                                                st);
	});
}

/* Raises the shared-memory limit of one configuration. */
cudaError_t ds_gemm_ref_splitk_setup(int S, int bn, int stages)
{
	return sk_dispatch(S, bn, stages, [](auto x) {
		typedef typename decltype(x)::cfg cfg;
		return cudaFuncSetAttribute(gemm_ref_splitk_kernel<decltype(x)::S, cfg>,
		                            cudaFuncAttributeMaxDynamicSharedMemorySize,
		                            (int)cfg::SMEM);
	});
}

/* CTAs resident at once on the current device: active clusters x S (bench diagnostics; the
 * S CTAs of a cluster must fit in one GPC). */
cudaError_t ds_gemm_ref_splitk_resident(int S, int bn, int stages, int *ctas)
{
	int n = 0;
	cudaError_t e = sk_dispatch(S, bn, stages, [&](auto x) {
		typedef typename decltype(x)::cfg cfg;
		cudaLaunchAttribute attr;
		cudaLaunchConfig_t lc = sk_launch_config(x.S, cfg::SMEM, x.S * 1024, 0, &attr);
		return cudaOccupancyMaxActiveClusters(
		    &n, gemm_ref_splitk_kernel<decltype(x)::S, cfg>, &lc);
	});
	*ctas = n * S;
	return e;
}
