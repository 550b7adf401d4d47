/* mma_prims.cuh - the PTX primitives of the tensor-core attention kernels (attn_mma.cu for the
 * reference path, attn_decode.cu's mma variant for the fast path): cp.async with zero-fill,
 * ldmatrix (plain and transposed), mma.sync m16n8k16 bf16 -> fp32 and bf16x2 packing.
 * tests/gpu/attn_mma_emu.h emulates the same names on the host, so the kernels' sources run in
 * unit tests without a GPU; a kernel file includes either that or this. */
#ifndef DS_MMA_PRIMS_CUH
#define DS_MMA_PRIMS_CUH

#include <cuda_runtime.h>

__device__ __forceinline__ void mt_cp16(void *smem, const void *gmem, bool valid)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	int n = valid ? 16 : 0; /* 0: zero-fill, nothing read */
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}

__device__ __forceinline__ void mt_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

/* Waits until at most N committed groups of this thread's copies are in flight. */
template <int N> __device__ __forceinline__ void mt_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mt_ldsm_x4(unsigned *r, const void *smem)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(s));
}

__device__ __forceinline__ void mt_ldsm_x4_trans(unsigned *r, const void *smem)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(s));
}

__device__ __forceinline__ void mt_mma(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats to 8-byte aligned global memory. */
__device__ __forceinline__ void mt_st2(float *dst, float a, float b)
{
	*(float2 *)dst = make_float2(a, b);
}

/* Two floats as bf16x2, rounded to nearest even (lo in the low half: the lower k / column
 * index). cvt puts its first source in the upper half. */
__device__ __forceinline__ unsigned mt_pack(float lo, float hi)
{
	unsigned r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}

#endif
