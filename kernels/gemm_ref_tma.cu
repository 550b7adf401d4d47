/* gemm_ref_tma.cu - the reference GEMM's TMA variants: warp-specialized, mbarrier-pipelined
 * wgmma kernels (128 x BN tile, BN = 256 with 4 stages or 128 with 6, BK = 64).
 *
 * Layout of a block (384 threads): warpgroup 0 is the producer (one thread issues the TMA
 * loads of A and W tiles into 128-byte-swizzled stages, after waiting for the stage's "empty"
 * barrier; the warpgroup gives registers back with setmaxnreg); warpgroups 1 and 2 are the
 * consumers, each owning 64 rows of the tile: wait for the stage's "full" barrier, issue
 * BK/16 wgmma.m64nBNk16 on one fp32 accumulator, keep one wgmma group in flight and release
 * the previous stage. A block walks tiles blockIdx.x, + gridDim.x, ... (grouped raster): one
 * block per tile, or one per SM (persistent: the producer fills the next tile's stages while
 * the consumers store this one). The tensor maps are encoded on the host per launch (they
 * carry the pointers and M), through the runtime's driver entry point, as __grid_constant__.
 *
 * Invariance (why a row's bits cannot depend on M): no split-K; each output element belongs
 * to one consumer thread which accumulates K slices 0, 16, 32, ... in issue order into one
 * register (wgmma groups on the same accumulator are ordered). TMA zero-fills rows past M and
 * columns past K, and zero products leave other rows alone. M only sets the number of tiles and
 * the raster order (which tile a block takes). */
#include <cuda.h>

#include "kernels.h"
#include "gemm_ref_common.cuh"

#define TMA_THREADS 384

template <int BN> struct tma_cfg {
	static constexpr int STAGES = BN == 256 ? 4 : 6;
	static constexpr int A_BYTES = DS_GR_BM * DS_GR_BK * 2;
	static constexpr int STAGE_BYTES = (DS_GR_BM + BN) * DS_GR_BK * 2;
	/* stages, then 2 * STAGES mbarriers, plus slack to align the base to 1024 */
	static constexpr size_t SMEM = (size_t)STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
};

template <int BN>
__global__ void __launch_bounds__(TMA_THREADS, 1)
    gemm_ref_tma_kernel(const __grid_constant__ CUtensorMap tmA,
                        const __grid_constant__ CUtensorMap tmW, float *__restrict__ C, int M,
                        int N, int K)
{
	typedef tma_cfg<BN> cfg;
	constexpr int STAGES = cfg::STAGES;
	extern __shared__ __align__(1024) unsigned char smem_raw[];
	unsigned base = (unsigned)__cvta_generic_to_shared(smem_raw);
	base = (base + 1023u) & ~1023u;
	unsigned full = base + STAGES * cfg::STAGE_BYTES, empty = full + STAGES * 8;
	int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
	int tiles_m = (M + DS_GR_BM - 1) / DS_GR_BM, tiles_n = (N + BN - 1) / BN;
	int tiles = tiles_m * tiles_n;
	int KT = (K + DS_GR_BK - 1) / DS_GR_BK;

	if (tid == 0) {
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

	/* it counts k-tiles over all of this block's tiles: stage it % STAGES, and the barriers'
	 * phase parity (it / STAGES) & 1. Both roles walk the same tiles in the same order. */
	if (wg == 0) {
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
					tma_load(sa, &tmA, kt * DS_GR_BK, tm * DS_GR_BM,
					         full + 8 * s);
					tma_load(sa + cfg::A_BYTES, &tmW, kt * DS_GR_BK, tn * BN,
					         full + 8 * s);
				}
			}
		}
		return;
	}

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
		gr_store<BN>(d, C, M, N, tm * DS_GR_BM + cw * 64, tn * BN, warp, lane);
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
cudaError_t gr_tma_maps(const uint16_t *A, const uint16_t *W, int M, int N, int K, int bn,
                        CUtensorMap *ta, CUtensorMap *tw)
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
	e = make_map((encode_fn)fn, ta, A, M, K, DS_GR_BM);
	if (e == cudaSuccess)
		e = make_map((encode_fn)fn, tw, W, N, K, bn);
	return e;
}

template <int BN>
static cudaError_t tma_launch(bool persistent, const uint16_t *A, const uint16_t *W, float *C,
                              int M, int N, int K, cudaStream_t st)
{
	CUtensorMap ta, tw;
	cudaError_t e = gr_tma_maps(A, W, M, N, K, BN, &ta, &tw);
	if (e != cudaSuccess)
		return e;
	unsigned tiles = (unsigned)((M + DS_GR_BM - 1) / DS_GR_BM) * (unsigned)((N + BN - 1) / BN);
	unsigned grid = tiles;
	if (persistent) {
		int dev, sms;
		if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
		    (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) !=
		        cudaSuccess)
			return e;
		if ((unsigned)sms < grid)
			grid = (unsigned)sms;
	}
	gemm_ref_tma_kernel<BN><<<grid, TMA_THREADS, tma_cfg<BN>::SMEM, st>>>(ta, tw, C, M, N, K);
	return cudaGetLastError();
}

/* Called by ds_k_gemm_ref_variant (gemm_ref.cu), which has checked M, N > 0 and K % 8 == 0.
 * persistent: one block per SM walking the tiles (the next tile's loads overlap this tile's
 * stores), else one block per tile. The same tile is computed the same way either way. */
cudaError_t ds_gemm_ref_tma_launch(int bn, bool persistent, const uint16_t *A, const uint16_t *W,
                                   float *C, int M, int N, int K, cudaStream_t st)
{
	if (bn == 256)
		return tma_launch<256>(persistent, A, W, C, M, N, K, st);
	return tma_launch<128>(persistent, A, W, C, M, N, K, st);
}

cudaError_t ds_gemm_ref_tma_setup(void)
{
	cudaError_t e = cudaFuncSetAttribute(gemm_ref_tma_kernel<256>,
	                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
	                                     (int)tma_cfg<256>::SMEM);
	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(gemm_ref_tma_kernel<128>,
		                         cudaFuncAttributeMaxDynamicSharedMemorySize,
		                         (int)tma_cfg<128>::SMEM);
	return e;
}

/* CTAs of the variant resident at once on device dev (bench diagnostics). */
cudaError_t ds_gemm_ref_tma_resident(int bn, int dev, int *ctas)
{
	int per_sm = 0, sms = 0;
	cudaError_t e =
	    bn == 256
	        ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemm_ref_tma_kernel<256>,
	                                                        TMA_THREADS, tma_cfg<256>::SMEM)
	        : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemm_ref_tma_kernel<128>,
	                                                        TMA_THREADS, tma_cfg<128>::SMEM);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	*ctas = per_sm * sms;
	return e;
}
