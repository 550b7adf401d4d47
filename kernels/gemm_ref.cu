/* gemm_ref.cu - the reference path's batch-invariant bf16 GEMM on Hopper tensor cores (wgmma).
 *
 * C (M, N) fp32 = A (M, K) . W (N, K)^T. One fixed configuration for every shape: a 128x128
 * block tile, BK = 64, a 3-stage cp.async pipeline into 128-byte-swizzled shared memory, two
 * warpgroups each issuing wgmma.m64n128k16 (bf16 in, fp32 accumulate) on its 64 rows. There is
 * no split-K and no shape-dependent choice: each output element accumulates its K slices
 * 0, 16, 32, ... in order into the same register, so its bits depend only on its row of A and
 * its row of W, never on M, on the row's place in the tile, or on the other rows. Rows past M
 * and columns past N are zero-filled and never stored. */
#include "kernels.h"

#define BM 128
#define BN 128
#define BK 64
#define STAGES 3
#define THREADS 256
#define STAGE_BYTES ((BM + BN) * BK * 2)

/* 16-byte chunk c of row r of a (rows, 64) bf16 tile with the 128-byte swizzle wgmma expects. */
__device__ __forceinline__ unsigned swz(int r, int c)
{
	return (unsigned)(r * 128 + ((c ^ (r & 7)) << 4));
}

__device__ __forceinline__ void cp_async16(unsigned smem, const void *gmem, bool valid)
{
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
	             "r"(n));
}

/* K-major operand descriptor: 128B swizzle, 8-row groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t wg_desc(unsigned addr)
{
	uint64_t d = (uint64_t)((addr & 0x3ffffu) >> 4);
	d |= (uint64_t)1 << 16;           /* leading byte offset: unused with swizzle */
	d |= (uint64_t)(1024 >> 4) << 32; /* stride byte offset */
	d |= (uint64_t)1 << 62;           /* 128-byte swizzle */
	return d;
}

__device__ __forceinline__ void wgmma_128(float *d, uint64_t da, uint64_t db)
{
	asm volatile(
	    "{\n"
	    ".reg .pred p;\n"
	    "setp.ne.b32 p, %66, 0;\n"
	    "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
	    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
	    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
	    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "
	    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n"
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

__global__ void __launch_bounds__(THREADS, 2)
    gemm_ref_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ W,
                    float *__restrict__ C, int M, int N, int K)
{
	extern __shared__ __align__(1024) unsigned char smem_raw[];
	unsigned base = (unsigned)__cvta_generic_to_shared(smem_raw);
	base = (base + 1023u) & ~1023u;
	int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
	int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
	int KT = (K + BK - 1) / BK;

	float d[64];
#pragma unroll
	for (int i = 0; i < 64; i++)
		d[i] = 0.0f;

	auto load_stage = [&](int stage, int kt) {
		unsigned sa = base + stage * STAGE_BYTES, sb = sa + BM * BK * 2;
		int k0 = kt * BK;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			int c = tid + i * THREADS;
			int row = c >> 3, ch = c & 7;
			int col = k0 + ch * 8;
			int gr = m0 + row;
			bool ok = gr < M && col < K;
			cp_async16(sa + swz(row, ch), ok ? A + (size_t)gr * K + col : A, ok);
			int gn = n0 + row;
			ok = gn < N && col < K;
			cp_async16(sb + swz(row, ch), ok ? W + (size_t)gn * K + col : W, ok);
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

		unsigned sa = base + (kt % STAGES) * STAGE_BYTES + wg * 64 * 128;
		unsigned sb = base + (kt % STAGES) * STAGE_BYTES + BM * BK * 2;
		asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
		for (int ks = 0; ks < BK / 16; ks++)
			wgmma_128(d, wg_desc(sa + ks * 32), wg_desc(sb + ks * 32));
		asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
		asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
	}
	asm volatile("cp.async.wait_group 0;\n" ::);

	int row = m0 + wg * 64 + warp * 16 + (lane >> 2);
#pragma unroll
	for (int i = 0; i < 16; i++) {
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

static size_t gemm_ref_smem(void)
{
	return (size_t)STAGES * STAGE_BYTES + 1024;
}

extern "C" cudaError_t ds_k_gemm_ref(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                     int K, cudaStream_t st)
{
	if (M <= 0 || N <= 0)
		return cudaSuccess;
	if (K <= 0 || K % 8 != 0)
		return cudaErrorInvalidValue;
	dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
	gemm_ref_kernel<<<grid, THREADS, gemm_ref_smem(), st>>>(A, W, C, M, N, K);
	return cudaGetLastError();
}

extern "C" cudaError_t ds_k_gemm_ref_setup(void)
{
	return cudaFuncSetAttribute(gemm_ref_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                            (int)gemm_ref_smem());
}
