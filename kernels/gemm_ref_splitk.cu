/* gemm_ref_splitk.cu - the reference GEMM's fixed split-K variants: a thread-block cluster of S
 * CTAs (S = 2 or 4) computes one 128 x 128 output tile, each CTA a contiguous range of the
 * k-tiles, and the S fp32 partial tiles are combined through distributed shared memory.
 *
 * Why: at M <= 128 a 128 x 128 tile gives N / 128 blocks, too few for the narrow weights
 * (qkv 48, o_proj and down_proj 32 on 132 SMs), so those GEMMs stream W at a fraction of the
 * card's bandwidth. Splitting K multiplies the blocks by S without giving up invariance.
 *
 * A CTA is the TMA kernel of gemm_ref_tma.cu cut to one tile and one k-range: one producer
 * thread issues the TMA loads of A and W k-tiles into 6 mbarrier-pipelined stages, two
 * consumer warpgroups (64 rows each) issue wgmma.m64n128k16 on one fp32 accumulator. Then the
 * CTA writes its partial tile into its own shared memory (the pipeline stages, all consumed),
 * the cluster synchronizes, and CTA rank r reduces rows [r * 128 / S, (r + 1) * 128 / S) of
 * the tile: for each element, ((p0 + p1) + p2) + p3 with explicit round-to-nearest fp32 adds,
 * reading partial q from CTA q's shared memory, and stores it. A second cluster barrier keeps
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

#define SK_THREADS 384 /* producer warpgroup + 2 consumer warpgroups */
#define SK_BN 128
#define SK_STAGES 6
#define SK_A_BYTES (DS_GR_BM * DS_GR_BK * 2)
#define SK_STAGE_BYTES ((DS_GR_BM + SK_BN) * DS_GR_BK * 2)
#define SK_PART_LD (SK_BN + 8) /* floats per partial-tile row; the pad spreads the banks */
/* stages, then 2 * SK_STAGES mbarriers, plus slack to align the base to 1024 */
#define SK_SMEM ((size_t)SK_STAGES * SK_STAGE_BYTES + 2 * SK_STAGES * 8 + 1024)

static_assert((size_t)DS_GR_BM * SK_PART_LD * 4 <= (size_t)SK_STAGES * SK_STAGE_BYTES,
              "the partial tile must fit in the pipeline stages");

/* k-tiles [*kb, *ke) of split s of S over K: a function of K and S only. */
__device__ __forceinline__ void sk_range(int K, int S, int s, int *kb, int *ke)
{
	int KT = (K + DS_GR_BK - 1) / DS_GR_BK, per = (KT + S - 1) / S;
	*kb = min(KT, s * per);
	*ke = min(KT, (s + 1) * per);
}

template <int S>
__global__ void __launch_bounds__(SK_THREADS, 1)
    gemm_ref_splitk_kernel(const __grid_constant__ CUtensorMap tmA,
                           const __grid_constant__ CUtensorMap tmW, float *__restrict__ C, int M,
                           int N, int K)
{
	extern __shared__ __align__(1024) unsigned char smem_raw[];
	unsigned raw = (unsigned)__cvta_generic_to_shared(smem_raw);
	unsigned base = (raw + 1023u) & ~1023u;
	float *part =
	    (float *)(smem_raw + (base - raw)); /* (DS_GR_BM, SK_PART_LD), after the loop */
	unsigned full = base + SK_STAGES * SK_STAGE_BYTES, empty = full + SK_STAGES * 8;
	cg::cluster_group cluster = cg::this_cluster();
	int split = (int)cluster.block_rank(); /* == blockIdx.x % S */
	int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
	int tiles_m = (M + DS_GR_BM - 1) / DS_GR_BM, tiles_n = (N + SK_BN - 1) / SK_BN;
	int tm, tn;
	gr_tile((int)blockIdx.x / S, tiles_m, tiles_n, true, &tm, &tn);
	int m0 = tm * DS_GR_BM, n0 = tn * SK_BN;
	int kb, ke;
	sk_range(K, S, split, &kb, &ke);

	if (tid == 0) {
		asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmA) : "memory");
		asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmW) : "memory");
		for (int s = 0; s < SK_STAGES; s++) {
			mbar_init(full + 8 * s, 1);
			mbar_init(empty + 8 * s, 8); /* lane 0 of each of the 8 consumer warps */
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	__syncthreads();

	/* it counts this CTA's k-tiles: stage it % SK_STAGES, barrier phase (it / SK_STAGES) & 1.
	 * No setmaxnreg: 64 accumulators fit the 168 registers of 384 threads, and the producer
	 * warps run the epilogue's barriers and reduction too. */
	float d[SK_BN / 2];
#pragma unroll
	for (int i = 0; i < SK_BN / 2; i++)
		d[i] = 0.0f;
	if (wg == 0) {
		if (tid == 0)
			for (int kt = kb, it = 0; kt < ke; kt++, it++) {
				int s = it % SK_STAGES;
				mbar_wait(empty + 8 * s, ((it / SK_STAGES) & 1) ^ 1);
				unsigned sa = base + s * SK_STAGE_BYTES;
				mbar_expect_tx(full + 8 * s, SK_STAGE_BYTES);
				tma_load(sa, &tmA, kt * DS_GR_BK, m0, full + 8 * s);
				tma_load(sa + SK_A_BYTES, &tmW, kt * DS_GR_BK, n0, full + 8 * s);
			}
	} else {
		int cw = wg - 1; /* rows cw*64 .. cw*64+63 of the tile */
		for (int kt = kb, it = 0; kt < ke; kt++, it++) {
			int s = it % SK_STAGES;
			mbar_wait(full + 8 * s, (it / SK_STAGES) & 1);
			unsigned sa = base + s * SK_STAGE_BYTES + cw * 64 * 128;
			unsigned sb = base + s * SK_STAGE_BYTES + SK_A_BYTES;
			asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
			for (int ks = 0; ks < DS_GR_BK / 16; ks++)
				wgmma_128(d, gr_desc(sa + ks * 32), gr_desc(sb + ks * 32));
			asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
			/* the group of the previous k-tile is done: its stage may be refilled */
			asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
			if (it > 0 && lane == 0)
				mbar_arrive(empty + 8 * ((it - 1) % SK_STAGES));
		}
		asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
	}
	/* Every TMA load was waited for and every wgmma has finished reading: the stages are
	 * free for the partial tile. */
	__syncthreads();
	if (wg > 0) {
		int row = (wg - 1) * 64 + warp * 16 + (lane >> 2);
#pragma unroll
		for (int i = 0; i < SK_BN / 8; i++) {
			int col = i * 8 + 2 * (lane & 3);
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int r = row + h * 8;
				if (m0 + r < M) /* rows past M are never read */
					*(float2 *)(part + r * SK_PART_LD + col) =
					    make_float2(d[4 * i + 2 * h], d[4 * i + 2 * h + 1]);
			}
		}
	}
	cluster.sync(); /* every CTA's partial is written (release / acquire) */

	const float *src[S];
#pragma unroll
	for (int q = 0; q < S; q++)
		src[q] = cluster.map_shared_rank(part, q);
	constexpr int ROWS = DS_GR_BM / S, VEC = SK_BN / 4;
	for (int idx = tid; idx < ROWS * VEC; idx += SK_THREADS) {
		int r = split * ROWS + idx / VEC, c = (idx % VEC) * 4;
		int gm = m0 + r, gn = n0 + c;
		if (gm >= M || gn >= N)
			continue;
		float4 acc = *(const float4 *)(src[0] + r * SK_PART_LD + c);
#pragma unroll
		for (int q = 1; q < S; q++) {
			float4 v = *(const float4 *)(src[q] + r * SK_PART_LD + c);
			acc.x = __fadd_rn(acc.x, v.x);
			acc.y = __fadd_rn(acc.y, v.y);
			acc.z = __fadd_rn(acc.z, v.z);
			acc.w = __fadd_rn(acc.w, v.w);
		}
		float *dst = C + (size_t)gm * N + gn;
		if ((N & 3) == 0) { /* then gn + 3 < N and dst is 16-byte aligned */
			*(float4 *)dst = acc;
		} else {
			float a[4] = {acc.x, acc.y, acc.z, acc.w};
			for (int j = 0; j < 4 && gn + j < N; j++)
				dst[j] = a[j];
		}
	}
	cluster.sync(); /* no CTA leaves while another may still read its shared memory */
}

template <int S>
static cudaError_t splitk_launch(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                 int K, cudaStream_t st)
{
	CUtensorMap ta, tw;
	cudaError_t e = gr_tma_maps(A, W, M, N, K, SK_BN, &ta, &tw);
	if (e != cudaSuccess)
		return e;
	unsigned tiles =
	    (unsigned)((M + DS_GR_BM - 1) / DS_GR_BM) * (unsigned)((N + SK_BN - 1) / SK_BN);
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	attr[0].id = cudaLaunchAttributeClusterDimension;
	attr[0].val.clusterDim.x = S;
	attr[0].val.clusterDim.y = 1;
	attr[0].val.clusterDim.z = 1;
	cfg.gridDim = dim3(tiles * S);
	cfg.blockDim = dim3(SK_THREADS);
	cfg.dynamicSmemBytes = SK_SMEM;
	cfg.stream = st;
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	e = cudaLaunchKernelEx(&cfg, gemm_ref_splitk_kernel<S>, ta, tw, C, M, N, K);
	if (e != cudaSuccess)
		return e;
	return cudaGetLastError();
}

/* Called by ds_k_gemm_ref_variant (gemm_ref.cu), which has checked M, N > 0 and K % 8 == 0;
 * S is 2 or 4. */
cudaError_t ds_gemm_ref_splitk_launch(int S, const uint16_t *A, const uint16_t *W, float *C, int M,
                                      int N, int K, cudaStream_t st)
{
	if (S == 4)
		return splitk_launch<4>(A, W, C, M, N, K, st);
	return splitk_launch<2>(A, W, C, M, N, K, st);
}

cudaError_t ds_gemm_ref_splitk_setup(void)
{
	cudaError_t e = cudaFuncSetAttribute(
	    gemm_ref_splitk_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SK_SMEM);
	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(gemm_ref_splitk_kernel<4>,
		                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SK_SMEM);
	return e;
}

/* CTAs resident at once on the current device: active clusters x S (bench diagnostics; a
 * cluster of S CTAs of ~194 KB each must fit in one GPC). */
cudaError_t ds_gemm_ref_splitk_resident(int S, int *ctas)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	attr[0].id = cudaLaunchAttributeClusterDimension;
	attr[0].val.clusterDim.x = S;
	attr[0].val.clusterDim.y = 1;
	attr[0].val.clusterDim.z = 1;
	cfg.gridDim = dim3(S * 1024);
	cfg.blockDim = dim3(SK_THREADS);
	cfg.dynamicSmemBytes = SK_SMEM;
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	int n = 0;
	cudaError_t e = S == 4
	                    ? cudaOccupancyMaxActiveClusters(&n, gemm_ref_splitk_kernel<4>, &cfg)
	                    : cudaOccupancyMaxActiveClusters(&n, gemm_ref_splitk_kernel<2>, &cfg);
	*ctas = n * S;
	return e;
}
