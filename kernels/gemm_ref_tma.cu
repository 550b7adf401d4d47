/* gemm_ref_tma.cu - the reference GEMM's TMA variants: warp-specialized, mbarrier-pipelined
 * wgmma kernels with a BM x BN tile, BK = 64, templated on (BM, BN, STAGES): BM = 128 (two
 * consumer warpgroups) with BN = 256 (4 stages) or 128 (6 stages), one block per SM; BM = 64
 * (one consumer warpgroup) with BN = 128 (4 stages) or 64 (6 stages), two blocks per SM; and
 * BM = 64 with deep pipelines for one block per SM (BN = 64: 14 stages, BN = 128: 9); and
 * BM = 128 with BN = 224 (4 stages, one block per SM), whose tile counts divide into waves of
 * 132 SMs better on the gate/up weights (N = 28672: 128 n-tiles, so 256 tiles at M = 256 are
 * 1.94 waves where BN = 256's 224 tiles are 1.70 and BN = 128's 448 are 3.39); and BM = 64 with
 * BN = 192 (6 stages, one block per SM), whose 32 n-tiles on the q/k/v weights (N = 6144) make
 * 128 tiles at M = 256, one wave, where BN = 128 makes 192.
 *
 * Layout of a block (128 (1 + BM / 64) threads): warpgroup 0 is the producer (one thread
 * issues the TMA loads of A and W tiles into 128-byte-swizzled stages, after waiting for the
 * stage's "empty" barrier; at BM = 128 the warpgroup gives registers back with setmaxnreg);
 * warpgroups 1.. are the consumers, each owning 64 rows of the tile: wait for the stage's
 * "full" barrier, issue BK/16 wgmma.m64nBNk16 on one fp32 accumulator, keep one wgmma group in
 * flight and release the previous stage. A block walks tiles blockIdx.x, + gridDim.x, ...
 * (grouped raster): one block per tile, or as many blocks as fit at once (persistent: the
 * producer fills the next tile's stages while the consumers store this one). The tensor maps
 * are encoded on the host per launch (they carry the pointers and M), through the runtime's
 * driver entry point, as __grid_constant__.
 *
 * Why BM = 64: at M <= 256 a 128-row tile leaves most SMs idle on the narrow weights (o_proj
 * and down_proj: N / 128 = 32 tiles per 128 rows on 132 SMs). Halving BM doubles the tiles at
 * M = 65..256 and BN = 64 doubles them again at every M, without changing how an element is
 * computed. At M <= 64 the GEMM streams W, and the bytes of W in flight over the whole card
 * (resident blocks x stages x BN x 128) bound its rate: hence the deep one-per-SM configs.
 *
 * Invariance (why a row's bits cannot depend on M, and why every variant here is meant to
 * give variant 0's bytes): no split-K; each output element belongs to one consumer thread
 * which accumulates K slices 0, 16, 32, ... in issue order into one register with a
 * wgmma.m64nBNk16 on the same 64-row operand slice (wgmma groups on the same accumulator are
 * ordered). TMA zero-fills rows past M and columns past K, and zero products leave other rows
 * alone. M and BM only set the number of tiles and the raster order (which tile a block
 * takes). BN = 64 issues m64n64k16 where variant 0 issues m64n128k16: equal bits there are
 * what the device self-check (refpath/cuda_ref.c) and the gpu tests establish. */
#include <cuda.h>

#include "kernels.h"
#include "gemm_ref_common.cuh"

#define TMA_SMEM_PER_SM (228 * 1024) /* sm_90: shared memory per SM, 1 KB of it per block */
#define TMA_SMEM_PER_BLOCK (227 * 1024)

/* One tile configuration: BM x BN, STAGES stages. */
template <int BM_, int BN_, int STAGES_> struct tma_cfg {
	static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_;
	static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups");
	static constexpr int CONSUMERS = BM / 64;             /* consumer warpgroups */
	static constexpr int THREADS = 128 * (1 + CONSUMERS); /* + the producer warpgroup */
	static constexpr int A_BYTES = BM * DS_GR_BK * 2;
	static constexpr int STAGE_BYTES = (BM + BN) * DS_GR_BK * 2;
	/* stages, then 2 * STAGES mbarriers, plus slack to align the base to 1024 */
	static constexpr size_t SMEM = (size_t)STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
	static_assert(SMEM <= TMA_SMEM_PER_BLOCK, "the stages do not fit in a block");
	/* BM = 64 with stages that leave room for two blocks per SM: compiled for two (at most
	 * 128 registers a thread); else one */
	static constexpr int MIN_BLOCKS = BM == 64 && 2 * (SMEM + 1024) <= TMA_SMEM_PER_SM ? 2 : 1;
};

/* The configurations built (the variants of gemm_ref.cu use these), in one list. */
template <typename... C> struct tma_cfg_list {
};
using tma_cfgs = tma_cfg_list<tma_cfg<128, 256, 4>, tma_cfg<128, 128, 6>, tma_cfg<64, 128, 4>,
                              tma_cfg<64, 128, 9>, tma_cfg<64, 64, 6>, tma_cfg<64, 64, 14>,
                              tma_cfg<128, 224, 4>, tma_cfg<64, 192, 6>>;

/* f(cfg) for the configuration of tma_cfgs that is (bm, bn, stages), cudaErrorInvalidValue
 * for any other. */
template <typename F, typename... C>
static cudaError_t tma_dispatch_in(tma_cfg_list<C...>, int bm, int bn, int stages, F f)
{
	cudaError_t e = cudaErrorInvalidValue;
	(void)((bm == C::BM && bn == C::BN && stages == C::STAGES && (e = f(C()), true)) || ...);
	return e;
}

template <typename F> static cudaError_t tma_dispatch(int bm, int bn, int stages, F f)
{
	return tma_dispatch_in(tma_cfgs(), bm, bn, stages, f);
}

/* SILU: W is (N = 2F, K) = [gate; up], its map has boxes of BN / 2 rows, a stage's W tile is
 * BN / 2 gate rows then the matching up rows (two loads), and C is H (M, F) bf16 (the fused
 * epilogue, gemm_ref_common.cuh); else C is (M, N) fp32. */
template <typename cfg, bool SILU>
__global__ void __launch_bounds__(cfg::THREADS, cfg::MIN_BLOCKS)
    gemm_ref_tma_kernel(const __grid_constant__ CUtensorMap tmA,
                        const __grid_constant__ CUtensorMap tmW, void *__restrict__ C, int M, int N,
                        int K)
{
	constexpr int BM = cfg::BM, BN = cfg::BN, STAGES = cfg::STAGES;
	extern __shared__ __align__(1024) unsigned char smem_raw[];
	unsigned base = (unsigned)__cvta_generic_to_shared(smem_raw);
	base = (base + 1023u) & ~1023u;
	unsigned full = base + STAGES * cfg::STAGE_BYTES, empty = full + STAGES * 8;
	int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
	int tiles_m = (M + BM - 1) / BM, tiles_n = gr_tiles_n<BN, SILU>(N);
	int tiles = tiles_m * tiles_n;
	int KT = (K + DS_GR_BK - 1) / DS_GR_BK;

	if (tid == 0) {
		asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmA) : "memory");
		asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmW) : "memory");
		for (int s = 0; s < STAGES; s++) {
			mbar_init(full + 8 * s, 1);
			/* lane 0 of each consumer warp */
			mbar_init(empty + 8 * s, 4 * cfg::CONSUMERS);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	__syncthreads();

	/* it counts k-tiles over all of this block's tiles: stage it % STAGES, and the barriers'
	 * phase parity (it / STAGES) & 1. Both roles walk the same tiles in the same order. */
	if (wg == 0) {
		if constexpr (BM == 128)
			asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
		if (tid == 0) {
			int it = 0;
			for (int t = (int)blockIdx.x; t < tiles; t += (int)gridDim.x) {
				int tm, tn;
				gr_tile(t, tiles_m, tiles_n, true, &tm, &tn);
				for (int kt = 0; kt < KT; kt++, it++) {
					int s = it % STAGES;
					mbar_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);
					unsigned sa = base + s * cfg::STAGE_BYTES;
					mbar_expect_tx(full + 8 * s, cfg::STAGE_BYTES);
					tma_load(sa, &tmA, kt * DS_GR_BK, tm * BM, full + 8 * s);
					if constexpr (SILU) { /* gate rows, then the up rows */
						int j0 = tn * (BN / 2);
						tma_load(sa + cfg::A_BYTES, &tmW, kt * DS_GR_BK, j0,
						         full + 8 * s);
						tma_load(sa + cfg::A_BYTES + (BN / 2) * 128, &tmW,
						         kt * DS_GR_BK, N / 2 + j0, full + 8 * s);
					} else {
						tma_load(sa + cfg::A_BYTES, &tmW, kt * DS_GR_BK,
						         tn * BN, full + 8 * s);
					}
				}
			}
		}
		return;
	}

	if constexpr (BM == 128)
		asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
	int cw = wg - 1; /* consumer warpgroup: rows cw*64 .. cw*64+63 of the tile */
	int it = 0;
	for (int t = (int)blockIdx.x; t < tiles; t += (int)gridDim.x) {
		int tm, tn;
		gr_tile(t, tiles_m, tiles_n, true, &tm, &tn);
		float d[BN / 2];
#pragma unroll
		for (int i = 0; i < BN / 2; i++)
			d[i] = 0.0f;
		for (int kt = 0; kt < KT; kt++, it++) {
			int s = it % STAGES;
			mbar_wait(full + 8 * s, (it / STAGES) & 1);
			unsigned sa = base + s * cfg::STAGE_BYTES + cw * 64 * 128;
			unsigned sb = base + s * cfg::STAGE_BYTES + cfg::A_BYTES;
			asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
			for (int ks = 0; ks < DS_GR_BK / 16; ks++)
				gr_wgmma<BN>(d, gr_desc(sa + ks * 32), gr_desc(sb + ks * 32));
			asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
			/* the group of the previous k-tile is done: its stage may be refilled */
			asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
			if (kt > 0 && lane == 0)
				mbar_arrive(empty + 8 * ((it - 1) % STAGES));
		}
		asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
		if (lane == 0)
			mbar_arrive(empty + 8 * ((it - 1) % STAGES));
		/* the producer is already filling the next tile's stages while this one stores */
		if constexpr (SILU)
			gr_store_silu<BN>(d, (uint16_t *)C, M, N / 2, tm * BM + cw * 64,
			                  tn * (BN / 2), warp, lane);
		else
			gr_store<BN>(d, (float *)C, M, N, tm * BM + cw * 64, tn * BN, warp, lane);
	}
}

typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                              const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                              const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* A 2D map over a (rows, K) bf16 row-major matrix, boxes of (box_rows, 64), 128B swizzle;
 * out-of-bounds elements read as zero. */
static cudaError_t make_map(encode_fn enc, CUtensorMap *tm, const uint16_t *p, int rows, int K,
                            int box_rows)
{
	cuuint64_t gdim[2] = {(cuuint64_t)K, (cuuint64_t)rows};
	cuuint64_t gstride[1] = {(cuuint64_t)K * 2};
	cuuint32_t box[2] = {DS_GR_BK, (cuuint32_t)box_rows};
	cuuint32_t estride[2] = {1, 1};
	CUresult r = enc(tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, gdim, gstride, box,
	                 estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
	                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* Declared in gemm_ref_common.cuh. M, N > 0 and K % 8 == 0 were checked by the caller (the
 * map needs 16-byte row strides); A and W must be 16-byte aligned. */
cudaError_t gr_tma_maps_bm(const uint16_t *A, const uint16_t *W, int M, int N, int K, int bm,
                           int bn, CUtensorMap *ta, CUtensorMap *tw)
{
	if (((uintptr_t)A | (uintptr_t)W) & 15u)
		return cudaErrorInvalidValue;
	void *fn = NULL;
	cudaDriverEntryPointQueryResult q;
	cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
	                                                 cudaEnableDefault, &q);
	if (e != cudaSuccess)
		return e;
	if (q != cudaDriverEntryPointSuccess || !fn)
		return cudaErrorNotSupported;
	e = make_map((encode_fn)fn, ta, A, M, K, bm);
	if (e == cudaSuccess)
		e = make_map((encode_fn)fn, tw, W, N, K, bn);
	return e;
}

cudaError_t gr_tma_maps(const uint16_t *A, const uint16_t *W, int M, int N, int K, int bn,
                        CUtensorMap *ta, CUtensorMap *tw)
{
	return gr_tma_maps_bm(A, W, M, N, K, DS_GR_BM, bn, ta, tw);
}

template <typename cfg, bool SILU>
static cudaError_t tma_launch(bool persistent, const uint16_t *A, const uint16_t *W, void *C, int M,
                              int N, int K, cudaStream_t st)
{
	CUtensorMap ta, tw;
	cudaError_t e =
	    gr_tma_maps_bm(A, W, M, N, K, cfg::BM, SILU ? cfg::BN / 2 : cfg::BN, &ta, &tw);
	if (e != cudaSuccess)
		return e;
	unsigned tiles =
	    (unsigned)((M + cfg::BM - 1) / cfg::BM) * (unsigned)gr_tiles_n<cfg::BN, SILU>(N);
	unsigned grid = tiles;
	if (persistent) { /* the blocks that fit at once by design: MIN_BLOCKS per SM */
		int dev, sms;
		if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
		    (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) !=
		        cudaSuccess)
			return e;
		unsigned cap = (unsigned)sms * (unsigned)cfg::MIN_BLOCKS;
		if (cap < grid)
			grid = cap;
	}
	gemm_ref_tma_kernel<cfg, SILU><<<grid, cfg::THREADS, cfg::SMEM, st>>>(ta, tw, C, M, N, K);
	return cudaGetLastError();
}

/* Called by ds_k_gemm_ref_variant (gemm_ref.cu), which has checked M, N > 0 and K % 8 == 0;
 * (bm, bn, stages) is one of tma_dispatch's. persistent: as many blocks as fit at once by
 * design walk the tiles (the next tile's loads overlap this tile's stores), else one block
 * per tile. The same tile is computed the same way either way. */
cudaError_t ds_gemm_ref_tma_launch(int bm, int bn, int stages, bool persistent, bool silu,
                                   const uint16_t *A, const uint16_t *W, void *C, int M, int N,
                                   int K, cudaStream_t st)
{
	return tma_dispatch(bm, bn, stages, [&](auto c) {
		return silu ? tma_launch<decltype(c), true>(persistent, A, W, C, M, N, K, st)
		            : tma_launch<decltype(c), false>(persistent, A, W, C, M, N, K, st);
	});
}

/* Raises the shared-memory limit of one configuration. */
cudaError_t ds_gemm_ref_tma_setup(int bm, int bn, int stages)
{
	return tma_dispatch(bm, bn, stages, [](auto c) {
		cudaError_t e = cudaFuncSetAttribute(gemm_ref_tma_kernel<decltype(c), false>,
		                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                     (int)decltype(c)::SMEM);
		if (e != cudaSuccess)
			return e;
		return cudaFuncSetAttribute(gemm_ref_tma_kernel<decltype(c), true>,
		                            cudaFuncAttributeMaxDynamicSharedMemorySize,
		                            (int)decltype(c)::SMEM);
	});
}

/* Blocks of one configuration resident at once on device dev (from the occupancy query; bench
 * diagnostics and the tests). */
cudaError_t ds_gemm_ref_tma_resident(int bm, int bn, int stages, int dev, int *ctas)
{
	int per_sm = 0, sms = 0;
	*ctas = 0;
	cudaError_t e = tma_dispatch(bm, bn, stages, [&](auto c) {
		return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
		    &per_sm, gemm_ref_tma_kernel<decltype(c), false>, decltype(c)::THREADS,
		    decltype(c)::SMEM);
	});
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	*ctas = per_sm * sms;
	return e;
}
