/* stream.cu - the fast path's streaming GEMM for decode passes of 1..8 rows, whose weights start
 * flowing before the kernel's inputs exist.
 *
 * C (M, N) fp32 = A (M, K) . W (N, K)^T, bf16 in, fp32 accumulate, M <= DS_K_STREAM_MAX_M.
 *
 * Why: at 8 rows a decode layer spends about a sixth of its time in kernels that read no weights
 * (RMSNorm, attention, SiLU*mul), during which DRAM idles, and every GEMM then ramps its weight
 * stream up from nothing. cuBLASLt's kernels cannot start early: under a programmatic edge they
 * read their inputs before the previous kernel has written them (bench/results/HISTORY-gpu.md,
 * twenty-eighth session). This kernel, launched with PDL, copies weights into shared memory
 * before its griddepcontrol.wait, since the forward pass never writes them; only the
 * activations are read after the wait.
 *
 * Measured on the H200, it does not pay yet: its weight stream alone beats cuBLASLt's GEMMs, but
 * with the math the 8-row decode step ran 5-8% slower than the kept step configuration, so the
 * fast path uses it only when asked (DS_FAST_STREAM; bench/results/gpu-20261201-b11d21b-final).
 *
 * How: one block per SM (grid <= SMs), each owning a contiguous run of 16-row weight tiles. A
 * producer warp streams the block's tiles into a ring of NE entries, each one K segment (up
 * to SEG elements) of one tile: 16 bulk async copies of one row segment each, completing on
 * the entry's mbarrier. Eight consumer warps run mma.sync m16n8k16 with the weight tile as the
 * "A" operand (ldmatrix from the ring; rows RS bytes apart, so the 8 rows of one ldmatrix
 * phase fall in 8 different bank groups) and the batch as "B" (n = 8 rows): each segment of the
 * batch is copied to shared memory one segment ahead (cp.async, double-buffered), then held in
 * registers while it serves the segment's tiles. Loaded straight from L2 into registers (two
 * 4-byte loads a k16 step) it made the 8-row GEMMs 1.2-1.8x slower than their weight stream
 * alone (bench_gpu stream, gpu-20261201-eda74ee-stream). Warp w takes the segment's k16 steps w, w
 * + 8, ...; tiles are taken in groups of SG_TG, segment-major inside a group, so the B registers
 * serve every tile of the group. At a group's end the warps' partial tiles are summed in shared
 * memory in warp order: the result is deterministic for a given shape and grid (batch-variant by
 * design, as every fast-path kernel). */
#include "kernels.h"
#include "cu_common.cuh"
#include "mbar.cuh"
#include "mma_prims.cuh"
#include "pdl.cuh"

#define SG_CWARPS 8                          /* consumer warps */
#define SG_THREADS ((SG_CWARPS + 1) * 32)    /* + the producer warp */
#define SG_TG 8                              /* tiles of a group (B registers reused over them) */
#define SG_RED (SG_CWARPS * SG_TG * 128 * 4) /* the warps' partial tiles of a group */

/* The ring's shape, one per variant: NE entries of one SEG-element K segment of a 16-row tile,
 * rows RS bytes apart (RS % 128 == 16: the 8 rows of one ldmatrix phase fall in 8 different
 * bank groups). A variant's K order follows SEG, so variants differ in their last bits. */
template <int NE, int SEG> struct sg_cfg {
	static constexpr int RS = SEG * 2 + 16;
	static constexpr int ENTRY = 16 * RS;
	static constexpr int BBUF = 8 * RS; /* one segment of the batch's 8 rows */
	static constexpr int SMEM = NE * ENTRY + 2 * BBUF + SG_RED + 2 * NE * 8;
	static constexpr int STEPS = SEG / 16 / SG_CWARPS; /* k16 steps of a warp in a segment */
	static_assert(SMEM <= 227 * 1024, "stream GEMM shared memory");
	static_assert(RS % 128 == 16, "ldmatrix rows must fall in distinct bank groups");
};

__device__ __forceinline__ void sg_bulk(unsigned dst, const void *src, unsigned bytes, unsigned bar,
                                        unsigned long long pol)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
	             ".L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
	             "l"(src), "r"(bytes), "r"(bar), "l"(pol)
	             : "memory");
}

/* Consumer warps only (the producer may be anywhere in its stream). */
__device__ __forceinline__ void sg_csync(void)
{
	asm volatile("bar.sync 1, %0;\n" ::"n"(SG_CWARPS * 32) : "memory");
}

/* diag (bench only): 1, the consumers wait for and release every entry but skip the B loads
 * and the math (C is wrong): the weight stream's own pace. */
template <int NE, int SEG>
__global__ void __launch_bounds__(SG_THREADS, 1)
    stream_gemm_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ W,
                       float *__restrict__ C, int M, int N, int K, int diag)
{
	using G = sg_cfg<NE, SEG>;
	constexpr int SG_NE = NE, SG_SEG = SEG, SG_RS = G::RS, SG_ENTRY = G::ENTRY,
	              SG_STEPS = G::STEPS;
	extern __shared__ __align__(128) unsigned char sm[];
	const unsigned ring = (unsigned)__cvta_generic_to_shared(sm);
	unsigned char *bsm = sm + SG_NE * SG_ENTRY; /* 2 buffers of G::BBUF */
	float *red = (float *)(bsm + 2 * G::BBUF);
	const unsigned full = ring + SG_NE * SG_ENTRY + 2 * G::BBUF + SG_RED,
	               empty = full + 8 * SG_NE;
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int nt = (N + 15) / 16, nseg = (K + SG_SEG - 1) / SG_SEG;
	const int t0 = (int)((long long)blockIdx.x * nt / gridDim.x);
	const int t1 = (int)((long long)(blockIdx.x + 1) * nt / gridDim.x);
	if (threadIdx.x == 0) {
		for (int e = 0; e < SG_NE; e++) {
			mbar_init(full + 8 * e, 1);
			mbar_init(empty + 8 * e, SG_CWARPS);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	__syncthreads();

	if (warp == SG_CWARPS) {
		/* the producer reads only weights: no PDL wait, so the ring fills while the
		 * previous kernel runs */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
		asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
		unsigned long long pol;
		asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
		int i = 0;
		for (int g = t0; g < t1; g += SG_TG) {
			int ge = min(g + SG_TG, t1);
			for (int s = 0; s < nseg; s++) {
				unsigned rb = (unsigned)min(SG_SEG, K - s * SG_SEG) * 2u;
				for (int t = g; t < ge; t++, i++) {
					int e = i % SG_NE, rows = min(16, N - t * 16);
					if (lane == 0) {
						if (i >= SG_NE)
							mbar_wait(empty + 8 * e,
							          ((i / SG_NE) - 1) & 1);
						mbar_expect_tx(full + 8 * e, (unsigned)rows * rb);
					}
					__syncwarp();
					if (lane < rows)
						sg_bulk(ring + e * SG_ENTRY + lane * SG_RS,
						        W + (size_t)(t * 16 + lane) * K +
						            (size_t)s * SG_SEG,
						        rb, full + 8 * e, pol);
				}
			}
		}
		return;
	}

	ds_grid_dep_wait();
	/* unit u = (group, segment) in consumption order; its batch segment goes to buffer u & 1
	 * (cp.async, 16 bytes a thread-copy, rows past M zero-filled), one unit ahead */
	const int ngrp = (t1 - t0 + SG_TG - 1) / SG_TG, nunit = ngrp * nseg;
	auto b_fetch = [&](int u) {
		if (u >= nunit || diag)
			return;
		int s = u % nseg, L = min(SG_SEG, K - s * SG_SEG), c16 = L / 8;
		unsigned char *dst = bsm + (u & 1) * G::BBUF;
		for (int x = threadIdx.x; x < 8 * c16; x += SG_CWARPS * 32) {
			int r = x / c16, c = x % c16;
			mt_cp16(dst + r * SG_RS + c * 16,
			        A + (size_t)(r < M ? r : 0) * K + (size_t)s * SG_SEG + c * 8,
			        r < M);
		}
		mt_commit();
	};
	b_fetch(0);
	/* ldmatrix x2 of the batch: lanes 0-7 rows 0-7 at k 0-7, lanes 8-15 at k 8-15 */
	const int boff = (lane & 7) * SG_RS + ((lane >> 3) & 1) * 16;
	const unsigned char *lbase = sm + (lane & 15) * SG_RS + (lane >> 4) * 16;
	int i = 0, u = 0;
	for (int g = t0; g < t1; g += SG_TG) {
		const int ntg = min(SG_TG, t1 - g);
		float acc[SG_TG][4];
#pragma unroll
		for (int tt = 0; tt < SG_TG; tt++)
			acc[tt][0] = acc[tt][1] = acc[tt][2] = acc[tt][3] = 0.0f;
		for (int s = 0; s < nseg; s++, u++) {
			const int nst = min(SG_SEG, K - s * SG_SEG) / 16;
			mt_wait<0>();
			sg_csync(); /* unit u's batch landed for every thread; unit u - 1's reads
			               done */
			unsigned b[SG_STEPS][2];
			const unsigned bb =
			    (unsigned)__cvta_generic_to_shared(bsm + (u & 1) * G::BBUF + boff);
#pragma unroll
			for (int q = 0; q < SG_STEPS; q++) {
				int j = warp + SG_CWARPS * q;
				b[q][0] = b[q][1] = 0u;
				if (j < nst && !diag)
					asm volatile(
					    "ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, "
					    "[%2];\n"
					    : "=r"(b[q][0]), "=r"(b[q][1])
					    : "r"(bb + 32 * j));
			}
			b_fetch(u + 1);
#pragma unroll
			for (int tt = 0; tt < SG_TG; tt++) {
				if (tt < ntg) {
					int e = i % SG_NE;
					mbar_wait(full + 8 * e, (i / SG_NE) & 1);
					const unsigned char *base = lbase + e * SG_ENTRY;
#pragma unroll
					for (int q = 0; q < SG_STEPS; q++) {
						int j = warp + SG_CWARPS * q;
						if (j < nst && !diag) {
							unsigned a[4];
							mt_ldsm_x4(a, base + 32 * j);
							mt_mma(acc[tt], a, b[q][0], b[q][1]);
						}
					}
					__syncwarp();
					if (lane == 0)
						mbar_arrive(empty + 8 * e);
					i++;
				}
			}
		}
		/* the group's tiles: warp partials summed in warp order */
		float *rw = red + (size_t)warp * SG_TG * 128;
#pragma unroll
		for (int tt = 0; tt < SG_TG; tt++)
			if (tt < ntg)
				*(float4 *)(rw + tt * 128 + lane * 4) =
				    make_float4(acc[tt][0], acc[tt][1], acc[tt][2], acc[tt][3]);
		sg_csync();
		for (int o = threadIdx.x; o < ntg * 128; o += SG_CWARPS * 32) {
			float sum = 0.0f;
#pragma unroll
			for (int w = 0; w < SG_CWARPS; w++)
				sum += red[(size_t)w * SG_TG * 128 + o];
			int tt = o / 128, ln = (o % 128) / 4, q = o % 4;
			int n = (g + tt) * 16 + (ln >> 2) + (q >= 2 ? 8 : 0);
			int m = 2 * (ln & 3) + (q & 1);
			if (n < N && m < M)
				C[(size_t)m * N + n] = sum;
		}
		sg_csync();
	}
}

template <int NE, int SEG>
static cudaError_t stream_launch(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                 int K, int grid, int pdl, int diag, cudaStream_t st)
{
	auto fn = stream_gemm_kernel<NE, SEG>;
	cudaError_t e = ds_allow_smem(fn, sg_cfg<NE, SEG>::SMEM);
	if (e != cudaSuccess)
		return e;
	return ds_launch(fn, dim3(grid), dim3(SG_THREADS), sg_cfg<NE, SEG>::SMEM, st, pdl, A, W, C,
	                 M, N, K, diag);
}

extern "C" cudaError_t ds_k_stream_gemm_diag(const uint16_t *A, const uint16_t *W, float *C, int M,
                                             int N, int K, int variant, int grid, int pdl, int diag,
                                             cudaStream_t st)
{
	if (M < 0 || M > DS_K_STREAM_MAX_M || N < 1 || K < 16 || K % 16 != 0 || grid < 1 ||
	    variant < 0 || variant >= DS_K_STREAM_VARIANTS ||
	    ((uintptr_t)A | (uintptr_t)W) % 16 != 0 || (uintptr_t)C % 4 != 0)
		return cudaErrorInvalidValue;
	if (M == 0)
		return cudaSuccess;
	grid = min(grid, (N + 15) / 16);
	switch (variant) {
	case 0:
		return stream_launch<2, 2048>(A, W, C, M, N, K, grid, pdl, diag, st);
	case 1:
		return stream_launch<5, 1024>(A, W, C, M, N, K, grid, pdl, diag, st);
	default:
		return stream_launch<10, 512>(A, W, C, M, N, K, grid, pdl, diag, st);
	}
}

extern "C" cudaError_t ds_k_stream_gemm(const uint16_t *A, const uint16_t *W, float *C, int M,
                                        int N, int K, int variant, int grid, int pdl,
                                        cudaStream_t st)
{
	return ds_k_stream_gemm_diag(A, W, C, M, N, K, variant, grid, pdl, 0, st);
}
