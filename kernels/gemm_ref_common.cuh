/* gemm_ref_common.cuh - device helpers shared by the reference GEMM variants (gemm_ref.cu,
 * gemm_ref_tma.cu): the 128-byte swizzle, wgmma descriptors and instructions, the tile
 * raster order and the fp32 register-fragment epilogue.
 *
 * Key decision: everything here is per-tile or per-element; nothing reads M except the bounds
 * checks of the epilogue and the raster order (which tile a block computes, never how), so
 * every variant built from these pieces keeps a row's bits independent of M. */
#ifndef DS_GEMM_REF_COMMON_CUH
#define DS_GEMM_REF_COMMON_CUH

#include "mbar.cuh"
#include "silu.cuh"
#include <stdint.h>

#include <cuda.h>

#define DS_GR_BM 128 /* rows of the cp.async and split-K tiles; the TMA kernel takes BM */
#define DS_GR_BK 64
#define DS_GR_GROUP_M 8 /* m-tiles per raster group (grouped order keeps W tiles hot in L2) */

/* 16-byte chunk c of row r of a (rows, 64) bf16 tile with the 128-byte swizzle wgmma expects
 * (the same layout TMA writes with CU_TENSOR_MAP_SWIZZLE_128B into a 1024-aligned buffer). */
__device__ __forceinline__ unsigned gr_swz(int r, int c)
{
	return (unsigned)(r * 128 + ((c ^ (r & 7)) << 4));
}

__device__ __forceinline__ void gr_cp_async16(unsigned smem, const void *gmem, bool valid)
{
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
	             "r"(n));
}

/* K-major operand descriptor: 128B swizzle, 8-row groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t gr_desc(unsigned addr)
{
	uint64_t d = (uint64_t)((addr & 0x3ffffu) >> 4);
	d |= (uint64_t)1 << 16;           /* leading byte offset: unused with swizzle */
	d |= (uint64_t)(1024 >> 4) << 32; /* stride byte offset */
	d |= (uint64_t)1 << 62;           /* 128-byte swizzle */
	return d;
}

/* ---- wgmma.m64nNk16 (N = 64, 128, 192, 224, 256): one asm template per N, built by macros ----
 *
 * d (64 x N fp32 fragment, N / 2 registers per thread) += A (64 x 16) . B (N x 16)^T, both
 * operands K-major in shared memory (descriptors da, db). The accumulators are asm operands
 * %0 .. %(N/2 - 1) ("+f", d[0] .. d[N/2 - 1] in order), then da, db and the scale-d flag
 * (always 1: accumulate). The macros only spell out those operand lists; the PTX text each N
 * gets is the one the three hand-written wrappers had, so the generated code is the same. */

/* "%t0, %t1, ..., %t9": the ten operands of tens digit t */
#define GR_WG_R5(t, a, b, c, e, f) "%" #t #a ", %" #t #b ", %" #t #c ", %" #t #e ", %" #t #f
#define GR_WG_R10(t) GR_WG_R5(t, 0, 1, 2, 3, 4) ", " GR_WG_R5(t, 5, 6, 7, 8, 9)
/* %0 .. %(n - 1) for n = 30, 60, 90, 110, 120 */
#define GR_WG_R30 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, " GR_WG_R10(1) ", " GR_WG_R10(2)
#define GR_WG_R60 GR_WG_R30 ", " GR_WG_R10(3) ", " GR_WG_R10(4) ", " GR_WG_R10(5)
#define GR_WG_R90 GR_WG_R60 ", " GR_WG_R10(6) ", " GR_WG_R10(7) ", " GR_WG_R10(8)
#define GR_WG_R110 GR_WG_R90 ", " GR_WG_R10(9) ", " GR_WG_R10(10)
#define GR_WG_R120 GR_WG_R110 ", " GR_WG_R10(11)

/* "+f"(d[i]) .. "+f"(d[i + n - 1]) for n = 4, 16, 32, 64, 96, 112, 128 */
#define GR_WG_D4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define GR_WG_D16(i) GR_WG_D4(i), GR_WG_D4((i) + 4), GR_WG_D4((i) + 8), GR_WG_D4((i) + 12)
#define GR_WG_D32(i) GR_WG_D16(i), GR_WG_D16((i) + 16)
#define GR_WG_D64(i) GR_WG_D32(i), GR_WG_D32((i) + 32)
#define GR_WG_D96(i) GR_WG_D64(i), GR_WG_D32((i) + 64)
#define GR_WG_D112(i) GR_WG_D64(i), GR_WG_D32((i) + 64), GR_WG_D16((i) + 96)
#define GR_WG_D128(i) GR_WG_D64(i), GR_WG_D64((i) + 64)

/* Defines wgmma_N: REGS is the accumulators' operand list in the PTX, DOPS their constraints,
 * IA, IB, IP the operand numbers of da, db and the flag (N/2, N/2 + 1, N/2 + 2). */
#define GR_WGMMA_DEF(N, REGS, DOPS, IA, IB, IP)                                                    \
	__device__ __forceinline__ void wgmma_##N(float *d, uint64_t da, uint64_t db)              \
	{                                                                                          \
		asm volatile("{\n"                                                                 \
		             ".reg .pred p;\n"                                                     \
		             "setp.ne.b32 p, %" #IP ", 0;\n"                                       \
		             "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS     \
		             "}, %" #IA ", %" #IB ", p, 1, 1, 0, 0;\n"                             \
		             "}\n"                                                                 \
		             : DOPS                                                                \
		             : "l"(da), "l"(db), "r"(1));                                          \
	}

GR_WGMMA_DEF(64, GR_WG_R30 ", %30, %31", GR_WG_D32(0), 32, 33, 34)
GR_WGMMA_DEF(128, GR_WG_R60 ", %60, %61, %62, %63", GR_WG_D64(0), 64, 65, 66)
GR_WGMMA_DEF(192, GR_WG_R90 ", %90, %91, %92, %93, %94, %95", GR_WG_D96(0), 96, 97, 98)
GR_WGMMA_DEF(224, GR_WG_R110 ", %110, %111", GR_WG_D112(0), 112, 113, 114)
#define GR_WG_R128 GR_WG_R120 ", %120, %121, %122, %123, %124, %125, %126, %127"
GR_WGMMA_DEF(256, GR_WG_R128, GR_WG_D128(0), 128, 129, 130)

template <int BN> __device__ __forceinline__ void gr_wgmma(float *d, uint64_t da, uint64_t db)
{
	static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 224 || BN == 256,
	              "a wgmma.m64nBNk16 shape");
	if constexpr (BN == 256)
		wgmma_256(d, da, db);
	else if constexpr (BN == 224)
		wgmma_224(d, da, db);
	else if constexpr (BN == 192)
		wgmma_192(d, da, db);
	else if constexpr (BN == 128)
		wgmma_128(d, da, db);
	else
		wgmma_64(d, da, db);
}

/* Tile (tm, tn) of linear block id bid. grouped: groups of DS_GR_GROUP_M m-tiles walked
 * column by column, so the blocks resident at once share a few W tiles and a few A tiles
 * (L2 reuse); otherwise row-major over (m-tile, n-tile) with n fastest. */
__device__ __forceinline__ void gr_tile(int bid, int tiles_m, int tiles_n, bool grouped, int *tm,
                                        int *tn)
{
	if (!grouped) {
		*tm = bid / tiles_n;
		*tn = bid % tiles_n;
		return;
	}
	int per_group = DS_GR_GROUP_M * tiles_n;
	int first_m = (bid / per_group) * DS_GR_GROUP_M;
	int gm = min(tiles_m - first_m, DS_GR_GROUP_M);
	int r = bid % per_group;
	*tm = first_m + r % gm;
	*tn = r / gm;
}

/* Stores one warpgroup's 64 x BN fp32 fragment (BN = 64, 128, 192, 224 or 256) whose top-left
 * element is (row0, n0); rows past M and columns past N are skipped. lane / warp are within the
 * warpgroup. */
template <int BN>
__device__ __forceinline__ void gr_store(const float *d, float *__restrict__ C, int M, int N,
                                         int row0, int n0, int warp, int lane)
{
	int row = row0 + warp * 16 + (lane >> 2);
#pragma unroll
	for (int i = 0; i < BN / 8; i++) {
		int col = n0 + i * 8 + 2 * (lane & 3);
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int r = row + h * 8;
			if (r >= M)
				continue;
			float *dst = C + (size_t)r * N + col;
			float v0 = d[4 * i + 2 * h], v1 = d[4 * i + 2 * h + 1];
			if (col + 1 < N && (N & 1) == 0) {
				*(float2 *)dst = make_float2(v0, v1);
			} else {
				if (col < N)
					dst[0] = v0;
				if (col + 1 < N)
					dst[1] = v1;
			}
		}
	}
}

/* The fused gate/up epilogue (SILU tiles): the tile's W rows are BN / 2 gate rows j0 .. and
 * the same BN / 2 up rows (j0 + F ..), so a thread holds gate column j in fragment i and up
 * column j in fragment i + BN / 16, at the same places. Stores H[r][j] = bf16(silu(g) * u)
 * for one warpgroup's 64 rows from row0; rows past M and columns past F are skipped. The
 * accumulators are the fp32 values an unfused call would store in C, so H has the bits of
 * ds_k_silu_mul applied to that C. */
template <int BN>
__device__ __forceinline__ void gr_store_silu(const float *d, uint16_t *__restrict__ H, int M,
                                              int F, int row0, int j0, int warp, int lane)
{
	constexpr int HALF = BN / 16; /* fragments of 8 columns in the gate half */
	int row = row0 + warp * 16 + (lane >> 2);
#pragma unroll
	for (int i = 0; i < HALF; i++) {
		int col = j0 + i * 8 + 2 * (lane & 3);
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int r = row + h * 8;
			if (r >= M)
				continue;
			uint16_t *dst = H + (size_t)r * F + col;
			unsigned v0 = ds_silu_mul_bf16(d[4 * i + 2 * h], d[4 * (i + HALF) + 2 * h]);
			unsigned v1 =
			    ds_silu_mul_bf16(d[4 * i + 2 * h + 1], d[4 * (i + HALF) + 2 * h + 1]);
			if (col + 1 < F && (F & 1) == 0) {
				*(unsigned *)dst = v0 | v1 << 16;
			} else {
				if (col < F)
					dst[0] = (uint16_t)v0;
				if (col + 1 < F)
					dst[1] = (uint16_t)v1;
			}
		}
	}
}

/* W row of row `row` of a BN-row tile: tile tn's rows n0 .. for a plain tile; for a SILU tile
 * (N = 2F: gate rows then up rows) the first BN / 2 rows are gate rows tn * BN / 2 .., the rest
 * the matching up rows. *ok false past the matrix (and for gate rows past F, never stored). */
template <int BN, bool SILU>
__device__ __forceinline__ int gr_w_row(int tn, int row, int N, bool *ok)
{
	if constexpr (!SILU) {
		int r = tn * BN + row;
		*ok = r < N;
		return r;
	} else {
		int F = N / 2, j = tn * (BN / 2) + (row < BN / 2 ? row : row - BN / 2);
		*ok = j < F;
		return row < BN / 2 ? j : F + j;
	}
}

/* Tiles along N: over the W rows for a plain tile, over the F output columns (BN / 2 each)
 * for a SILU tile. */
template <int BN, bool SILU> __host__ __device__ __forceinline__ int gr_tiles_n(int N)
{
	return SILU ? (N / 2 + BN / 2 - 1) / (BN / 2) : (N + BN - 1) / BN;
}

/* ---- TMA (the TMA and split-K variants; mbarriers: mbar.cuh) ---- */

/* Box (64 columns from k0, box rows from r0) of the 2D map tm into smem, completing on bar. */
__device__ __forceinline__ void tma_load(unsigned smem, const CUtensorMap *tm, int k0, int r0,
                                         unsigned bar)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
	             " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem),
	             "l"((uint64_t)tm), "r"(k0), "r"(r0), "r"(bar)
	             : "memory");
}

/* ---- host ---- */

/* TMA maps for A (M, K), boxes of (bm, 64), and W (N, K), boxes of (bn, 64): 128-byte
 * swizzle, out-of-bounds reads as zero, encoded through the runtime's driver entry point
 * (gemm_ref_tma.cu). cudaErrorInvalidValue when A or W is not 16-byte aligned. */
cudaError_t gr_tma_maps_bm(const uint16_t *A, const uint16_t *W, int M, int N, int K, int bm,
                           int bn, CUtensorMap *ta, CUtensorMap *tw);
/* The same with bm = DS_GR_BM (the 128-row tile). */
cudaError_t gr_tma_maps(const uint16_t *A, const uint16_t *W, int M, int N, int K, int bn,
                        CUtensorMap *ta, CUtensorMap *tw);

#endif
