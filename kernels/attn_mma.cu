/* attn_mma.cu - the reference path's paged causal attention on tensor cores (mma.sync m16n8k16,
 * bf16 in, fp32 accumulate), flash-attention style.
 *
 * Work: the pass's rows are cut into groups on the host (ds_k_attn_ref_mma_plan, run when the
 * pass's metadata is uploaded): up to R consecutive rows of one sequence at consecutive
 * positions that never cross a multiple of R in position, with R the largest power of two such
 * that R * G <= 64 (G = n_head / n_kv query heads per KV head: R = 16 for G = 3 and 4), or a
 * run of padding rows. A CTA (4 warps) takes groups x, x + gridDim.x, ... of the plan for one
 * KV head; the group's R * G (query row, head) pairs are its 64 mma rows, 16 per warp (a warp
 * without valid rows only helps load), except that a group of at most 16 mma rows (a decode row,
 * a short window) runs on all 4 warps, each taking a quarter of every tile (mt_group_narrow,
 * the same bits). The grid depends only on T and n_kv and the plan is
 * read from device memory, so a padded pass can be replayed from a CUDA graph. A group's KV
 * tiles of DS_K_ATTN_TILE (64) positions are aligned to absolute positions 0, 64, 128, ... up
 * to the tile holding its rows (R divides 64, so all rows of a group end in the same tile).
 * Each tile gives a partial per row: S = Q K^T (fp32), causal mask, tile max mt,
 * P = exp2(S - mt) rounded to bf16, lt = row sum of P, pv = P V (fresh accumulators). The
 * partials are merged in increasing tile order by one formula with explicit rounding
 * (mt_coef, mt_merge): m' = max(m, mt), l' = l a + lt b, acc' = acc a + pv b with
 * a = 2^(m - m'), b = 2^(mt - m'); out = acc / l. Two modes, chosen per pass by the plan:
 *  - walk: one CTA takes all of a group's tiles (double-buffered with cp.async) and merges in
 *    registers: best when the groups fill the GPU (prefill, many windows);
 *  - split: the pass's (group, tile) items are cut into contiguous ranges over the CTAs, each
 *    tile's partial stored to a workspace, then mt_combine_kernel merges each row's partials
 *    in tile order with the same formula: for few groups at long context (decode, one window),
 *    which the walk would run on a handful of SMs.
 * Both give the same bits: the same tile partials (a function of the row, the tile and the
 * KV) merged by the same float operations in the same order.
 *
 * Invariance (DESIGN.md section 3): a row's output bits depend only on its q, its position
 * and the KV, never on the other rows of its group or pass, on T, on the CTA that runs it or
 * on its place in the CTA:
 *  - each mma output element is a function of its row of A, its column of B and its
 *    accumulator, reduced in the same fixed k16 order wherever the row sits in the tile;
 *  - the tiles a row visits (0 .. pos / 64) and their order are fixed by its position, the
 *    same for every group it can be in (no tile is ever skipped or added for a row);
 *  - masked positions (beyond the row's position, including positions past the group's last
 *    row, which are zero-filled rather than loaded) get S = -inf by selection, hence exactly
 *    P = +0: they add +0 to the row sum and exact zero products to P V; the one way a signed
 *    zero could show, an exactly zero accumulator, is canonicalized (+ 0.0f) before the
 *    division;
 *  - the row max and row sum are reduced over the 4 lanes that hold a row with xor shuffles,
 *    which give every lane the same bits, in the same lane pattern for all 16 rows of a warp.
 * So one kernel serves decode (a row alone: the other mma rows are padding), verify windows and
 * prefill chunks, chunked prefill equals whole prefill bit for bit, and the mode (walk or
 * split, a choice of speed) never shows in the bits. It does not reproduce
 * kernels/attn.cu's bits (P is rounded to bf16 here): the reference path is defined by
 * whichever kernel it uses, chosen by head_dim only (refpath/cuda_ref.c). */
#include "kernels.h"
#include "cu_common.cuh"

#include <math.h>

#define MT_TILE DS_K_ATTN_TILE
#define MT_THREADS 128
#define MT_MROWS 64 /* mma rows (query row, head) per CTA: 4 warps x 16 */
#define MT_PAD 8    /* bf16 per staged row: rows 16 bytes apart in the banks for ldmatrix */

__host__ __device__ static constexpr int mt_stride(int D)
{
	return D + MT_PAD;
}

#define MT_PSTRIDE (MT_TILE + MT_PAD) /* bf16 per row of a narrow group's staged P */

/* Two buffers of (K, V), each (MT_TILE, D + MT_PAD) bf16; Q (64 rows) is staged in buffer 1
 * before a group's first tile. After them, for narrow groups (mt_group_narrow): P (16 rows of
 * MT_PSTRIDE bf16) and the warps' row maxima (4 x 16 floats). */
__host__ __device__ static constexpr size_t mt_smem_bytes(int D)
{
	return (size_t)2 * 2 * MT_TILE * mt_stride(D) * sizeof(uint16_t) +
	       (size_t)16 * MT_PSTRIDE * sizeof(uint16_t) + (size_t)4 * 16 * sizeof(float);
}

/* Rows per group: the largest power of two R with R * G <= MT_MROWS (0: G too large). */
__host__ __device__ static int mt_group_rows(int G)
{
	int r = 0;
	for (int c = 1; c * G <= MT_MROWS; c <<= 1)
		r = c;
	return r;
}

/* ---- the PTX primitives (tests/gpu/attn_mma_emu.h emulates them on the host, so a unit
 * test runs this file's kernel without a GPU) ---- */
#ifdef DS_ATTN_MMA_EMU
#include "attn_mma_emu.h"
#else
#include "mma_prims.cuh"
#endif

/* ---- the plan: row groups (host) ---- */

/* Most row groups times KV heads for which auto mode splits the tiles over CTAs: about one
 * walking CTA per SM of an H200 (132). Only speed depends on it: both modes give the same bits. */
#define MT_SPLIT_MAX_CTAS 128

extern "C" int ds_k_attn_ref_mma_plan_split(const int32_t *pos, const int32_t *seq, int T,
                                            struct ds_k_dims d, size_t part_floats, int mode,
                                            int32_t *plan)
{
	int R = d.n_kv > 0 ? mt_group_rows(d.n_head / d.n_kv) : 0, n = 0, real = 0;
	int32_t *rsb = plan + 3 + 3 * (size_t)T;
	long long items = 0, slots = 0;
	for (int t = 0; t < T;) {
		int len = 1;
		if (pos[t] < 0) /* a run of padding rows: zero output */
			while (t + len < T && pos[t + len] < 0)
				len++;
		else
			while (len < R && t + len < T && seq[t + len] == seq[t] &&
			       pos[t + len] == pos[t] + len && ((pos[t] + len) & (R - 1)) != 0)
				len++;
		int nt = pos[t] < 0 ? 0 : (pos[t] + len - 1) / MT_TILE + 1;
		plan[3 + 3 * n] = t;
		plan[4 + 3 * n] = len;
		plan[5 + 3 * n] = (int32_t)items;
		for (int r = 0; r < len; r++) {
			rsb[t + r] = (int32_t)slots;
			slots += nt;
		}
		items += nt;
		real += nt > 0;
		n++;
		t += len;
	}
	bool fits = (double)slots * d.n_head * (d.head_dim + 2) <= (double)part_floats &&
	            slots < INT32_MAX;
	bool split = mode == 1 || (mode < 0 && (long long)real * d.n_kv <= MT_SPLIT_MAX_CTAS &&
	                           items > real);
	plan[0] = n;
	plan[1] = split && fits;
	plan[2] = (int32_t)items;
	return n;
}

extern "C" int ds_k_attn_ref_mma_plan(const int32_t *pos, const int32_t *seq, int T,
                                      struct ds_k_dims d, int32_t *plan)
{
	return ds_k_attn_ref_mma_plan_split(pos, seq, T, d, 0, 0, plan);
}

/* ---- the kernel ---- */

/* Where position pos of KV head kh lives (K; V is n_kv * block_size * D further). */
__device__ __forceinline__ const uint16_t *mt_kv_row(const uint16_t *kv, const int32_t *bt,
                                                     struct ds_k_dims d, int kh, int pos)
{
	/* a power-of-two block size (the usual case) avoids an integer division per copy */
	int bs = d.block_size;
	int bi = (bs & (bs - 1)) == 0 ? pos >> (__ffs(bs) - 1) : pos / bs, blk = bt[bi];
	return kv + ((size_t)blk * 2 * d.n_kv + kh) * d.block_size * d.head_dim +
	       (size_t)(pos - bi * bs) * d.head_dim;
}

/* Stages K and V of tile [lo, lo + 64) into buf; positions past last are zero-filled. A
 * thread's rows are looked up in the block table first, all of them, then copied, so the
 * lookups are in flight together instead of each copy waiting for its own. */
template <int D>
__device__ __forceinline__ void mt_tile_load(uint16_t *buf, const uint16_t *kv, const int32_t *bt,
                                             struct ds_k_dims d, int kh, int lo, int last)
{
	constexpr int RS = mt_stride(D), VPR = D / 8, N = MT_TILE * VPR / MT_THREADS;
	static_assert(MT_TILE * VPR % MT_THREADS == 0 && MT_THREADS % VPR == 0,
	              "a thread's pieces are one column of evenly spaced positions");
	size_t vstride = (size_t)d.n_kv * d.block_size * D;
	uint16_t *ks = buf, *vs = buf + MT_TILE * RS;
	const int c = threadIdx.x % VPR, j0 = threadIdx.x / VPR;
	const uint16_t *src[N];
#pragma unroll
	for (int r = 0; r < N; r++) {
		int pos = lo + j0 + r * (MT_THREADS / VPR);
		src[r] = pos <= last ? mt_kv_row(kv, bt, d, kh, pos) + c * 8 : kv;
	}
#pragma unroll
	for (int r = 0; r < N; r++) {
		int j = j0 + r * (MT_THREADS / VPR);
		bool ok = lo + j <= last;
		mt_cp16(ks + j * RS + c * 8, src[r], ok);
		mt_cp16(vs + j * RS + c * 8, ok ? src[r] + vstride : kv, ok);
	}
	mt_commit();
}

/* The merge of a tile partial (mt, lt, pv) into a running state (m, l, acc), one formula with
 * explicit rounding for the in-CTA walk and the combine kernel (so both give the same bits):
 * mn = max(m, mt); a = 2^(m - mn) (0 for the empty state); b = 2^(mt - mn);
 * l = l a + lt b; acc = acc a + pv b. */
__device__ __forceinline__ void mt_coef(float *m, float mt, float *a, float *b)
{
	float mn = fmaxf(*m, mt); /* mt is finite: each tile holds the row's position lo */
	*a = exp2f(*m - mn);
	*b = exp2f(mt - mn);
	*m = mn;
}

__device__ __forceinline__ float mt_merge(float v, float a, float pv, float b)
{
	return __fmaf_rn(v, a, __fmul_rn(pv, b));
}

/* The output element from a final state (a zero accumulator canonicalized to +0). */
__device__ __forceinline__ float mt_final(float acc, float l)
{
	return __fdiv_rn(__fadd_rn(acc, 0.0f), l);
}

/* A group's start: its first `rows` mma rows of Q (mma row r = query row r / G, head
 * kh * G + r % G; rows past nrows zero-filled) into buf1 and its first tile into buf0, waited
 * for; every thread of the CTA calls it. */
template <int D>
__device__ __forceinline__ void mt_group_start(uint16_t *buf0, uint16_t *buf1,
                                               const uint16_t *__restrict__ q,
                                               const uint16_t *__restrict__ kv, const int32_t *bt,
                                               struct ds_k_dims d, int t0, int kh, int rows,
                                               int nrows, int it_lo, int last)
{
	constexpr int RS = mt_stride(D), ND = D / 8;
	int G = d.n_head / d.n_kv;
	for (int i = threadIdx.x; i < rows * ND; i += MT_THREADS) {
		int r = i / ND, c = i % ND;
		bool ok = r < nrows;
		const uint16_t *src =
		    ok ? q + ((size_t)(t0 + r / G) * d.n_head + (size_t)kh * G + r % G) * D + c * 8
		       : q;
		mt_cp16(buf1 + r * RS + c * 8, src, ok);
	}
	mt_commit();
	mt_tile_load<D>(buf0, kv, bt, d, kh, it_lo * MT_TILE, last);
	mt_wait<0>();
	__syncthreads();
}

/* A lane's mma row r of a group: its position (padding mma rows clamped into the group, their
 * results never stored), whether it is stored, and (split) its partial of tile 0. */
__device__ __forceinline__ void mt_row_setup(int r, int nrows, int p0, int t0, int kh,
                                             struct ds_k_dims d, const float *part,
                                             const int32_t *rsb, int *prow, bool *pst,
                                             size_t *poff)
{
	int G = d.n_head / d.n_kv;
	*prow = p0 + min(r, nrows - 1) / G;
	*pst = r < nrows;
	*poff = part && *pst ? (size_t)rsb[t0 + r / G] * d.n_head + (size_t)kh * G + r % G : 0;
}

/* The pipeline's step to tile it (k = it - it_lo): the next tile's load is issued into the other
 * buffer, then tile it is waited for by every thread. */
template <int D>
__device__ __forceinline__ void mt_tile_next(uint16_t *buf0, uint16_t *buf1,
                                             const uint16_t *__restrict__ kv, const int32_t *bt,
                                             struct ds_k_dims d, int kh, int it, int it_hi,
                                             int k, int last)
{
	if (it + 1 < it_hi) {
		mt_tile_load<D>((k + 1) & 1 ? buf1 : buf0, kv, bt, d, kh, (it + 1) * MT_TILE, last);
		mt_wait<1>();
	} else {
		mt_wait<0>();
	}
	__syncthreads();
}

/* The row sums of a lane's two rows, completed over the quad (xor 1, then 2: every lane of the
 * quad gets the same bits), then merged into (m, l) with coefficients a, b (walk) or stored with
 * the tile max as tile it's partial (split, where `store`). */
template <int D>
__device__ __forceinline__ void mt_lt_take(float lt[2], const float mt[2], float m[2], float l[2],
                                           float a[2], float b[2], float *part,
                                           const size_t *poff, const bool *pst, bool store,
                                           int it, int n_head, int lane)
{
#pragma unroll
	for (int h = 0; h < 2; h++) {
		lt[h] = __fadd_rn(lt[h], __shfl_xor_sync(0xffffffffu, lt[h], 1));
		lt[h] = __fadd_rn(lt[h], __shfl_xor_sync(0xffffffffu, lt[h], 2));
		if (!part) {
			mt_coef(&m[h], mt[h], &a[h], &b[h]);
			l[h] = mt_merge(l[h], a[h], lt[h], b[h]);
		} else if (store && pst[h] && (lane & 3) == 0) {
			float *dst = part + (poff[h] + (size_t)it * n_head) * (D + 2);
			dst[0] = mt[h];
			dst[1] = lt[h];
		}
	}
}

/* pv (16 x 16) = P (16 x 64) V (64 x 16) for output columns dj * 16 .. dj * 16 + 15, V
 * (position, d) row-major: ldmatrix.trans; each element sums its 4 k16 steps in order. Both
 * group routines use it, so a P V element is the same chain whichever warp computes it. */
template <int D>
__device__ __forceinline__ void mt_pv16(float pv[2][4], const unsigned pf[4][4],
                                        const uint16_t *vs_, int dj, int lane)
{
	constexpr int RS = mt_stride(D);
#pragma unroll
	for (int x = 0; x < 2; x++)
		pv[x][0] = pv[x][1] = pv[x][2] = pv[x][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		unsigned bv[4];
		int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
		int col = dj * 16 + (lane >> 4) * 8;
		mt_ldsm_x4_trans(bv, vs_ + row * RS + col);
		mt_mma(pv[0], pf[kk], bv[0], bv[1]);
		mt_mma(pv[1], pf[kk], bv[2], bv[3]);
	}
}

/* A pv block (output columns dj * 16 ..) into the running output o2 (its two n8 tiles) with the
 * merge coefficients a, b (walk: part == NULL), or stored as tile it's partial (split). */
template <int D>
__device__ __forceinline__ void mt_pv_take(float (*o2)[4], const float pv[2][4], const float *a,
                                           const float *b, float *part, const size_t *poff,
                                           const bool *pst, int it, int n_head, int dj, int lane)
{
#pragma unroll
	for (int x = 0; x < 2; x++) {
		if (!part) {
#pragma unroll
			for (int e = 0; e < 4; e++)
				o2[x][e] = mt_merge(o2[x][e], a[e >> 1], pv[x][e], b[e >> 1]);
			continue;
		}
#pragma unroll
		for (int h = 0; h < 2; h++) {
			if (!pst[h])
				continue;
			float *dst = part + (poff[h] + (size_t)it * n_head) * (D + 2) + 2 + dj * 16 +
			             x * 8 + 2 * (lane & 3);
			mt_st2(dst, pv[x][2 * h], pv[x][2 * h + 1]);
		}
	}
}

/* The walk's output of a lane's two mma rows r0 and r0 + 8 (those with pst set): its NJ n8
 * column blocks o[j] (columns (j0 + j) * 8 ..), finalized with the row sums l, as bf16. */
template <int D, int NJ>
__device__ __forceinline__ void mt_store_out(uint16_t *__restrict__ out, const float (*o)[4],
                                             const float *l, int r0, const bool *pst, int t0,
                                             int kh, struct ds_k_dims d, int j0, int lane)
{
	int G = d.n_head / d.n_kv;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		if (!pst[h])
			continue;
		int r = r0 + 8 * h;
		uint16_t *dst = out +
		                ((size_t)(t0 + r / G) * d.n_head + (size_t)kh * G + r % G) * D +
		                2 * (lane & 3);
#pragma unroll
		for (int j = 0; j < NJ; j++)
			*(unsigned *)(dst + (j0 + j) * 8) =
			    mt_pack(mt_final(o[j][2 * h], l[h]), mt_final(o[j][2 * h + 1], l[h]));
	}
}

/* Tiles [it_lo, it_hi) of one group: n rows from t0 at positions p0 .. p0 + n - 1 (one
 * sequence, one 64-tile), KV head kh. Each tile gives a partial per mma row: its max mt, the
 * sum lt of P = 2^(S - mt) rounded to bf16, and pv = P V (fresh accumulators). part == NULL
 * (walk, it_lo = 0, it_hi = all the group's tiles): the partials are merged in tile order in
 * registers and the rows written to out; else each partial is stored to part for
 * mt_combine_kernel, row t head h tile it at ((rsb[t] + it) * n_head + h) * (D + 2)
 * ({mt, lt, pv[D]}). Every thread of the CTA calls it; it ends after a barrier, with no copy
 * in flight and the shared buffers free for the next call. */
template <int D>
__device__ __forceinline__ void mt_group(const uint16_t *__restrict__ q,
                                         const uint16_t *__restrict__ kv, const int32_t *bt,
                                         struct ds_k_dims d, float scale_log2, int t0, int n,
                                         int p0, int kh, int it_lo, int it_hi,
                                         float *__restrict__ part, const int32_t *rsb,
                                         uint16_t *__restrict__ out)
{
	constexpr int RS = mt_stride(D), KS = D / 16, ND = D / 8;
	extern __shared__ __align__(16) uint16_t mt_smem[];
	int G = d.n_head / d.n_kv;
	int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	int last = p0 + n - 1, nrows = n * G;
	uint16_t *buf0 = mt_smem, *buf1 = mt_smem + 2 * MT_TILE * RS;

	mt_group_start<D>(buf0, buf1, q, kv, bt, d, t0, kh, MT_MROWS, nrows, it_lo, last);
	bool active = warp * 16 < nrows;
	unsigned qf[KS][4];
	if (active)
#pragma unroll
		for (int ks = 0; ks < KS; ks++)
			mt_ldsm_x4(qf[ks], buf1 + (warp * 16 + (lane & 15)) * RS +
			                       (ks * 2 + (lane >> 4)) * 8);
	__syncthreads(); /* buffer 1 is free for the second tile */

	/* this lane's two rows: warp * 16 + lane / 4 (+ 8) */
	int prow[2];
	size_t poff[2];
	bool pst[2];
#pragma unroll
	for (int h = 0; h < 2; h++)
		mt_row_setup(warp * 16 + (lane >> 2) + 8 * h, nrows, p0, t0, kh, d, part, rsb,
		             &prow[h], &pst[h], &poff[h]);
	float o[ND][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
	for (int j = 0; j < ND; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

	for (int it = it_lo; it < it_hi; it++) {
		int k = it - it_lo;
		mt_tile_next<D>(buf0, buf1, kv, bt, d, kh, it, it_hi, k, last);
		if (active) {
			const uint16_t *ks_ = k & 1 ? buf1 : buf0, *vs_ = ks_ + MT_TILE * RS;
			/* S (16 x 64) = Q K^T, fresh per tile */
			float s[8][4];
#pragma unroll
			for (int j = 0; j < 8; j++)
				s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
			for (int ks = 0; ks < KS; ks++)
#pragma unroll
				for (int nj = 0; nj < 4; nj++) {
					unsigned b[4];
					int row = nj * 16 + ((lane >> 4) << 3) + (lane & 7);
					int ch = ks * 2 + ((lane >> 3) & 1);
					mt_ldsm_x4(b, ks_ + row * RS + ch * 8);
					mt_mma(s[2 * nj], qf[ks], b[0], b[1]);
					mt_mma(s[2 * nj + 1], qf[ks], b[2], b[3]);
				}
			/* scale, mask by selection, tile max over the quad */
			int lo = it * MT_TILE;
			float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int col = lo + j * 8 + 2 * (lane & 3) + (e & 1);
					float x = col <= prow[e >> 1]
					              ? __fmul_rn(s[j][e], scale_log2)
					              : -INFINITY;
					s[j][e] = x;
					mt[e >> 1] = fmaxf(mt[e >> 1], x);
				}
#pragma unroll
			for (int h = 0; h < 2; h++) {
				mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 1));
				mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 2));
			}
			/* P in bf16 as the A operand of P V (the C layout of two n8 tiles is the A
			 * layout of one k16 step); the row sum is of the rounded values */
			unsigned pf[4][4];
			float lt[2] = {0.0f, 0.0f};
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int h = 0; h < 2; h++) {
					unsigned pk = mt_pack(exp2f(s[j][2 * h] - mt[h]),
					                      exp2f(s[j][2 * h + 1] - mt[h]));
					lt[h] = __fadd_rn(lt[h], __uint_as_float(pk << 16));
					lt[h] = __fadd_rn(lt[h], __uint_as_float(pk & 0xffff0000u));
					pf[j >> 1][(j & 1) * 2 + h] = pk;
				}
			float a[2], b[2];
			mt_lt_take<D>(lt, mt, m, l, a, b, part, poff, pst, true, it, d.n_head, lane);
#pragma unroll
			for (int dj = 0; dj < D / 16; dj++) {
				float pv[2][4];
				mt_pv16<D>(pv, pf, vs_, dj, lane);
				mt_pv_take<D>(o + 2 * dj, pv, a, b, part, poff, pst, it, d.n_head, dj,
				              lane);
			}
		}
		__syncthreads(); /* this buffer is reloaded two tiles on (or by the next call) */
	}
	if (active && !part)
		mt_store_out<D, ND>(out, o, l, warp * 16 + (lane >> 2), pst, t0, kh, d, 0, lane);
}

/* A group of at most 16 mma rows (a decode row, a short window) on all 4 warps instead of
 * warp 0 alone: in each tile, warp w computes S for the tile's 16 positions 16 w .. 16 w + 15
 * and P V for the output columns D / 4 w .. D / 4 (w + 1); the row max, P and the row sum go
 * through shared memory. The same bits as mt_group (same arguments, same outputs):
 *  - an S element is the same mma chain over k16 (same A row, same B column), whichever warp
 *    computes it;
 *  - the tile max is the max of the same 64 values (fmaxf is exact; a max of +0 and -0 may
 *    come out either way, but P = 2^(S - mt), the merge coefficients and the output only see
 *    mt through differences, where the sign of a zero never changes the result);
 *  - P is the same bf16 value per element; the row sum is read back in mt_group's lane
 *    pattern and added in its order (a lane's 16 values in column order, then the two xor
 *    shuffles);
 *  - a P V element is the same chain of 4 k16 mma over the tile's positions, and the merge is
 *    elementwise. */
template <int D>
__device__ __forceinline__ void mt_group_narrow(const uint16_t *__restrict__ q,
                                                const uint16_t *__restrict__ kv, const int32_t *bt,
                                                struct ds_k_dims d, float scale_log2, int t0,
                                                int n, int p0, int kh, int it_lo, int it_hi,
                                                float *__restrict__ part, const int32_t *rsb,
                                                uint16_t *__restrict__ out)
{
	constexpr int RS = mt_stride(D), KS = D / 16, DJW = D / 64;
	extern __shared__ __align__(16) uint16_t mt_smem[];
	int G = d.n_head / d.n_kv;
	int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	int last = p0 + n - 1, nrows = n * G;
	uint16_t *buf0 = mt_smem, *buf1 = mt_smem + 2 * MT_TILE * RS;
	uint16_t *ps = mt_smem + 4 * MT_TILE * RS;
	float *smax = (float *)(ps + 16 * MT_PSTRIDE);

	mt_group_start<D>(buf0, buf1, q, kv, bt, d, t0, kh, 16, nrows, it_lo, last);
	unsigned qf[KS][4];
#pragma unroll
	for (int ks = 0; ks < KS; ks++)
		mt_ldsm_x4(qf[ks], buf1 + (lane & 15) * RS + (ks * 2 + (lane >> 4)) * 8);
	__syncthreads();

	int prow[2], rr[2];
	size_t poff[2];
	bool pst[2];
#pragma unroll
	for (int h = 0; h < 2; h++) {
		rr[h] = (lane >> 2) + 8 * h;
		mt_row_setup(rr[h], nrows, p0, t0, kh, d, part, rsb, &prow[h], &pst[h], &poff[h]);
	}
	float o[2 * DJW][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
	for (int j = 0; j < 2 * DJW; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

	for (int it = it_lo; it < it_hi; it++) {
		int k = it - it_lo;
		mt_tile_next<D>(buf0, buf1, kv, bt, d, kh, it, it_hi, k, last);
		const uint16_t *ks_ = k & 1 ? buf1 : buf0, *vs_ = ks_ + MT_TILE * RS;
		/* S (16 x 16): this warp's positions of the tile */
		float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
		for (int ks = 0; ks < KS; ks++) {
			unsigned b[4];
			int row = warp * 16 + ((lane >> 4) << 3) + (lane & 7);
			int ch = ks * 2 + ((lane >> 3) & 1);
			mt_ldsm_x4(b, ks_ + row * RS + ch * 8);
			mt_mma(s[0], qf[ks], b[0], b[1]);
			mt_mma(s[1], qf[ks], b[2], b[3]);
		}
		int lo = it * MT_TILE;
		float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
		for (int x = 0; x < 2; x++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int col = lo + (2 * warp + x) * 8 + 2 * (lane & 3) + (e & 1);
				float v = col <= prow[e >> 1] ? __fmul_rn(s[x][e], scale_log2)
				                              : -INFINITY;
				s[x][e] = v;
				mt[e >> 1] = fmaxf(mt[e >> 1], v);
			}
#pragma unroll
		for (int h = 0; h < 2; h++) {
			mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 1));
			mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 2));
			if ((lane & 3) == 0)
				smax[warp * 16 + rr[h]] = mt[h];
		}
		__syncthreads();
#pragma unroll
		for (int h = 0; h < 2; h++) {
			mt[h] = fmaxf(fmaxf(smax[rr[h]], smax[16 + rr[h]]),
			              fmaxf(smax[32 + rr[h]], smax[48 + rr[h]]));
#pragma unroll
			for (int x = 0; x < 2; x++)
				*(unsigned *)(ps + rr[h] * MT_PSTRIDE + (2 * warp + x) * 8 +
				              2 * (lane & 3)) =
				    mt_pack(exp2f(s[x][2 * h] - mt[h]), exp2f(s[x][2 * h + 1] - mt[h]));
		}
		__syncthreads();
		/* the row sum in mt_group's order; P as the A operand of P V */
		float lt[2] = {0.0f, 0.0f}, a[2], b[2];
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				unsigned pk =
				    *(const unsigned *)(ps + rr[h] * MT_PSTRIDE + j * 8 + 2 * (lane & 3));
				lt[h] = __fadd_rn(lt[h], __uint_as_float(pk << 16));
				lt[h] = __fadd_rn(lt[h], __uint_as_float(pk & 0xffff0000u));
			}
		unsigned pf[4][4];
#pragma unroll
		for (int kk = 0; kk < 4; kk++)
			mt_ldsm_x4(pf[kk], ps + (lane & 15) * MT_PSTRIDE + kk * 16 + (lane >> 4) * 8);
		mt_lt_take<D>(lt, mt, m, l, a, b, part, poff, pst, warp == 0, it, d.n_head, lane);
#pragma unroll
		for (int djl = 0; djl < DJW; djl++) {
			int dj = warp * DJW + djl;
			float pv[2][4];
			mt_pv16<D>(pv, pf, vs_, dj, lane);
			mt_pv_take<D>(o + 2 * djl, pv, a, b, part, poff, pst, it, d.n_head, dj, lane);
		}
		__syncthreads(); /* K/V buffer, P and the maxima are rewritten by later tiles */
	}
	if (!part)
		mt_store_out<D, 2 * DJW>(out, o, l, rr[0], pst, t0, kh, d, warp * 2 * DJW, lane);
}

/* A group on the narrow or the full-width routine: the same bits either way (mt_group_narrow);
 * the choice depends only on the group's mma rows, uniform over the CTA. */
template <int D>
__device__ __forceinline__ void mt_group_any(const uint16_t *__restrict__ q,
                                             const uint16_t *__restrict__ kv, const int32_t *bt,
                                             struct ds_k_dims d, float scale_log2, int t0, int n,
                                             int p0, int kh, int it_lo, int it_hi,
                                             float *__restrict__ part, const int32_t *rsb,
                                             uint16_t *__restrict__ out)
{
	if (n * (d.n_head / d.n_kv) <= 16)
		mt_group_narrow<D>(q, kv, bt, d, scale_log2, t0, n, p0, kh, it_lo, it_hi, part,
		                   rsb, out);
	else
		mt_group<D>(q, kv, bt, d, scale_log2, t0, n, p0, kh, it_lo, it_hi, part, rsb,
		            out);
}

/* plan[1] == 0 (walk): CTA (x, kh) takes groups x, x + gridDim.x, ... of the plan (any
 * assignment gives the same bits: a group's result depends only on its rows). plan[1] == 1
 * (split): the plan's items (group, tile) in order, plan[2] per KV head, are cut into gridDim.x
 * contiguous ranges; CTA x stores the partials of range x (padding rows: mt_combine_kernel). */
template <int D, int MINB>
__global__ void __launch_bounds__(MT_THREADS, MINB)
    attn_mma_kernel(const uint16_t *__restrict__ q, const uint16_t *__restrict__ kv,
                    struct ds_k_tokmeta tm, const int32_t *__restrict__ plan, int T,
                    struct ds_k_dims d, float scale_log2, float *__restrict__ part,
                    uint16_t *__restrict__ out)
{
	int kh = blockIdx.y, G = d.n_head / d.n_kv, count = plan[0];
	if (plan[1] == 0) {
		for (int gi = blockIdx.x; gi < count; gi += gridDim.x) {
			int t0 = plan[3 + 3 * gi], n = plan[4 + 3 * gi], p0 = tm.pos[t0];
			if (p0 < 0) {
				for (int r = 0; r < n; r++) {
					uint16_t *o = out + ((size_t)(t0 + r) * d.n_head +
					                     (size_t)kh * G) *
					                        D;
					for (int i = threadIdx.x; i < G * D; i += MT_THREADS)
						o[i] = 0;
				}
				continue;
			}
			const int32_t *bt = tm.bt + tm.bt_off[tm.seq[t0]];
			mt_group_any<D>(q, kv, bt, d, scale_log2, t0, n, p0, kh, 0,
			                (p0 + n - 1) / MT_TILE + 1, NULL, NULL, out);
		}
		return;
	}
	long long total = plan[2];
	int w = (int)((long long)blockIdx.x * total / gridDim.x);
	int end = (int)((long long)(blockIdx.x + 1) * total / gridDim.x);
	if (w >= end)
		return;
	int lo = 0, hi = count - 1; /* the last group whose first item is <= w */
	while (lo < hi) {
		int mid = (lo + hi + 1) >> 1;
		if (plan[5 + 3 * mid] <= w)
			lo = mid;
		else
			hi = mid - 1;
	}
	const int32_t *rsb = plan + 3 + 3 * (size_t)T;
	for (int gi = lo; w < end && gi < count; gi++) {
		int t0 = plan[3 + 3 * gi], n = plan[4 + 3 * gi], ib = plan[5 + 3 * gi];
		int p0 = tm.pos[t0];
		if (p0 < 0)
			continue;
		int nt = (p0 + n - 1) / MT_TILE + 1, hi_ = min(nt, end - ib);
		const int32_t *bt = tm.bt + tm.bt_off[tm.seq[t0]];
		mt_group_any<D>(q, kv, bt, d, scale_log2, t0, n, p0, kh, w - ib, hi_, part, rsb,
		                out);
		w = ib + hi_;
	}
}

/* Split mode's second kernel: each (row, head) of the pass merges its stored tile partials
 * in increasing tile order with the walk's formula (mt_coef, mt_merge, mt_final); padding
 * rows get zeros. Exits at once when the plan walks. */
template <int D>
__global__ void __launch_bounds__(MT_THREADS)
    mt_combine_kernel(const float *__restrict__ part, const int32_t *__restrict__ pos,
                      const int32_t *__restrict__ plan, int T, int n_head,
                      uint16_t *__restrict__ out)
{
	if (plan[1] == 0)
		return;
	const int32_t *rsb = plan + 3 + 3 * (size_t)T;
	size_t step = (size_t)n_head * (D + 2);
	for (int pr = blockIdx.x; pr < T * n_head; pr += gridDim.x) {
		int t = pr / n_head, h = pr % n_head, p = pos[t];
		uint16_t *o = out + (size_t)pr * D;
		if (p < 0) {
			for (int i = threadIdx.x; i < D; i += MT_THREADS)
				o[i] = 0;
			continue;
		}
		int nt = p / MT_TILE + 1;
		const float *base = part + ((size_t)rsb[t] * n_head + h) * (D + 2);
		for (int i = threadIdx.x; i < D; i += MT_THREADS) {
			float m = -INFINITY, l = 0.0f, acc = 0.0f;
			/* 16 tiles' loads issued before their merges (latency, not bandwidth) */
			for (int i0 = 0; i0 < nt; i0 += 16) {
				float pm[16], pl[16], px[16];
#pragma unroll
				for (int j = 0; j < 16; j++) {
					const float *pp = base + (size_t)(i0 + j) * step;
					bool ok = i0 + j < nt;
					pm[j] = ok ? pp[0] : 0.0f;
					pl[j] = ok ? pp[1] : 0.0f;
					px[j] = ok ? pp[2 + i] : 0.0f;
				}
#pragma unroll
				for (int j = 0; j < 16; j++) {
					if (i0 + j >= nt)
						break;
					float a, b;
					mt_coef(&m, pm[j], &a, &b);
					l = mt_merge(l, a, pl[j], b);
					acc = mt_merge(acc, a, px[j], b);
				}
			}
			o[i] = (uint16_t)(mt_pack(mt_final(acc, l), 0.0f) & 0xffffu);
		}
	}
}

extern "C" bool ds_k_attn_ref_mma_supported(struct ds_k_dims d)
{
	return d.n_kv > 0 && d.n_head > 0 && d.n_head % d.n_kv == 0 &&
	       mt_group_rows(d.n_head / d.n_kv) > 0 && (d.head_dim == 64 || d.head_dim == 128) &&
	       d.block_size > 0;
}

/* CTAs per KV head in walk-only launches (ds_k_attn_ref_mma): about 512 in all, so a long
 * prefill gets about one group per CTA and short passes few idle CTAs; never more than T (the
 * most groups a pass of T rows can have). */
static unsigned mt_grid_x(int T, struct ds_k_dims d)
{
	int x = 512 / d.n_kv < 32 ? 32 : 512 / d.n_kv;
	return (unsigned)(T < x ? T : x);
}

/* CTAs per KV head when the plan may split: about 1024 in all, or T per KV head up to 256 when
 * that is more (a walk of T decode rows then gives each CTA one group: 256 rows at context 640
 * ran 240 us a layer on 1024 CTAs, two groups each, a grid of 2.6 waves of the 3-CTA build,
 * bench/results/gpu-20261130-acb4522-ncu256), never more than the items a pass of T rows at
 * positions <= top can have (T * (top / 64 + 1)); at least mt_grid_x. A function of T and top
 * only, so a graph captured for a capacity replays at any positions. */
static unsigned mt_split_grid_x(int T, int top, struct ds_k_dims d)
{
	long long cap = 1024 / d.n_kv < 32 ? 32 : 1024 / d.n_kv;
	long long per_row = T < 256 ? T : 256;
	cap = cap > per_row ? cap : per_row;
	long long items = (long long)T * (top / MT_TILE + 1);
	return (unsigned)(items < cap ? items : cap);
}

/* Blocks of the combine kernel: a grid-stride loop over the pass's (row, head) pairs. */
static unsigned mt_combine_grid(int T, struct ds_k_dims d)
{
	long long n = (long long)T * d.n_head;
	return (unsigned)(n < 512 ? n : 512);
}

#ifndef DS_ATTN_MMA_EMU
template <int D> static cudaError_t mt_setup_one(void)
{
	cudaError_t e =
	    cudaFuncSetAttribute(attn_mma_kernel<D, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                         (int)mt_smem_bytes(D));
	if (e != cudaSuccess)
		return e;
	return cudaFuncSetAttribute(attn_mma_kernel<D, 3>,
	                            cudaFuncAttributeMaxDynamicSharedMemorySize,
	                            (int)mt_smem_bytes(D));
}

extern "C" cudaError_t ds_k_attn_ref_mma_setup(struct ds_k_dims d)
{
	if (!ds_k_attn_ref_mma_supported(d))
		return cudaErrorInvalidValue;
	return d.head_dim == 64 ? mt_setup_one<64>() : mt_setup_one<128>();
}

template <int D>
static void mt_launch_d(dim3 grid, int occ, const uint16_t *q, const uint16_t *kv,
                        struct ds_k_tokmeta tm, const int32_t *plan, int T, struct ds_k_dims d,
                        float scale_log2, float *part, uint16_t *out, cudaStream_t st)
{
	if (occ == 3)
		attn_mma_kernel<D, 3><<<grid, MT_THREADS, mt_smem_bytes(D), st>>>(
		    q, kv, tm, plan, T, d, scale_log2, part, out);
	else
		attn_mma_kernel<D, 2><<<grid, MT_THREADS, mt_smem_bytes(D), st>>>(
		    q, kv, tm, plan, T, d, scale_log2, part, out);
}

static void mt_launch(unsigned gx, int occ, const uint16_t *q, const uint16_t *kv,
                      struct ds_k_tokmeta tm, const int32_t *plan, int T, struct ds_k_dims d,
                      float *part, uint16_t *out, cudaStream_t st)
{
	float scale_log2 = (float)(1.4426950408889634 / sqrt((double)d.head_dim));
	dim3 grid(gx, (unsigned)d.n_kv);
	if (d.head_dim == 64)
		mt_launch_d<64>(grid, occ, q, kv, tm, plan, T, d, scale_log2, part, out, st);
	else
		mt_launch_d<128>(grid, occ, q, kv, tm, plan, T, d, scale_log2, part, out, st);
}

/* The build for a launch on a device of n_sm SMs: 3 CTAs an SM when the CTAs that get work
 * outnumber the slots of the 2-CTA build (2 per SM), else 2 (with no more CTAs than slots, the
 * 3-CTA build may pack them 3 to an SM and leave SMs idle). H200, one layer, 20-run medians
 * (bench/results/gpu-20261130-098a404-minb): windows of 16 x 32 rows at context 2048 (256
 * working CTAs) 136 us on 2 vs 176 on 3; at context 2055 (384) 244 vs 175; the reference
 * path's 256 decode rows at context 640 (1024, each walking 2 groups), 32 layers, 8.52 vs
 * 7.76 ms. */
extern "C" int ds_k_attn_ref_mma_occ(const int32_t *hplan, int T, struct ds_k_dims d, int top,
                                     int n_sm)
{
	if (!hplan || T <= 0 || d.n_kv <= 0)
		return 2;
	long long gx = top < 0 ? mt_grid_x(T, d) : mt_split_grid_x(T, top, d);
	long long work = hplan[1] ? gx : (hplan[0] < gx ? hplan[0] : gx);
	return work * d.n_kv > 2LL * n_sm ? 3 : 2;
}

extern "C" cudaError_t ds_k_attn_ref_mma(const uint16_t *q, const uint16_t *kv,
                                         struct ds_k_tokmeta tm, const int32_t *plan, int T,
                                         struct ds_k_dims d, int occ, uint16_t *out,
                                         cudaStream_t st)
{
	if (T <= 0)
		return cudaSuccess;
	if (!ds_k_attn_ref_mma_supported(d) || !plan || (occ != 2 && occ != 3))
		return cudaErrorInvalidValue;
	mt_launch(mt_grid_x(T, d), occ, q, kv, tm, plan, T, d, NULL, out, st);
	return cudaGetLastError();
}

extern "C" cudaError_t ds_k_attn_ref_mma_split(const uint16_t *q, const uint16_t *kv,
                                               struct ds_k_tokmeta tm, const int32_t *plan, int T,
                                               struct ds_k_dims d, int top, int occ, float *part,
                                               bool combine, uint16_t *out, cudaStream_t st)
{
	if (T <= 0)
		return cudaSuccess;
	if (!ds_k_attn_ref_mma_supported(d) || !plan || top < 0 || (combine && !part) ||
	    (occ != 2 && occ != 3))
		return cudaErrorInvalidValue;
	mt_launch(mt_split_grid_x(T, top, d), occ, q, kv, tm, plan, T, d, part, out, st);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess || !combine)
		return e;
	if (d.head_dim == 64)
		mt_combine_kernel<64><<<mt_combine_grid(T, d), MT_THREADS, 0, st>>>(part, tm.pos, plan,
		                                                                    T, d.n_head, out);
	else
		mt_combine_kernel<128><<<mt_combine_grid(T, d), MT_THREADS, 0, st>>>(
		    part, tm.pos, plan, T, d.n_head, out);
	return cudaGetLastError();
}
#endif
