/* gemm_ref.cu - the reference path's batch-invariant bf16 GEMM on Hopper tensor cores (wgmma):
 * the cp.async variants and the variant dispatch (ds_k_gemm_ref_variant).
 *
 * C (M, N) fp32 = A (M, K) . W (N, K)^T. A cp.async variant is a BM=128 x BN block tile,
 * BK = 64, a STAGES-deep cp.async pipeline into 128-byte-swizzled shared memory, and two
 * warpgroups each issuing wgmma.m64nBNk16 (bf16 in, fp32 accumulate) on its 64 rows. Variant 0
 * (128x128, 3 stages, row-major raster) is the original kernel, unchanged. The TMA variants
 * (3..6 and 17..18 with 128-row tiles, 11..16 and 19 with 64-row tiles) live in gemm_ref_tma.cu.
 *
 * Why a row's bits cannot depend on M, in variants 0..6 and 11..19: there is no split-K and no
 * choice made from M. Each output element is owned by exactly one thread of one block, which
 * accumulates its K slices 0, 16, 32, ... in order into the same fp32 register (wgmma groups
 * on one accumulator execute in issue order), reading only its row of A and its row of W;
 * rows past M and columns past N are zero-filled operands, whose products do not touch other
 * rows. M only decides how many tiles exist and which tile a block takes (the raster order),
 * never how a tile is computed. Variants 7..10 and 20 (gemm_ref_splitk.cu) split K in a fixed way
 * (S = 2 or 4 CTAs of a cluster, k-ranges from K and S only, partials combined in rank
 * order), which keeps the same property. The variant is chosen by the caller from (N, K) only
 * (refpath/cuda_ref.c), which is fixed per weight matrix. */
#include "kernels.h"
#include "gemm_ref_common.cuh"

#define THREADS 256

template <int BN, int STAGES> struct cp_cfg {
	static constexpr int A_BYTES = DS_GR_BM * DS_GR_BK * 2;
	static constexpr int STAGE_BYTES = (DS_GR_BM + BN) * DS_GR_BK * 2;
	static constexpr size_t SMEM = (size_t)STAGES * STAGE_BYTES + 1024;
	static constexpr int MIN_BLOCKS = BN == 128 && STAGES <= 3 ? 2 : 1;
};

/* SILU: W is (N = 2F, K) = [gate; up] and C is H (M, F) bf16 = silu(gate) * up (the fused
 * epilogue, gemm_ref_common.cuh); else C is (M, N) fp32. */
template <int BN, int STAGES, bool GROUPED, bool SILU>
__global__ void __launch_bounds__(THREADS, (cp_cfg<BN, STAGES>::MIN_BLOCKS))
    gemm_ref_cp_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ W,
                       void *__restrict__ C, int M, int N, int K)
{
	typedef cp_cfg<BN, STAGES> cfg;
	extern __shared__ __align__(1024) unsigned char smem_raw[];
	unsigned base = (unsigned)__cvta_generic_to_shared(smem_raw);
	base = (base + 1023u) & ~1023u;
	int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
	int tm, tn;
	if (GROUPED)
		gr_tile((int)blockIdx.x, (M + DS_GR_BM - 1) / DS_GR_BM, gr_tiles_n<BN, SILU>(N),
		        true, &tm, &tn);
	else
		tm = (int)blockIdx.y, tn = (int)blockIdx.x;
	int m0 = tm * DS_GR_BM, n0 = tn * BN;
	int KT = (K + DS_GR_BK - 1) / DS_GR_BK;

	float d[BN / 2];
#pragma unroll
	for (int i = 0; i < BN / 2; i++)
		d[i] = 0.0f;

	auto load_stage = [&](int stage, int kt) {
		unsigned sa = base + stage * cfg::STAGE_BYTES, sb = sa + cfg::A_BYTES;
		int k0 = kt * DS_GR_BK;
#pragma unroll
		for (int i = 0; i < DS_GR_BM * 8 / THREADS; i++) {
			int c = tid + i * THREADS;
			int row = c >> 3, ch = c & 7;
			int col = k0 + ch * 8;
			int gr = m0 + row;
			bool ok = gr < M && col < K;
			gr_cp_async16(sa + gr_swz(row, ch), ok ? A + (size_t)gr * K + col : A, ok);
		}
#pragma unroll
		for (int i = 0; i < BN * 8 / THREADS; i++) {
			int c = tid + i * THREADS;
			int row = c >> 3, ch = c & 7;
			int col = k0 + ch * 8;
			bool ok;
			int gn = gr_w_row<BN, SILU>(tn, row, N, &ok);
			ok = ok && col < K;
			gr_cp_async16(sb + gr_swz(row, ch), ok ? W + (size_t)gn * K + col : W, ok);
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
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		__syncthreads();
		int pf = kt + STAGES - 1;
		if (pf < KT)
			load_stage(pf % STAGES, pf);
		asm volatile("cp.async.commit_group;\n" ::);

		unsigned sa = base + (kt % STAGES) * cfg::STAGE_BYTES + wg * 64 * 128;
		unsigned sb = base + (kt % STAGES) * cfg::STAGE_BYTES + cfg::A_BYTES;
		asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
		for (int ks = 0; ks < DS_GR_BK / 16; ks++)
			gr_wgmma<BN>(d, gr_desc(sa + ks * 32), gr_desc(sb + ks * 32));
		asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
		asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
	}
	asm volatile("cp.async.wait_group 0;\n" ::);
	if constexpr (SILU)
		gr_store_silu<BN>(d, (uint16_t *)C, M, N / 2, m0 + wg * 64, tn * (BN / 2), warp,
		                  lane);
	else
		gr_store<BN>(d, (float *)C, M, N, m0 + wg * 64, n0, warp, lane);
}

template <int BN, int STAGES, bool GROUPED, bool SILU>
static cudaError_t cp_launch(const uint16_t *A, const uint16_t *W, void *C, int M, int N, int K,
                             cudaStream_t st)
{
	unsigned tiles_m = (unsigned)((M + DS_GR_BM - 1) / DS_GR_BM);
	unsigned tiles_n = (unsigned)gr_tiles_n<BN, SILU>(N);
	dim3 grid = GROUPED ? dim3(tiles_m * tiles_n) : dim3(tiles_n, tiles_m);
	gemm_ref_cp_kernel<BN, STAGES, GROUPED, SILU>
	    <<<grid, THREADS, cp_cfg<BN, STAGES>::SMEM, st>>>(A, W, C, M, N, K);
	return cudaGetLastError();
}

template <int BN, int STAGES, bool GROUPED> static cudaError_t cp_setup(void)
{
	cudaError_t e = cudaFuncSetAttribute(gemm_ref_cp_kernel<BN, STAGES, GROUPED, false>,
	                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
	                                     (int)cp_cfg<BN, STAGES>::SMEM);
	if (e != cudaSuccess)
		return e;
	return cudaFuncSetAttribute(gemm_ref_cp_kernel<BN, STAGES, GROUPED, true>,
	                            cudaFuncAttributeMaxDynamicSharedMemorySize,
	                            (int)cp_cfg<BN, STAGES>::SMEM);
}

/* The TMA variants (gemm_ref_tma.cu): a BM x BN tile with STAGES stages, one of the
 * configurations variant_tma names. */
cudaError_t ds_gemm_ref_tma_launch(int bm, int bn, int stages, bool persistent, bool silu,
                                   const uint16_t *A, const uint16_t *W, void *C, int M, int N,
                                   int K, cudaStream_t st);
cudaError_t ds_gemm_ref_tma_setup(int bm, int bn, int stages);
cudaError_t ds_gemm_ref_tma_resident(int bm, int bn, int stages, int dev, int *ctas);
/* The fixed split-K cluster variants (gemm_ref_splitk.cu): (S, BN, STAGES) of variant_sk. */
cudaError_t ds_gemm_ref_splitk_launch(int S, int bn, int stages, const uint16_t *A,
                                      const uint16_t *W, float *C, int M, int N, int K,
                                      cudaStream_t st);
cudaError_t ds_gemm_ref_splitk_setup(int S, int bn, int stages);
cudaError_t ds_gemm_ref_splitk_resident(int S, int bn, int stages, int *ctas);

static const char *const variant_names[DS_K_GEMM_REF_N_VARIANTS] = {
    "cp128x128s3",     /* 0: the original kernel: cp.async, 3 stages, row-major raster */
    "cp128x128s3g",    /* 1: the same, grouped raster */
    "cp128x256s4g",    /* 2: cp.async, 128x256 tile, 4 stages, grouped raster */
    "tma128x256s4g",   /* 3: TMA + mbarrier, producer warp + 2 consumer warpgroups, 4 stages */
    "tma128x128s6g",   /* 4: the same with a 128x128 tile and 6 stages */
    "tma128x256s4gp",  /* 5: variant 3, persistent (one block per SM walks the tiles) */
    "tma128x128s6gp",  /* 6: variant 4, persistent */
    "tma128x128s6k2c", /* 7: split-K over a cluster of 2 CTAs, DSMEM combine, 6 stages */
    "tma128x128s6k4c", /* 8: the same over a cluster of 4 CTAs */
    "tma128x128s3k2c", /* 9: variant 7 with 3 stages: two CTAs per SM */
    "tma128x128s3k4c", /* 10: variant 8 with 3 stages: two CTAs per SM */
    "tma64x128s4g",    /* 11: TMA, one consumer warpgroup, 64x128 tile, 4 stages, 2 per SM */
    "tma64x128s4gp",   /* 12: variant 11, persistent (two blocks per SM walk the tiles) */
    "tma64x64s6g",     /* 13: TMA, one consumer warpgroup, 64x64 tile, 6 stages, 2 per SM */
    "tma64x64s6gp",    /* 14: variant 13, persistent */
    "tma64x64s14g",    /* 15: the 64x64 tile with 14 stages, 1 per SM (112 KB of W in flight) */
    "tma64x128s9g",    /* 16: the 64x128 tile with 9 stages, 1 per SM (144 KB of W in flight) */
    "tma128x224s4g",   /* 17: TMA, 128x224 tile, 4 stages, 1 per SM (wave fit on gate/up) */
    "tma128x224s4gp",  /* 18: variant 17, persistent */
    "tma64x192s6g",    /* 19: TMA, 64x192 tile, 6 stages, 1 per SM (one wave on q/k/v at M = 256) */
    "tma128x256s4k2c", /* 20: split-K over a cluster of 2 CTAs, 128x256 tile, 4 stages */
};

/* Each split-K cluster variant's {S, BN, STAGES} (gemm_ref_splitk.cu: 128-row tiles); zeros for
 * the others, whose S is 1. */
static const int variant_sk[DS_K_GEMM_REF_N_VARIANTS][3] = {
    {0, 0, 0},   {0, 0, 0},   {0, 0, 0},   {0, 0, 0},   {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
    {2, 128, 6}, {4, 128, 6}, {2, 128, 3}, {4, 128, 3}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
    {0, 0, 0},   {0, 0, 0},   {0, 0, 0},   {0, 0, 0},   {0, 0, 0}, {0, 0, 0}, {2, 256, 4},
};

/* Tile of each TMA variant without split-K (3..6, 11..19): {BM, BN, STAGES, persistent};
 * zeros for the others. */
static const int variant_tma[DS_K_GEMM_REF_N_VARIANTS][4] = {
    {0, 0, 0, 0},     {0, 0, 0, 0},     {0, 0, 0, 0},     {128, 256, 4, 0}, {128, 128, 6, 0},
    {128, 256, 4, 1}, {128, 128, 6, 1}, {0, 0, 0, 0},     {0, 0, 0, 0},     {0, 0, 0, 0},
    {0, 0, 0, 0},     {64, 128, 4, 0},  {64, 128, 4, 1},  {64, 64, 6, 0},   {64, 64, 6, 1},
    {64, 64, 14, 0},  {64, 128, 9, 0},  {128, 224, 4, 0}, {128, 224, 4, 1}, {64, 192, 6, 0},
};

extern "C" int ds_k_gemm_ref_variant_splits(int variant)
{
	if (variant < 0 || variant >= DS_K_GEMM_REF_N_VARIANTS)
		return 0;
	return variant_sk[variant][0] ? variant_sk[variant][0] : 1;
}

extern "C" const char *ds_k_gemm_ref_variant_name(int variant)
{
	if (variant < 0 || variant >= DS_K_GEMM_REF_N_VARIANTS)
		return "?";
	return variant_names[variant];
}

/* Variant v's launch: C (M, N) fp32 = A . W^T, or with SILU the fused gate/up call (W of
 * N = 2F rows, C is H (M, F) bf16; the split-K variants have no fused epilogue). */
template <bool SILU>
static cudaError_t variant_launch(int variant, const uint16_t *A, const uint16_t *W, void *C, int M,
                                  int N, int K, cudaStream_t st)
{
	if (variant < 0 || variant >= DS_K_GEMM_REF_N_VARIANTS)
		return cudaErrorInvalidValue;
	if (M <= 0 || N <= 0)
		return cudaSuccess;
	if (K <= 0 || K % 8 != 0)
		return cudaErrorInvalidValue;
	switch (variant) {
	case 0:
		return cp_launch<128, 3, false, SILU>(A, W, C, M, N, K, st);
	case 1:
		return cp_launch<128, 3, true, SILU>(A, W, C, M, N, K, st);
	case 2:
		return cp_launch<256, 4, true, SILU>(A, W, C, M, N, K, st);
	default: {
		const int *t = variant_tma[variant];
		if (t[0])
			return ds_gemm_ref_tma_launch(t[0], t[1], t[2], t[3] != 0, SILU, A, W, C, M,
			                              N, K, st);
		if (SILU)
			return cudaErrorNotSupported;
		/* 7..10, 20: split-K over a cluster */
		const int *k = variant_sk[variant];
		return ds_gemm_ref_splitk_launch(k[0], k[1], k[2], A, W, (float *)C, M, N, K, st);
	}
	}
}

extern "C" cudaError_t ds_k_gemm_ref_variant(int variant, const uint16_t *A, const uint16_t *W,
                                             float *C, int M, int N, int K, cudaStream_t st)
{
	return variant_launch<false>(variant, A, W, C, M, N, K, st);
}

extern "C" cudaError_t ds_k_gemm_ref_silu_variant(int variant, const uint16_t *A, const uint16_t *W,
                                                  uint16_t *H, int M, int F, int K, cudaStream_t st)
{
	return variant_launch<true>(variant, A, W, H, M, F > 0 ? 2 * F : 0, K, st);
}

template <int BN, int STAGES, bool GROUPED> static cudaError_t cp_resident(int *per_sm)
{
	return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
	    per_sm, gemm_ref_cp_kernel<BN, STAGES, GROUPED, false>, THREADS,
	    cp_cfg<BN, STAGES>::SMEM);
}

extern "C" cudaError_t ds_k_gemm_ref_variant_resident(int variant, int *ctas)
{
	*ctas = 0;
	int dev, sms, per_sm = 0;
	cudaError_t e;
	if (variant < 0 || variant >= DS_K_GEMM_REF_N_VARIANTS)
		return cudaErrorInvalidValue;
	if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
	    (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
		return e;
	switch (variant) {
	case 0:
		e = cp_resident<128, 3, false>(&per_sm);
		break;
	case 1:
		e = cp_resident<128, 3, true>(&per_sm);
		break;
	case 2:
		e = cp_resident<256, 4, true>(&per_sm);
		break;
	default:
		if (variant_sk[variant][0])
			return ds_gemm_ref_splitk_resident(variant_sk[variant][0],
			                                   variant_sk[variant][1],
			                                   variant_sk[variant][2], ctas);
		return ds_gemm_ref_tma_resident(variant_tma[variant][0], variant_tma[variant][1],
		                                variant_tma[variant][2], dev, ctas);
	}
	*ctas = per_sm * sms;
	return e;
}

extern "C" cudaError_t ds_k_gemm_ref(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                     int K, cudaStream_t st)
{
	return ds_k_gemm_ref_variant(0, A, W, C, M, N, K, st);
}

/* Variant 0's error is returned (the backend depends on it). A failure of another variant's
 * setup is cleared and left to surface as that variant's launch error, so a problem in a new
 * variant cannot take the reference path down while the table does not use it. */
extern "C" cudaError_t ds_k_gemm_ref_setup(void)
{
	cudaError_t e = cp_setup<128, 3, false>();
	if (e != cudaSuccess)
		return e;
	cudaError_t others[2] = {cp_setup<128, 3, true>(), cp_setup<256, 4, true>()};
	for (int i = 0; i < 2; i++)
		if (others[i] != cudaSuccess)
			(void)cudaGetLastError();
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		const int *t = variant_tma[v], *k = variant_sk[v];
		if (t[0] && ds_gemm_ref_tma_setup(t[0], t[1], t[2]) != cudaSuccess)
			(void)cudaGetLastError();
		if (k[0] && ds_gemm_ref_splitk_setup(k[0], k[1], k[2]) != cudaSuccess)
			(void)cudaGetLastError();
	}
	return cudaSuccess;
}
