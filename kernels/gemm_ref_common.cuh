/* gemm_ref_common.cuh - device helpers shared by the reference GEMM variants (gemm_ref.cu,
 * gemm_ref_tma.cu): the 128-byte swizzle, wgmma descriptors and instructions, the tile
 * raster order and the fp32 register-fragment epilogue.
 *
 * Key decision: everything here is per-tile or per-element; nothing reads M except the bounds
 * checks of the epilogue and the raster order (which tile a block computes, never how), so
 * every variant built from these pieces keeps a row's bits independent of M. */
#ifndef DS_GEMM_REF_COMMON_CUH
#define DS_GEMM_REF_COMMON_CUH

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

/* d (64 x 64 fp32 fragment, 32 registers per thread) += A (64 x 16) . B (64 x 16)^T, both
 * operands K-major in shared memory (descriptors da, db). */
__device__ __forceinline__ void wgmma_64(float *d, uint64_t da, uint64_t db)
{
	asm volatile(
	    "{\n"
	    ".reg .pred p;\n"
	    "setp.ne.b32 p, %34, 0;\n"
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
	    "}, %32, %33, p, 1, 1, 0, 0;\n"
	    "}\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
	      "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
	      "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
	      "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
	      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
	      "+f"(d[31])
	    : "l"(da), "l"(db), "r"(1));
}

/* d (64 x 128 fp32 fragment, 64 registers per thread) += A (64 x 16) . B (128 x 16)^T, both
 * operands K-major in shared memory (descriptors da, db). */
__device__ __forceinline__ void wgmma_128(float *d, uint64_t da, uint64_t db)
{
	asm volatile(
	    "{\n"
	    ".reg .pred p;\n"
	    "setp.ne.b32 p, %66, 0;\n"
	    "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
	    "}, %64, %65, p, 1, 1, 0, 0;\n"
	    "}\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
	      "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
	      "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
	      "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
	      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
	      "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
	      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
	      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
	      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
	      "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
	      "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
	    : "l"(da), "l"(db), "r"(1));
}

/* d (64 x 256 fp32 fragment, 128 registers per thread) += A (64 x 16) . B (256 x 16)^T, both
 * operands K-major in shared memory (descriptors da, db). */
__device__ __forceinline__ void wgmma_256(float *d, uint64_t da, uint64_t db)
{
	asm volatile(
	    "{\n"
	    ".reg .pred p;\n"
	    "setp.ne.b32 p, %130, 0;\n"
	    "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
	    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
	    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
	    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
	    "%111, "
	    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, "
	    "%126, %127"
	    "}, %128, %129, p, 1, 1, 0, 0;\n"
	    "}\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
	      "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
	      "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
	      "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
	      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
	      "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
	      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
	      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
	      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
	      "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
	      "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]),
	      "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),
	      "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]),
	      "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),
	      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
	      "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),
	      "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]),
	      "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]),
	      "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]),
	      "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),
	      "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),
	      "+f"(d[127])
	    : "l"(da), "l"(db), "r"(1));
}

template <int BN> __device__ __forceinline__ void gr_wgmma(float *d, uint64_t da, uint64_t db)
{
	static_assert(BN == 64 || BN == 128 || BN == 256, "a wgmma.m64nBNk16 shape");
	if constexpr (BN == 256)
		wgmma_256(d, da, db);
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

/* Stores one warpgroup's 64 x BN fp32 fragment (BN = 64, 128 or 256) whose top-left element is
 * (row0, n0); rows past M and columns past N are skipped. lane / warp are within the warpgroup. */
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

/* ---- mbarriers and TMA (the TMA and split-K variants) ---- */

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* Waits for the phase of parity `parity` of bar. A watchdog traps after ~4 s of waiting (a
 * legitimate wait lasts microseconds): a pipeline bug then fails the launch with an error
 * instead of hanging a test or benchmark run. */
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
	unsigned ok;
	uint64_t t0 = 0;
	for (unsigned n = 1;; n++) {
		asm volatile("{\n"
		             ".reg .pred p;\n"
		             "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
		             "selp.u32 %0, 1, 0, p;\n"
		             "}\n"
		             : "=r"(ok)
		             : "r"(bar), "r"(parity)
		             : "memory");
		if (ok)
			return;
		if ((n & 4095u) == 0) {
			uint64_t t;
			asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
			if (t0 == 0)
				t0 = t;
			else if (t - t0 > 4000000000ull)
				__trap();
		}
	}
}

__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
	             "r"(bytes)
	             : "memory");
}

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
