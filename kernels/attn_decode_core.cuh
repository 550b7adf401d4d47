/* attn_decode_core.cuh - the pieces of the fast path's flash-decoding kernel (attn_decode.cu) that
 * other kernels reuse: the per-row split, the lane mapping of K/V loads, the online-softmax
 * step and the merges of (m, l, acc) states. The fused decode-layer kernel (mega.cu) runs them
 * with its own warp count, so nothing here depends on the block shape except dattn_shape::PB
 * (attn_decode.cu's DA_WARPS warps per block). */
#ifndef DS_ATTN_DECODE_CORE_CUH
#define DS_ATTN_DECODE_CORE_CUH

#include <math.h>
#include <stdint.h>

#include "cu_common.cuh" /* ds_f32_to_bf16 */
#include "kernels.h"    /* struct ds_k_dims */

#define DA_WARPS 4
#define DA_THREADS (DA_WARPS * 32)
#define DA_LOG2E 1.4426950408889634f

/* Per-row split: at most nz ranges of whole block iterations (pb positions each). */
__device__ __forceinline__ void dattn_split(int len, int nz, int pb, int *chunk, int *nsu)
{
	int ns = min(nz, (len + pb - 1) / pb);
	int c = (len + ns - 1) / ns;
	c = (c + pb - 1) / pb * pb;
	*chunk = c;
	*nsu = (len + c - 1) / c;
}

__device__ __forceinline__ void dattn_unpack(uint4 u, float (&f)[8])
{
	f[0] = __uint_as_float(u.x << 16);
	f[1] = __uint_as_float(u.x & 0xffff0000u);
	f[2] = __uint_as_float(u.y << 16);
	f[3] = __uint_as_float(u.y & 0xffff0000u);
	f[4] = __uint_as_float(u.z << 16);
	f[5] = __uint_as_float(u.z & 0xffff0000u);
	f[6] = __uint_as_float(u.w << 16);
	f[7] = __uint_as_float(u.w & 0xffff0000u);
}

/* Compile-time shape of one (head_dim, G) instance. */
template <int D, int G> struct dattn_shape {
	static constexpr int LP = D / 8;              /* lanes per position */
	static constexpr int PPS = 32 / LP;           /* positions per warp step */
	static constexpr int U = G <= 4 ? 4 : 2;      /* steps per iteration */
	static constexpr int PB = DA_WARPS * U * PPS; /* positions per block iteration */
};

/* What one block needs to find its K/V rows. */
struct dattn_src {
	const uint16_t *kv;   /* K of KV head kh at block 0, position 0, this lane's 8 dims */
	const int32_t *bt;    /* the row's block table */
	size_t blk_stride;    /* elements between consecutive KV blocks */
	size_t vstride;       /* elements from K to V */
	int bs, shift, D, hi; /* shift: log2(bs) when bs is a power of two, else -1 */
	const int *sbt;       /* NULL, or (the mma variant) entries bi0.. of bt in shared memory */
	int bi0;
};

/* The K/V source of a block: kv already at its KV head (and the lane's dims), positions below
 * hi, the row's block table bt; the cache layout of d (head_dim D). */
template <int D>
__device__ __forceinline__ struct dattn_src
dattn_src_of(const struct ds_k_dims &d, const uint16_t *kv, int hi, const int32_t *bt)
{
	struct dattn_src s;
	s.bs = d.block_size;
	s.shift = (d.block_size & (d.block_size - 1)) == 0 ? __ffs(d.block_size) - 1 : -1;
	s.D = D;
	s.hi = hi;
	s.blk_stride = (size_t)2 * d.n_kv * d.block_size * D;
	s.vstride = (size_t)d.n_kv * d.block_size * D;
	s.kv = kv;
	s.bt = bt;
	s.sbt = NULL;
	s.bi0 = 0;
	return s;
}

/* This lane's 8 dims (sub) of the G query heads at q (head 0 of the KV head's group), fp32,
 * times qscale; CG: read through L2 (q written earlier in the same launch). */
template <int D, int G, bool CG = false>
__device__ __forceinline__ void dattn_load_q(const uint16_t *q, int sub, float qscale,
                                             float (&qr)[G][8])
{
#pragma unroll
	for (int g = 0; g < G; g++) {
		const uint4 *p = (const uint4 *)(q + (size_t)g * D + sub * 8);
		dattn_unpack(CG ? __ldcg(p) : __ldg(p), qr[g]);
#pragma unroll
		for (int i = 0; i < 8; i++)
			qr[g][i] *= qscale;
	}
}

/* An empty online-softmax state. */
template <int G>
__device__ __forceinline__ void dattn_state_init(float (&m)[G], float (&l)[G], float (&acc)[G][8])
{
#pragma unroll
	for (int g = 0; g < G; g++) {
		m[g] = -INFINITY;
		l[g] = 0.0f;
#pragma unroll
		for (int i = 0; i < 8; i++)
			acc[g][i] = 0.0f;
	}
}

/* The index in the row's block table of the cache block holding position pos. */
__device__ __forceinline__ int dattn_blk_index(const struct dattn_src &s, int pos)
{
	/* a power-of-two block size (the usual case) avoids integer division */
	return s.shift >= 0 ? pos >> s.shift : pos / s.bs;
}

/* Where position pos's K sits, in elements from s.kv (its V is s.vstride further); the block id
 * from the shared-memory copy of the table when the source has one (s.sbt). */
__device__ __forceinline__ size_t dattn_kv_off(const struct dattn_src &s, int pos)
{
	int bi = dattn_blk_index(s, pos);
	int blk = s.sbt ? s.sbt[bi - s.bi0] : __ldg(s.bt + bi);
	return (size_t)blk * s.blk_stride + (size_t)(pos - bi * s.bs) * s.D;
}

/* Where position pos of the source's KV head lives (K; V is s.vstride further). */
__device__ __forceinline__ const uint16_t *dattn_row(const struct dattn_src &s, int pos)
{
	return s.kv + dattn_kv_off(s, pos);
}

/* Loads U steps of this lane's K and V (positions base + u * PPS; zeros past hi). */
template <int U, int PPS, bool CG = false>
__device__ __forceinline__ void dattn_load(const struct dattn_src &s, int base, uint4 (&k)[U],
                                           uint4 (&v)[U])
{
#pragma unroll
	for (int u = 0; u < U; u++) {
		int pos = base + u * PPS;
		if (pos < s.hi) {
			const uint16_t *r = s.kv + dattn_kv_off(s, pos);
			k[u] = CG ? __ldcg((const uint4 *)r) : __ldg((const uint4 *)r);
			v[u] = CG ? __ldcg((const uint4 *)(r + s.vstride))
			          : __ldg((const uint4 *)(r + s.vstride));
		} else {
			k[u] = make_uint4(0, 0, 0, 0);
			v[u] = make_uint4(0, 0, 0, 0);
		}
	}
}

/* Folds U loaded steps into this lane group's online-softmax state (base-2 domain). */
template <int D, int G>
__device__ __forceinline__ void
dattn_step(const uint4 (&k)[dattn_shape<D, G>::U], const uint4 (&v)[dattn_shape<D, G>::U], int base,
           int hi, const float (&qr)[G][8], float (&m)[G], float (&l)[G], float (&acc)[G][8])
{
	typedef dattn_shape<D, G> S;
	float s[S::U][G];
#pragma unroll
	for (int u = 0; u < S::U; u++) {
		float kf[8];
		dattn_unpack(k[u], kf);
#pragma unroll
		for (int g = 0; g < G; g++) {
			float a = 0.0f;
#pragma unroll
			for (int i = 0; i < 8; i++)
				a = fmaf(qr[g][i], kf[i], a);
			s[u][g] = a;
		}
	}
#pragma unroll
	for (int u = 0; u < S::U; u++)
#pragma unroll
		for (int g = 0; g < G; g++) {
#pragma unroll
			for (int o = S::LP / 2; o > 0; o >>= 1)
				s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], o);
			if (base + u * S::PPS >= hi)
				s[u][g] = -INFINITY;
		}
	float p[S::U][G];
#pragma unroll
	for (int g = 0; g < G; g++) {
		float mx = m[g];
#pragma unroll
		for (int u = 0; u < S::U; u++)
			mx = fmaxf(mx, s[u][g]);
		if (mx == -INFINITY) { /* nothing seen yet and every position here masked */
#pragma unroll
			for (int u = 0; u < S::U; u++)
				p[u][g] = 0.0f;
			continue;
		}
		float alpha = exp2f(m[g] - mx); /* 0 when m = -inf */
		m[g] = mx;
		l[g] *= alpha;
#pragma unroll
		for (int i = 0; i < 8; i++)
			acc[g][i] *= alpha;
#pragma unroll
		for (int u = 0; u < S::U; u++) {
			p[u][g] = exp2f(s[u][g] - mx); /* 0 for masked positions */
			l[g] += p[u][g];
		}
	}
#pragma unroll
	for (int u = 0; u < S::U; u++) {
		float vf[8];
		dattn_unpack(v[u], vf);
#pragma unroll
		for (int g = 0; g < G; g++)
#pragma unroll
			for (int i = 0; i < 8; i++)
				acc[g][i] = fmaf(p[u][g], vf[i], acc[g][i]);
	}
}

/* Merges state (mo, lo, ao) into (m, l, a); either may be empty (m = -inf). */
__device__ __forceinline__ void dattn_weights(float m, float mo, float *wa, float *wb)
{
	float mn = fmaxf(m, mo);
	*wa = m == -INFINITY ? 0.0f : exp2f(m - mn);
	*wb = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
}

#define DATTN_MERGE_BATCH 16

/* The m, l and acc[k] of splits z0 .. z0 + DATTN_MERGE_BATCH - 1 below nsu (past nsu: m = -inf,
 * l = acc = 0). */
__device__ __forceinline__ void dattn_merge_load(const float *base, int z0, int nsu, size_t prow,
                                                 int k, float (&m)[DATTN_MERGE_BATCH],
                                                 float (&l)[DATTN_MERGE_BATCH],
                                                 float (&a)[DATTN_MERGE_BATCH])
{
#pragma unroll
	for (int j = 0; j < DATTN_MERGE_BATCH; j++) {
		const float *pz = base + (z0 + j) * prow;
		bool in = z0 + j < nsu;
		m[j] = in ? __ldcg(pz) : -INFINITY;
		l[j] = in ? __ldcg(pz + 1) : 0.0f;
		a[j] = in ? __ldcg(pz + 2 + k) : 0.0f;
	}
}

/* Folds the loaded splits z0 .. below nsu into L and A under the maximum M, in split order. */
__device__ __forceinline__ void dattn_merge_fold(int z0, int nsu, float M,
                                                 const float (&m)[DATTN_MERGE_BATCH],
                                                 const float (&l)[DATTN_MERGE_BATCH],
                                                 const float (&a)[DATTN_MERGE_BATCH], float &L,
                                                 float &A)
{
#pragma unroll
	for (int j = 0; j < DATTN_MERGE_BATCH; j++) {
		if (z0 + j >= nsu)
			break;
		float e = m[j] == -INFINITY ? 0.0f : exp2f(m[j] - M);
		L = fmaf(l[j], e, L);
		A = fmaf(a[j], e, A);
	}
}

/* The merged output of one head at dim k from its nsu partials (base: split 0; rows of prow
 * floats: m, l, acc[D]). One arithmetic for the combine kernel and the fused merge; __ldcg
 * because other blocks wrote them (read through L2, never a stale L1 line). The loads of
 * DATTN_MERGE_BATCH splits are issued before they are used: a load per split and use waited
 * an L2 round trip each, about 3 nsu of them (the combine kernel took 7 us at batch 8, ctx
 * 512 on the H200, bench/results/gpu-20261130-e572c35-trace); up to DATTN_MERGE_BATCH splits
 * take one round of loads. The maximum and the sums take the splits in order as before: the
 * same bits. */
__device__ __forceinline__ float dattn_merge_dim(const float *base, int nsu, size_t prow, int k)
{
	constexpr int B = DATTN_MERGE_BATCH;
	/* the first B splits stay in registers: with nsu <= B, one round of loads */
	float m[B], l[B], a[B], M = -INFINITY, L = 0.0f, A = 0.0f;
	dattn_merge_load(base, 0, nsu, prow, k, m, l, a);
#pragma unroll
	for (int j = 0; j < B; j++)
		M = fmaxf(M, m[j]);
	for (int z0 = B; z0 < nsu; z0 += B) { /* the maximum over the rest */
		float mz[B];
#pragma unroll
		for (int j = 0; j < B; j++)
			mz[j] = z0 + j < nsu ? __ldcg(base + (z0 + j) * prow) : -INFINITY;
#pragma unroll
		for (int j = 0; j < B; j++)
			M = fmaxf(M, mz[j]);
	}
	dattn_merge_fold(0, nsu, M, m, l, a, L, A);
	for (int z0 = B; z0 < nsu; z0 += B) {
		dattn_merge_load(base, z0, nsu, prow, k, m, l, a);
		dattn_merge_fold(z0, nsu, M, m, l, a, L, A);
	}
	return A / L;
}

/* Merges the lane groups of each warp (they share dims, differ in positions) and stores the
 * warp's state in shared memory: sh_m, sh_l at [warp * G + g], sh_acc at [(warp * G + g) * D]. */
template <int D, int G>
__device__ __forceinline__ void dattn_lane_merge(float (&m)[G], float (&l)[G], float (&acc)[G][8],
                                                 float *sh_m, float *sh_l, float *sh_acc)
{
	typedef dattn_shape<D, G> S;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int slot = lane / S::LP, sub = lane % S::LP;
#pragma unroll
	for (int off = S::LP; off < 32; off <<= 1)
#pragma unroll
		for (int g = 0; g < G; g++) {
			float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
			float lo_ = __shfl_xor_sync(0xffffffffu, l[g], off);
			float wa, wb;
			dattn_weights(m[g], mo, &wa, &wb);
			l[g] = l[g] * wa + lo_ * wb;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				float ao = __shfl_xor_sync(0xffffffffu, acc[g][i], off);
				acc[g][i] = acc[g][i] * wa + ao * wb;
			}
			m[g] = fmaxf(m[g], mo);
		}
	if (slot == 0) {
#pragma unroll
		for (int g = 0; g < G; g++) {
			float4 *dst = (float4 *)&sh_acc[(warp * G + g) * D + sub * 8];
			dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
			dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
			if (sub == 0) {
				sh_m[warp * G + g] = m[g];
				sh_l[warp * G + g] = l[g];
			}
		}
	}
}

/* Head g's state at dim k merged over NW warps' states in shared memory (dattn_lane_merge's
 * layout), in warp order: the maximum *M, and *L, *A rescaled to it. */
template <int D, int G, int NW>
__device__ __forceinline__ void dattn_warps_merge(const float *sh_m, const float *sh_l,
                                                  const float *sh_acc, int g, int k, float *M,
                                                  float *L, float *A)
{
	float m = -INFINITY;
#pragma unroll
	for (int w = 0; w < NW; w++)
		m = fmaxf(m, sh_m[w * G + g]);
	float l = 0.0f, a = 0.0f;
#pragma unroll
	for (int w = 0; w < NW; w++) {
		float mw = sh_m[w * G + g];
		float e = mw == -INFINITY ? 0.0f : exp2f(mw - m);
		l = fmaf(sh_l[w * G + g], e, l);
		a = fmaf(sh_acc[(w * G + g) * D + k], e, a);
	}
	*M = m;
	*L = l;
	*A = a;
}

/* Output element i (head g = i / D, dim k) of a block's state merged over its NW warps: the bf16
 * output o[i] when the row has one split (nsu == 1), else this split's (z of nz) partials for
 * head h0 + g in part (rows of D + 2 floats: m, l, acc). */
template <int D, int G, int NW>
__device__ __forceinline__ void dattn_store_merged(const float *sh_m, const float *sh_l,
                                                   const float *sh_acc, int i, int nsu, int z,
                                                   int nz, float *part, size_t h0, uint16_t *o)
{
	int g = i / D, k = i % D;
	float M, L, A;
	dattn_warps_merge<D, G, NW>(sh_m, sh_l, sh_acc, g, k, &M, &L, &A);
	if (nsu == 1) {
		o[i] = ds_f32_to_bf16(A / L);
		return;
	}
	float *dst = part + ((h0 + g) * nz + z) * (size_t)(D + 2);
	dst[2 + k] = A;
	if (k == 0) {
		dst[0] = M;
		dst[1] = L;
	}
}

#endif
