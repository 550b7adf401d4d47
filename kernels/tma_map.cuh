/* tma_map.cuh - tensor maps for TMA copies (cp.async.bulk.tensor), encoded on the host through
 * the runtime's driver entry point (no link against libcuda), and the device-side copies. Used by
 * the reference GEMM's TMA variants (gemm_ref_tma.cu) and the streaming skinny GEMM
 * (skinny_stream.cu). */
#ifndef DS_TMA_MAP_CUH
#define DS_TMA_MAP_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* A tensor map of rank dimensions over p: dims[i] elements along dimension i (0 innermost),
 * strides[i] bytes between consecutive indices of dimension i + 1, boxes of box[i] elements;
 * out-of-bounds elements read as zero, L2 promotion of 256 bytes. cudaErrorNotSupported when
 * the driver has no encoder, cudaErrorInvalidValue when it refuses the map. */
cudaError_t ds_tma_encode(CUtensorMap *tm, CUtensorMapDataType type, int rank, const void *p,
                          const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                          CUtensorMapSwizzle swizzle);

/* Box at coordinates (c0, c1) of the 2D map tm into shared dst, completing on mbarrier bar; with
 * an L2 cache policy when hint. */
__device__ __forceinline__ void ds_tma_2d(unsigned dst, const CUtensorMap *tm, int c0, int c1,
                                          unsigned bar, bool hint, unsigned long long pol)
{
	if (hint)
		asm volatile(
		    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
		    ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
		    "l"((uint64_t)tm), "r"(c0), "r"(c1), "r"(bar), "l"(pol)
		    : "memory");
	else
		asm volatile(
		    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
		    " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
		    "l"((uint64_t)tm), "r"(c0), "r"(c1), "r"(bar)
		    : "memory");
}

/* The same for a 3D map at (c0, c1, c2), no cache hint. */
__device__ __forceinline__ void ds_tma_3d(unsigned dst, const CUtensorMap *tm, int c0, int c1,
                                          int c2, unsigned bar)
{
	asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
	             " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
	             "l"((uint64_t)tm), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
	             : "memory");
}

#endif
