/* rows.cu - per-row and element-wise kernels shared by both paths: embedding, RMSNorm (with the
 * residual add fused), SiLU*mul, and the q/k/v epilogue (bias, q/k norm, RoPE, paged KV write).
 *
 * Each of these computes a row from that row alone, with a fixed thread mapping and a fixed
 * reduction tree, so they are batch-invariant by construction and both paths share them.
 * Every kernel first waits for the previous grid (pdl.cuh): a no-op unless the fast path
 * launched it with programmatic dependent launch; the arithmetic is the same either way. */
#include "kernels.h"
#include "cu_common.cuh"
#include "pdl.cuh"
#include "silu.cuh"

#include <stdlib.h>
#include <string.h>

#define ROW_THREADS 256

/* Fixed-order block sum: each warp reduces by a shuffle tree, then warp 0 reduces the warp
 * sums the same way. All threads get the result. */
__device__ float block_sum(float v, float *sh)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	int nw = blockDim.x >> 5;
	float s = lane < nw ? sh[lane] : 0.0f;
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	__syncthreads();
	return s;
}

/* Row t of x = the bf16 table's row ids[t] in fp32. Eight elements a thread per 16-byte load
 * where the row allows (hidden % 8 == 0, both rows 16-byte aligned): one element per iteration
 * stored through a pointer the next load might alias serialised a round trip per element
 * (7.8 us a decode step on the H200, bench/results/gpu-20261130-e572c35-trace). */
__global__ void embed_kernel(const uint16_t *__restrict__ tab, const int32_t *__restrict__ ids,
                             int hidden, float *__restrict__ x)
{
	ds_grid_dep_wait();
	int t = blockIdx.x;
	const uint16_t *src = tab + (size_t)ids[t] * hidden;
	float *dst = x + (size_t)t * hidden;
	if (hidden % 8 == 0 && (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 16 == 0) {
		for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
			uint4 v = __ldg((const uint4 *)(src + i));
			unsigned w[4] = {v.x, v.y, v.z, v.w};
			float f[8];
#pragma unroll
			for (int k = 0; k < 8; k++)
				f[k] = ds_bf16_to_f32((uint16_t)(w[k / 2] >> (16 * (k % 2))));
			*(float4 *)(dst + i) = make_float4(f[0], f[1], f[2], f[3]);
			*(float4 *)(dst + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
		}
		return;
	}
	for (int i = threadIdx.x; i < hidden; i += blockDim.x)
		dst[i] = ds_bf16_to_f32(src[i]);
}

extern "C" cudaError_t ds_k_embed(const uint16_t *tab, const int32_t *ids, int T, int hidden,
                                  float *x, cudaStream_t st)
{
	if (T <= 0)
		return cudaSuccess;
	embed_kernel<<<T, ROW_THREADS, 0, st>>>(tab, ids, hidden, x);
	return cudaGetLastError();
}

/* Rows are walked RMS_BATCH strided elements at a time with every load of a group issued
 * before its stores: the loop body stores through pointers that may alias the next loads, so
 * one element per iteration serialised a memory round trip per element (13.7 us per launch at
 * batch 1 on the H200). Each thread still adds its elements into ss in increasing i, and every
 * element is computed by the same expression: the bits do not change.
 *
 * Rows of at most 16 * blockDim.x elements (hidden 4096 and below at 256 threads) take the
 * register form instead (rms_regs): the weights are loaded before the wait (no kernel writes
 * them), the row's x and delta all at once after it, and the sums stay in registers for the
 * output, so the kernel makes one memory round trip after the wait where the loop makes one per
 * group and pass (four at hidden 4096). Same elements per thread, same order, same expressions:
 * the same bits as the loop. Every load is unconditional (an index past the row reloads the
 * thread's first element, unused): a load under a branch cannot be hoisted above the previous
 * element's add. On the H200, in the decode step's CUPTI timeline (each kernel's advance of the
 * step), the loop took 3.7-3.9 us a launch at batch 8 and 32, ctx 512
 * (bench/results/gpu-20261201-0072def-trace), this form 3.2-3.6
 * (gpu-20261201-30f03fb-rmsregs), and this form with its loads under branches 7.7-8.8
 * (gpu-20261201-30f03fb-rmsbranch). */
#define RMS_BATCH 8

/* The row's delta at element i: parts partial sums pstride elements apart, added in order
 * (parts 1: delta[i] itself, so the reference path's bits do not depend on this). */
__device__ __forceinline__ float rms_delta(const float *d, int parts, size_t pstride, int i)
{
	float s = d[i];
	for (int p = 1; p < parts; p++)
		s += d[(size_t)p * pstride + i];
	return s;
}

/* The row of x that this block normalises (rows gathers it), or -1 for a padding row of a
 * graph-shaped pass, whose output this zeroes (x untouched). */
__device__ __forceinline__ long long rms_src_row(const int32_t *rows, int hidden, uint16_t *out)
{
	int r = blockIdx.x;
	if (rows && rows[r] < 0) {
		for (int i = threadIdx.x; i < hidden; i += blockDim.x)
			out[(size_t)r * hidden + i] = 0;
		return -1;
	}
	return rows ? rows[r] : r;
}

/* P: the delta's partial sums (1: delta itself), all loaded at once */
template <int N, int P>
__device__ __forceinline__ void rms_regs(float *x, const float *delta, size_t pstride,
                                         const int32_t *rows, const uint16_t *w, int hidden,
                                         float eps, uint16_t *out, float *sh)
{
	const int step = blockDim.x;
	float wv[N], v[N];
#pragma unroll
	for (int k = 0; k < N; k++) {
		int i = threadIdx.x + k * step;
		wv[k] = ds_bf16_to_f32(w[i < hidden ? i : threadIdx.x]);
	}
	ds_grid_dep_wait();
	long long src = rms_src_row(rows, hidden, out);
	if (src < 0)
		return;
	float *xr = x + (size_t)src * hidden;
	const float *dr = delta ? delta + (size_t)src * hidden : xr; /* xr: loaded, not added */
	float a[N], dp[P][N];
#pragma unroll
	for (int k = 0; k < N; k++) {
		int i = threadIdx.x + k * step;
		i = i < hidden ? i : threadIdx.x;
		a[k] = xr[i];
#pragma unroll
		for (int p = 0; p < P; p++)
			dp[p][k] = dr[(size_t)p * pstride + i];
	}
#pragma unroll
	for (int k = 0; k < N; k++) {
		float dv = dp[0][k]; /* rms_delta's order */
#pragma unroll
		for (int p = 1; p < P; p++)
			dv += dp[p][k];
		v[k] = delta ? a[k] + dv : a[k];
	}
	float ss = 0.0f;
#pragma unroll
	for (int k = 0; k < N; k++) {
		int i = threadIdx.x + k * step;
		if (i < hidden) {
			if (delta)
				xr[i] = v[k];
			ss = __fmaf_rn(v[k], v[k], ss);
		}
	}
	ss = block_sum(ss, sh);
	float inv = 1.0f / sqrtf(ss / (float)hidden + eps);
	uint16_t *o = out + (size_t)blockIdx.x * hidden;
#pragma unroll
	for (int k = 0; k < N; k++) {
		int i = threadIdx.x + k * step;
		if (i < hidden)
			o[i] = ds_f32_to_bf16(__fmul_rn(__fmul_rn(v[k], inv), wv[k]));
	}
}

__global__ void rmsnorm_kernel(float *x, const float *delta, int parts, size_t pstride,
                               const int32_t *rows, const uint16_t *w, int hidden, float eps,
                               uint16_t *out, int loop)
{
	__shared__ float sh[32];
	const int step = blockDim.x;
	bool regs = !loop && parts == 1; /* loop: the loop form (DS_RMSNORM_LOOP=1) */
	if (regs && hidden <= 4 * step)
		return rms_regs<4, 1>(x, delta, pstride, rows, w, hidden, eps, out, sh);
	if (regs && hidden <= 8 * step)
		return rms_regs<8, 1>(x, delta, pstride, rows, w, hidden, eps, out, sh);
	if (regs && hidden <= 16 * step)
		return rms_regs<16, 1>(x, delta, pstride, rows, w, hidden, eps, out, sh);
	ds_grid_dep_wait();
	long long src = rms_src_row(rows, hidden, out);
	if (src < 0)
		return;
	float *xr = x + (size_t)src * hidden;
	const float *dr = delta ? delta + (size_t)src * hidden : NULL;
	float ss = 0.0f;
	for (int i0 = threadIdx.x; i0 < hidden; i0 += RMS_BATCH * step) {
		float v[RMS_BATCH];
#pragma unroll
		for (int b = 0; b < RMS_BATCH; b++) { /* past the row: reload i0, unused */
			int i = i0 + b * step < hidden ? i0 + b * step : i0;
			v[b] = dr ? xr[i] + rms_delta(dr, parts, pstride, i) : xr[i];
		}
#pragma unroll
		for (int b = 0; b < RMS_BATCH; b++) {
			int i = i0 + b * step;
			if (i < hidden) {
				if (dr)
					xr[i] = v[b];
				ss = __fmaf_rn(v[b], v[b], ss);
			}
		}
	}
	ss = block_sum(ss, sh);
	float inv = 1.0f / sqrtf(ss / (float)hidden + eps);
	uint16_t *o = out + (size_t)blockIdx.x * hidden;
	for (int i0 = threadIdx.x; i0 < hidden; i0 += RMS_BATCH * step) {
		float xv[RMS_BATCH], wv[RMS_BATCH];
#pragma unroll
		for (int b = 0; b < RMS_BATCH; b++) {
			int i = i0 + b * step < hidden ? i0 + b * step : i0;
			xv[b] = xr[i];
			wv[b] = ds_bf16_to_f32(w[i]);
		}
#pragma unroll
		for (int b = 0; b < RMS_BATCH; b++) {
			int i = i0 + b * step;
			if (i < hidden)
				o[i] = ds_f32_to_bf16(__fmul_rn(__fmul_rn(xv[b], inv), wv[b]));
		}
	}
}

/* The delta as 2, 4 or 8 partial sums (the fast path's split-K GEMM partials; other counts
 * take rmsnorm_kernel's loop): RMS_PARTS_THREADS threads a row, so a thread's elements of every
 * part (4 a part at hidden 4096) are loaded at once. At 256 threads, its 16 elements loaded
 * part after part (a round trip each), the norm after the batch-32 down projection took 5.6 us
 * of the decode step (bench/results/gpu-20261201-ab90e53-parts256) against 3.2 without partials
 * (gpu-20261201-30f03fb-rmsregs); this kernel 3.5 (gpu-20261201-ab90e53-parts). A batch-variant
 * thread mapping: only the fast path sums partials. */
#define RMS_PARTS_THREADS 1024

__global__ void __launch_bounds__(RMS_PARTS_THREADS)
    rmsnorm_parts_kernel(float *x, const float *delta, int parts, size_t pstride,
                         const int32_t *rows, const uint16_t *w, int hidden, float eps,
                         uint16_t *out)
{
	__shared__ float sh[32];
	if (parts == 2)
		return rms_regs<4, 2>(x, delta, pstride, rows, w, hidden, eps, out, sh);
	if (parts == 4)
		return rms_regs<4, 4>(x, delta, pstride, rows, w, hidden, eps, out, sh);
	return rms_regs<4, 8>(x, delta, pstride, rows, w, hidden, eps, out, sh);
}

extern "C" cudaError_t ds_k_rmsnorm_parts_pdl(float *x, const float *delta, int parts,
                                              size_t pstride, const int32_t *rows,
                                              const uint16_t *w, int n_rows, int hidden, float eps,
                                              uint16_t *out, int pdl, cudaStream_t st)
{
	if (n_rows <= 0)
		return cudaSuccess;
	if (parts < 1 || (parts > 1 && (!delta || pstride < (size_t)hidden)))
		return cudaErrorInvalidValue;
	if ((parts == 2 || parts == 4 || parts == 8) && hidden <= 4 * RMS_PARTS_THREADS)
		return ds_launch(rmsnorm_parts_kernel, dim3(n_rows), dim3(RMS_PARTS_THREADS), 0, st,
		                 pdl, x, delta, parts, pstride, rows, w, hidden, eps, out);
	/* DS_RMSNORM_LOOP=1: the loop form at every size (the same bits; for timing the forms) */
	const char *lf = getenv("DS_RMSNORM_LOOP");
	int loop = lf && strcmp(lf, "1") == 0;
	return ds_launch(rmsnorm_kernel, dim3(n_rows), dim3(ROW_THREADS), 0, st, pdl, x, delta,
	                 parts, pstride, rows, w, hidden, eps, out, loop);
}

extern "C" cudaError_t ds_k_rmsnorm_pdl(float *x, const float *delta, const int32_t *rows,
                                        const uint16_t *w, int n_rows, int hidden, float eps,
                                        uint16_t *out, int pdl, cudaStream_t st)
{
	return ds_k_rmsnorm_parts_pdl(x, delta, 1, 0, rows, w, n_rows, hidden, eps, out, pdl, st);
}

extern "C" cudaError_t ds_k_rmsnorm(float *x, const float *delta, const int32_t *rows,
                                    const uint16_t *w, int n_rows, int hidden, float eps,
                                    uint16_t *out, cudaStream_t st)
{
	return ds_k_rmsnorm_pdl(x, delta, rows, w, n_rows, hidden, eps, out, 0, st);
}

__global__ void silu_mul_kernel(const float *gu, int ffn, uint16_t *out)
{
	ds_grid_dep_wait();
	int t = blockIdx.y;
	const float *g = gu + (size_t)t * 2 * ffn, *u = g + ffn;
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < ffn)
		out[(size_t)t * ffn + i] = ds_silu_mul_bf16(g[i], u[i]);
}

/* 8 elements per thread with 16-byte loads and stores (ffn % 8 == 0, 16-byte aligned rows):
 * the same arithmetic per element, so the same bits (test_gpu_skinny compares the fused skinny
 * GEMM's bits with it). The scalar kernel moved 1.7-2.1 TB/s on the H200
 * (bench/results/gpu-20261130-71eaa6e-passprof: 0.70 ms for 256 rows, 4.96 ms for 2048 rows
 * over llama3-8b's 32 layers). */
__global__ void silu_mul8_kernel(const float *gu, int ffn, uint16_t *out)
{
	ds_grid_dep_wait();
	int t = blockIdx.y;
	const float *g = gu + (size_t)t * 2 * ffn, *u = g + ffn;
	int i = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
	if (i >= ffn)
		return;
	float4 g0 = *(const float4 *)(g + i), g1 = *(const float4 *)(g + i + 4);
	float4 u0 = *(const float4 *)(u + i), u1 = *(const float4 *)(u + i + 4);
	uint4 o;
	o.x = (unsigned)ds_silu_mul_bf16(g0.x, u0.x) | (unsigned)ds_silu_mul_bf16(g0.y, u0.y) << 16;
	o.y = (unsigned)ds_silu_mul_bf16(g0.z, u0.z) | (unsigned)ds_silu_mul_bf16(g0.w, u0.w) << 16;
	o.z = (unsigned)ds_silu_mul_bf16(g1.x, u1.x) | (unsigned)ds_silu_mul_bf16(g1.y, u1.y) << 16;
	o.w = (unsigned)ds_silu_mul_bf16(g1.z, u1.z) | (unsigned)ds_silu_mul_bf16(g1.w, u1.w) << 16;
	*(uint4 *)(out + (size_t)t * ffn + i) = o;
}

extern "C" cudaError_t ds_k_silu_mul_pdl(const float *gu, int T, int ffn, uint16_t *out, int pdl,
                                         cudaStream_t st)
{
	if (T <= 0)
		return cudaSuccess;
	if (ffn % 8 == 0 && ((uintptr_t)gu | (uintptr_t)out) % 16 == 0) {
		dim3 grid((unsigned)((ffn / 8 + 255) / 256), (unsigned)T);
		return ds_launch(silu_mul8_kernel, grid, dim3(256), 0, st, pdl, gu, ffn, out);
	}
	dim3 grid((unsigned)((ffn + 255) / 256), (unsigned)T);
	return ds_launch(silu_mul_kernel, grid, dim3(256), 0, st, pdl, gu, ffn, out);
}

extern "C" cudaError_t ds_k_silu_mul(const float *gu, int T, int ffn, uint16_t *out,
                                     cudaStream_t st)
{
	return ds_k_silu_mul_pdl(gu, T, ffn, out, 0, st);
}

/* ---- q/k/v epilogue: one warp per head; a token's heads spread over gridDim.y blocks ---- */

#define QKV_WARPS 4

__global__ void qkv_rope_kernel(const float *qkv, const uint16_t *bias, const uint16_t *q_norm,
                                const uint16_t *k_norm, const float *cs, struct ds_k_tokmeta tm,
                                struct ds_k_dims d, uint16_t *q, uint16_t *kv)
{
	extern __shared__ float sh_qkv[]; /* (QKV_WARPS, head_dim) */
	ds_grid_dep_wait();
	int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int D = d.head_dim, half = D / 2;
	int n_all = d.n_head + 2 * d.n_kv;
	int pos = tm.pos[t];
	float *buf = sh_qkv + warp * D;
	const float *row = qkv + (size_t)t * n_all * D;
	size_t kv_head_stride = (size_t)d.block_size * D;
	uint16_t *kblk = NULL;
	if (pos >= 0) {
		int blk = tm.bt[tm.bt_off[tm.seq[t]] + pos / d.block_size];
		kblk = kv + (size_t)blk * 2 * d.n_kv * kv_head_stride +
		       (size_t)(pos % d.block_size) * D;
	}
	for (int h = blockIdx.y * QKV_WARPS + warp; h < n_all; h += QKV_WARPS * gridDim.y) {
		const float *src = row + (size_t)h * D;
		for (int i = lane; i < D; i += 32) {
			float v = src[i];
			if (bias)
				v = __fadd_rn(v, ds_bf16_to_f32(bias[h * D + i]));
			buf[i] = v;
		}
		__syncwarp();
		bool is_q = h < d.n_head, is_k = !is_q && h < d.n_head + d.n_kv;
		const uint16_t *nw = is_q ? q_norm : is_k ? k_norm : NULL;
		if (nw) {
			float ss = 0.0f;
			for (int i = lane; i < D; i += 32)
				ss = __fmaf_rn(buf[i], buf[i], ss);
			for (int o = 16; o > 0; o >>= 1)
				ss += __shfl_xor_sync(0xffffffffu, ss, o);
			float inv = 1.0f / sqrtf(ss / (float)D + d.eps);
			__syncwarp();
			for (int i = lane; i < D; i += 32)
				buf[i] = __fmul_rn(__fmul_rn(buf[i], inv), ds_bf16_to_f32(nw[i]));
			__syncwarp();
		}
		uint16_t *dst;
		if (is_q)
			dst = q + ((size_t)t * d.n_head + h) * D;
		else if (pos < 0)
			dst = NULL;
		else if (is_k)
			dst = kblk + (size_t)(h - d.n_head) * kv_head_stride;
		else
			dst = kblk + (size_t)(d.n_kv + h - d.n_head - d.n_kv) * kv_head_stride;
		if (dst) {
			if (!is_q && !is_k) {
				for (int i = lane; i < D; i += 32)
					dst[i] = ds_f32_to_bf16(buf[i]);
			} else if (pos < 0) {
				for (int i = lane; i < D; i += 32)
					dst[i] = 0;
			} else {
				const float *c = cs + (size_t)pos * half * 2;
				for (int i = lane; i < half; i += 32) {
					float x1 = buf[i], x2 = buf[i + half];
					float co = c[2 * i], si = c[2 * i + 1];
					dst[i] = ds_f32_to_bf16(
					    __fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si)));
					dst[i + half] = ds_f32_to_bf16(
					    __fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si)));
				}
			}
		}
		__syncwarp();
	}
}

extern "C" cudaError_t ds_k_qkv_rope_pdl(const float *qkv, const uint16_t *bias,
                                         const uint16_t *q_norm, const uint16_t *k_norm,
                                         const float *cs, struct ds_k_tokmeta tm, int T,
                                         struct ds_k_dims d, uint16_t *q, uint16_t *kv, int pdl,
                                         cudaStream_t st)
{
	if (T <= 0)
		return cudaSuccess;
	size_t shm = (size_t)QKV_WARPS * d.head_dim * sizeof(float);
	/* small batches spread a token's heads over several blocks */
	int n_all = d.n_head + 2 * d.n_kv, groups = (n_all + QKV_WARPS - 1) / QKV_WARPS;
	int gy = T >= 64 ? 1 : groups;
	return ds_launch(qkv_rope_kernel, dim3(T, gy), dim3(QKV_WARPS * 32), shm, st, pdl, qkv,
	                 bias, q_norm, k_norm, cs, tm, d, q, kv);
}

extern "C" cudaError_t ds_k_qkv_rope(const float *qkv, const uint16_t *bias, const uint16_t *q_norm,
                                     const uint16_t *k_norm, const float *cs,
                                     struct ds_k_tokmeta tm, int T, struct ds_k_dims d, uint16_t *q,
                                     uint16_t *kv, cudaStream_t st)
{
	return ds_k_qkv_rope_pdl(qkv, bias, q_norm, k_norm, cs, tm, T, d, q, kv, 0, st);
}
