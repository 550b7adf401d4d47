/* attn.cu - paged causal attention for both paths, built from one tile routine.
 *
 * A tile is up to DS_K_ATTN_TILE consecutive KV positions of one KV head. The tile routine
 * stages K and V in shared memory, computes the G = n_head / n_kv query heads' scores, the
 * tile max, the sum of exponentials and the weighted V sum in a fixed order, giving a partial
 * (m, l, acc). Partials are merged in increasing position order with one merge formula
 * written with explicit rounding intrinsics, so merging in a block (one block walks all tiles)
 * and merging stored partials in a second kernel give the same bits.
 *  - Reference: tiles aligned to absolute positions 0, 64, 128, ... whatever the pass shape;
 *    the split (one block per tile + combine, or one block for all tiles) is chosen only by
 *    workspace size and cannot change the result.
 *  - Fast: flash-decoding; each row's KV is cut into at most n_split ranges of whole tiles (at
 *    least two), the count chosen by the caller from batch and occupancy, so the bits depend
 *    on n_split. */
#include "kernels.h"
#include "pdl.cuh"
#include "cu_common.cuh"

#include <math.h>

#define TILE DS_K_ATTN_TILE
#define KPAD 8 /* bf16 padding per staged K/V row: rows start 16 bytes apart in the banks */
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)

struct attn_smem {
	uint16_t *ks, *vs;  /* (nbuf, TILE, D + KPAD) */
	float *qs;          /* (G, D) */
	float *ps;          /* (G, TILE) */
	float *tm, *tl;     /* (G) tile partial */
	float *sm, *sl;     /* (G) running state */
	float *tacc, *sacc; /* (G, D) */
};

/* nbuf: K/V tile buffers (the kernel supports 2, loading the next tile while computing the
 * current one, but uses 1: see attn_kernel). */
__host__ __device__ static size_t attn_smem_bytes(int G, int D, int nbuf)
{
	return (size_t)2 * nbuf * TILE * (D + KPAD) * sizeof(uint16_t) +
	       ((size_t)G * D * 3 + (size_t)G * TILE + 4 * (size_t)G) * sizeof(float);
}

__device__ static struct attn_smem attn_smem_carve(unsigned char *base, int G, int D, int nbuf)
{
	struct attn_smem s;
	s.ks = (uint16_t *)base;
	s.vs = s.ks + nbuf * TILE * (D + KPAD);
	float *f = (float *)(s.vs + nbuf * TILE * (D + KPAD));
	s.qs = f;
	f += G * D;
	s.ps = f;
	f += G * TILE;
	s.tm = f;
	s.tl = f + G;
	s.sm = f + 2 * G;
	s.sl = f + 3 * G;
	f += 4 * G;
	s.tacc = f;
	s.sacc = f + G * D;
	return s;
}

/* The merge coefficients of state (m) with a partial (pm), pm finite. */
__device__ __forceinline__ void merge_coef(float m, float pm, float *a, float *b)
{
	float mn = fmaxf(m, pm);
	*a = expf(m - mn); /* 0 when the state is empty (m = -inf) */
	*b = expf(pm - mn);
}

__device__ __forceinline__ float merge_val(float v, float a, float pv, float b)
{
	return __fmaf_rn(v, a, __fmul_rn(pv, b));
}

__device__ __forceinline__ float finalize(float acc, float l)
{
	return __fdiv_rn(acc, l);
}

/* Where position pos of KV head kh lives (K; V is n_kv * block_size * D further). */
__device__ __forceinline__ const uint16_t *kv_row(const uint16_t *kv, const int32_t *bt,
                                                  struct ds_k_dims d, int kh, int pos)
{
	int blk = bt[pos / d.block_size];
	return kv + ((size_t)blk * 2 * d.n_kv + kh) * d.block_size * d.head_dim +
	       (size_t)(pos % d.block_size) * d.head_dim;
}

__device__ __forceinline__ void att_cp16(void *smem, const void *gmem)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}

__device__ __forceinline__ float bf_lo(unsigned u)
{
	return __uint_as_float(u << 16);
}

__device__ __forceinline__ float bf_hi(unsigned u)
{
	return __uint_as_float(u & 0xffff0000u);
}

/* A tile partial: each score is one thread's dot product over d in increasing order; each acc
 * element one thread's sum over positions in increasing order (s.qs must be loaded). */
/* Issues (and commits as one group) the cp.async copies of positions [lo, hi) into buffer buf. */
__device__ void tile_load(struct attn_smem s, int buf, const uint16_t *kv, const int32_t *bt,
                          struct ds_k_dims d, int kh, int lo, int hi)
{
	int D = d.head_dim, RS = D + KPAD, len = hi - lo, vpr = D / 8;
	size_t vstride = (size_t)d.n_kv * d.block_size * D;
	uint16_t *ks = s.ks + buf * TILE * RS, *vs = s.vs + buf * TILE * RS;
	for (int i = threadIdx.x; i < len * vpr; i += ATT_THREADS) {
		int j = i / vpr, v = i % vpr;
		const uint16_t *src = kv_row(kv, bt, d, kh, lo + j) + v * 8;
		att_cp16(ks + j * RS + v * 8, src);
		att_cp16(vs + j * RS + v * 8, src + vstride);
	}
	asm volatile("cp.async.commit_group;\n" ::);
}

/* Computes the partial of a loaded tile of len positions in buffer buf into s.tm/s.tl/s.tacc.
 * The caller has waited for the tile's copies. Begins and ends with a barrier. */
__device__ void tile_partial(struct attn_smem s, int buf, struct ds_k_dims d, int G, float scale,
                             int len)
{
	int D = d.head_dim, RS = D + KPAD;
	int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	struct attn_smem sb = s;
	sb.ks = s.ks + buf * TILE * RS;
	sb.vs = s.vs + buf * TILE * RS;
	s = sb;
	__syncthreads();
	for (int idx = tid; idx < G * len; idx += ATT_THREADS) {
		int g = idx / len, j = idx % len;
		const uint16_t *kr = s.ks + j * RS;
		const float *qr = s.qs + g * D;
		float acc = 0.0f;
		for (int k = 0; k < D; k += 8) {
			uint4 kk = *(const uint4 *)(kr + k);
			float4 q0 = *(const float4 *)(qr + k), q1 = *(const float4 *)(qr + k + 4);
			acc = __fmaf_rn(q0.x, bf_lo(kk.x), acc);
			acc = __fmaf_rn(q0.y, bf_hi(kk.x), acc);
			acc = __fmaf_rn(q0.z, bf_lo(kk.y), acc);
			acc = __fmaf_rn(q0.w, bf_hi(kk.y), acc);
			acc = __fmaf_rn(q1.x, bf_lo(kk.z), acc);
			acc = __fmaf_rn(q1.y, bf_hi(kk.z), acc);
			acc = __fmaf_rn(q1.z, bf_lo(kk.w), acc);
			acc = __fmaf_rn(q1.w, bf_hi(kk.w), acc);
		}
		s.ps[g * TILE + j] = __fmul_rn(acc, scale);
	}
	__syncthreads();
	for (int g = warp; g < G; g += ATT_WARPS) {
		float *pr = s.ps + g * TILE;
		float m = -INFINITY;
		for (int j = lane; j < len; j += 32)
			m = fmaxf(m, pr[j]);
		for (int o = 16; o > 0; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
		float l = 0.0f;
		for (int j = lane; j < len; j += 32) {
			float p = expf(pr[j] - m);
			pr[j] = p;
			l = __fadd_rn(l, p);
		}
		for (int o = 16; o > 0; o >>= 1)
			l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, o));
		if (lane == 0) {
			s.tm[g] = m;
			s.tl[g] = l;
		}
	}
	__syncthreads();
	int q4 = D / 4;
	for (int idx = tid; idx < G * q4; idx += ATT_THREADS) {
		int g = idx / q4, k = (idx % q4) * 4;
		const float *pr = s.ps + g * TILE;
		float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
		for (int j = 0; j < len; j++) {
			float p = pr[j];
			uint2 v = *(const uint2 *)(s.vs + j * RS + k);
			a0 = __fmaf_rn(p, bf_lo(v.x), a0);
			a1 = __fmaf_rn(p, bf_hi(v.x), a1);
			a2 = __fmaf_rn(p, bf_lo(v.y), a2);
			a3 = __fmaf_rn(p, bf_hi(v.y), a3);
		}
		float *t = s.tacc + g * D + k;
		t[0] = a0;
		t[1] = a1;
		t[2] = a2;
		t[3] = a3;
	}
	__syncthreads();
}

/* state = merge(state, tile partial); ends with a barrier. */
__device__ void state_merge_tile(struct attn_smem s, int G, int D)
{
	for (int idx = threadIdx.x; idx < G * D; idx += ATT_THREADS) {
		int g = idx / D;
		float a, b;
		merge_coef(s.sm[g], s.tm[g], &a, &b);
		s.sacc[idx] = merge_val(s.sacc[idx], a, s.tacc[idx], b);
	}
	__syncthreads();
	for (int g = threadIdx.x; g < G; g += ATT_THREADS) {
		float a, b;
		merge_coef(s.sm[g], s.tm[g], &a, &b);
		s.sl[g] = merge_val(s.sl[g], a, s.tl[g], b);
		s.sm[g] = fmaxf(s.sm[g], s.tm[g]);
	}
	__syncthreads();
}

__device__ void state_reset(struct attn_smem s, int G, int D)
{
	for (int idx = threadIdx.x; idx < G * D; idx += ATT_THREADS)
		s.sacc[idx] = 0.0f;
	for (int g = threadIdx.x; g < G; g += ATT_THREADS) {
		s.sm[g] = -INFINITY;
		s.sl[g] = 0.0f;
	}
	__syncthreads();
}

/* mode 0: ref, all tiles in this block; mode 1: ref, tile blockIdx.z into part;
 * mode 2: fast, range blockIdx.z of gridDim.z (gridDim.z == 1: write out directly). */
template <int MODE>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_kernel(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm, struct ds_k_dims d,
                float scale, float *part, uint16_t *out)
{
	extern __shared__ __align__(16) unsigned char att_smem[];
	ds_grid_dep_wait(); /* no-op unless launched with PDL (the fast path's decode chain) */
	int t = blockIdx.x, kh = blockIdx.y, z = blockIdx.z, nz = gridDim.z;
	int D = d.head_dim, G = d.n_head / d.n_kv;
	int p = tm.pos[t];
	/* One K/V buffer: double-buffering a block's tiles measured slower on the H200 (2 instead
	 * of 5 resident blocks per SM; bench/results/gpu-*-2026-11-29.json). */
	const int nbuf = 1;
	struct attn_smem s = attn_smem_carve(att_smem, G, D, nbuf);
	size_t prow = (size_t)(D + 2);
	bool direct = MODE == 0 || (MODE == 2 && nz == 1);
	if (p < 0) {
		if (direct)
			for (int idx = threadIdx.x; idx < G * D; idx += ATT_THREADS)
				out[((size_t)t * d.n_head + kh * G) * D + idx] = 0;
		return;
	}
	const int32_t *bt = tm.bt + tm.bt_off[tm.seq[t]];
	int lo, hi;
	if (MODE == 0) {
		lo = 0;
		hi = p + 1;
	} else if (MODE == 1) {
		lo = z * TILE;
		if (lo > p)
			return;
		hi = min(lo + TILE, p + 1);
	} else {
		int len = p + 1;
		int chunk = (len + nz - 1) / nz;
		chunk = max((chunk + TILE - 1) / TILE * TILE, 2 * TILE);
		lo = z * chunk;
		hi = min(lo + chunk, len);
	}
	for (int idx = threadIdx.x; idx < G * D; idx += ATT_THREADS)
		s.qs[idx] = ds_bf16_to_f32(q[((size_t)t * d.n_head + kh * G) * D + idx]);
	state_reset(s, G, D);
	/* tiles start at lo (ref: a multiple of TILE); with two buffers the next tile's copies
	 * would be in flight while the current one is computed */
	if (lo < hi)
		tile_load(s, 0, kv, bt, d, kh, lo, min(lo + TILE, hi));
	for (int a = lo, i = 0; a < hi; a += TILE, i++) {
		int next = a + TILE;
		if (nbuf == 1 &&
		    i > 0) /* the previous tile's compute has finished with the buffer */
			tile_load(s, 0, kv, bt, d, kh, a, min(a + TILE, hi));
		if (nbuf == 2 && next < hi) {
			tile_load(s, (i + 1) & 1, kv, bt, d, kh, next, min(next + TILE, hi));
			asm volatile("cp.async.wait_group 1;\n" ::);
		} else {
			asm volatile("cp.async.wait_group 0;\n" ::);
		}
		tile_partial(s, nbuf == 2 ? (i & 1) : 0, d, G, scale, min(a + TILE, hi) - a);
		state_merge_tile(s, G, D);
	}
	if (direct) {
		for (int idx = threadIdx.x; idx < G * D; idx += ATT_THREADS)
			out[((size_t)t * d.n_head + kh * G) * D + idx] =
			    ds_f32_to_bf16(finalize(s.sacc[idx], s.sl[idx / D]));
		return;
	}
	for (int g = 0; g < G; g++) {
		float *dst = part + (((size_t)t * d.n_head + kh * G + g) * nz + z) * prow;
		for (int k = threadIdx.x; k < D; k += ATT_THREADS)
			dst[2 + k] = s.sacc[g * D + k];
		if (threadIdx.x == 0) {
			dst[0] = s.sm[g];
			dst[1] = s.sl[g];
		}
	}
}

/* Merges the stored partials of each (row, head) in increasing order. nz_fixed == 0: the
 * reference layout (tile count from the position). */
__global__ void attn_combine_kernel(const float *part, struct ds_k_tokmeta tm, struct ds_k_dims d,
                                    int nz, int ref, uint16_t *out)
{
	ds_grid_dep_wait();
	int t = blockIdx.x, h = blockIdx.y, D = d.head_dim;
	int p = tm.pos[t];
	uint16_t *o = out + ((size_t)t * d.n_head + h) * D;
	if (p < 0) {
		for (int k = threadIdx.x; k < D; k += blockDim.x)
			o[k] = 0;
		return;
	}
	int nc = ref ? p / TILE + 1 : nz;
	size_t prow = (size_t)(D + 2);
	const float *base = part + ((size_t)t * d.n_head + h) * nz * prow;
	for (int k = threadIdx.x; k < D; k += blockDim.x) {
		float m = -INFINITY, l = 0.0f, acc = 0.0f;
		for (int c = 0; c < nc; c++) {
			const float *pc = base + c * prow;
			float pm = pc[0];
			if (pm == -INFINITY)
				continue;
			float a, b;
			merge_coef(m, pm, &a, &b);
			acc = merge_val(acc, a, pc[2 + k], b);
			l = merge_val(l, a, pc[1], b);
			m = fmaxf(m, pm);
		}
		o[k] = ds_f32_to_bf16(finalize(acc, l));
	}
}

extern "C" cudaError_t ds_k_attn_setup(struct ds_k_dims d)
{
	int G = d.n_head / d.n_kv;
	int shm = (int)attn_smem_bytes(G, d.head_dim, 1);
	cudaError_t e;
	if ((e = cudaFuncSetAttribute(attn_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                              shm)) != cudaSuccess)
		return e;
	if ((e = cudaFuncSetAttribute(attn_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                              shm)) != cudaSuccess)
		return e;
	return cudaFuncSetAttribute(attn_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                            shm);
}

static bool attn_dims_ok(struct ds_k_dims d)
{
	return d.n_kv > 0 && d.n_head % d.n_kv == 0 && d.head_dim % 8 == 0 && d.head_dim <= 512;
}

extern "C" cudaError_t ds_k_attn_ref(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm,
                                     int T, struct ds_k_dims d, int split, float *part,
                                     uint16_t *out, cudaStream_t st)
{
	if (T <= 0)
		return cudaSuccess;
	if (!attn_dims_ok(d))
		return cudaErrorInvalidValue;
	int G = d.n_head / d.n_kv;
	float scale = 1.0f / sqrtf((float)d.head_dim);
	if (split <= 0) {
		attn_kernel<0>
		    <<<dim3(T, d.n_kv, 1), ATT_THREADS, attn_smem_bytes(G, d.head_dim, 1), st>>>(
		        q, kv, tm, d, scale, NULL, out);
		return cudaGetLastError();
	}
	attn_kernel<1>
	    <<<dim3(T, d.n_kv, split), ATT_THREADS, attn_smem_bytes(G, d.head_dim, 1), st>>>(
	        q, kv, tm, d, scale, part, out);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	int cthreads = d.head_dim < 128 ? d.head_dim : 128;
	attn_combine_kernel<<<dim3(T, d.n_head), cthreads, 0, st>>>(part, tm, d, split, 1, out);
	return cudaGetLastError();
}

extern "C" cudaError_t ds_k_attn_fast_pdl(const uint16_t *q, const uint16_t *kv,
                                          struct ds_k_tokmeta tm, int T, struct ds_k_dims d,
                                          int n_split, float *part, uint16_t *out, int pdl,
                                          cudaStream_t st)
{
	if (T <= 0)
		return cudaSuccess;
	if (!attn_dims_ok(d) || n_split < 1)
		return cudaErrorInvalidValue;
	int G = d.n_head / d.n_kv;
	size_t shm = attn_smem_bytes(G, d.head_dim, 1);
	float scale = 1.0f / sqrtf((float)d.head_dim);
	cudaError_t e = ds_launch(attn_kernel<2>, dim3(T, d.n_kv, n_split), dim3(ATT_THREADS), shm,
	                          st, pdl, q, kv, tm, d, scale, part, out);
	if (e != cudaSuccess || n_split == 1)
		return e;
	int cthreads = d.head_dim < 128 ? d.head_dim : 128;
	return ds_launch(attn_combine_kernel, dim3(T, d.n_head), dim3(cthreads), 0, st, pdl,
	                 (const float *)part, tm, d, n_split, 0, out);
}

extern "C" cudaError_t ds_k_attn_fast(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm,
                                      int T, struct ds_k_dims d, int n_split, float *part,
                                      uint16_t *out, cudaStream_t st)
{
	return ds_k_attn_fast_pdl(q, kv, tm, T, d, n_split, part, out, 0, st);
}
