/* attn_decode.cu - the fast path's flash-decoding kernel: one query per row, paged KV.
 *
 * One 128-thread block per (row, KV head, split) computes all G = n_head / n_kv query heads of
 * that KV head, so each K/V element is read once per row. K and V stream straight from global
 * memory into registers with 16-byte loads: a lane holds 8 dims of one position, a position is
 * head_dim / 8 lanes (16 for 128, 8 for 64), so one warp covers 2 (or 4) positions per step
 * and U steps per iteration; the next iteration's loads are issued before the current one is
 * computed (register double buffering), so every warp keeps 2 * U * 32 B per lane in flight.
 * Scores are warp-shuffle dot products of fp32 q (pre-scaled by 1/sqrt(d) * log2 e) with the
 * bf16 K, the softmax is online in fp32 in the base-2 domain, and each lane group keeps its own
 * (m, l, acc) state; the states are merged across the warp by shuffles and across the block
 * through shared memory.
 *
 * Key decision: the split of a row is computed on the device from its position and the grid's
 * split count (dattn_split), so one launch shape serves every step of a captured CUDA graph and
 * short rows use fewer splits than long ones. Blocks past a row's split count exit at once; a
 * row with one split writes its output directly, longer rows write partials that a small
 * second kernel merges (launched only when the grid has more than one split), or, given a
 * counter per (row, KV head), the last block to finish merges them (no second launch). Padding rows
 * (pos < 0) write zeros. Reduction order depends on the split count and so on the batch: this
 * is the fast path (DESIGN.md section 1).
 *
 * Two variants share the split, the lane mapping, the softmax step and the merges (same
 * arithmetic): "reg" (above; ~190 registers at G = 4, so 2 blocks = 8 warps per SM) and "pipe",
 * where the block copies each iteration's K/V into shared memory with cp.async 3-4 stages ahead
 * (zero-filled past the range) and lanes read their 16 bytes from there, so registers are capped
 * at 128 (4 blocks per SM at G = 4) and up to 3 stages (32-48 KB) per block are in flight. */
#include "kernels.h"
#include "pdl.cuh"
#include "cu_common.cuh"

#include <math.h>

#include "attn_decode_core.cuh"

/* Merges the warps' states (sh_m, sh_l: DA_WARPS * G; sh_acc: DA_WARPS * G * D, filled by every
 * warp before the barrier this starts with) and writes the bf16 output o (one split) or the
 * partials of heads h0.. at split z. With cnt (this row and KV head's counter, zero on entry),
 * the block that writes the last partials merges all of them into o and zeroes the counter
 * again (so a graph replays). Shared by every variant (their warp layouts differ). */
template <int D, int G>
__device__ __forceinline__ void dattn_block_merge(float *sh_m, float *sh_l, float *sh_acc, int nsu,
                                                  int z, int nz, float *part, size_t h0,
                                                  uint16_t *o, unsigned *cnt)
{
	__syncthreads();
	/* merge the warps: every block range holds at least one position, so M is finite */
	for (int i = threadIdx.x; i < G * D; i += DA_THREADS)
		dattn_store_merged<D, G, DA_WARPS>(sh_m, sh_l, sh_acc, i, nsu, z, nz, part, h0, o);
	if (nsu == 1 || !cnt)
		return;
	/* fused merge: publish this block's partials, count, and let the last block merge */
	__threadfence();
	__syncthreads(); /* also: every thread is done reading sh_l */
	if (threadIdx.x == 0) {
		unsigned prev = atomicAdd(cnt, 1u);
		bool last = prev == (unsigned)nsu - 1;
		if (last)
			*cnt = 0; /* no other block of this launch touches it again */
		sh_l[0] = last ? 1.0f : 0.0f;
	}
	__syncthreads();
	if (sh_l[0] == 0.0f)
		return;
	__threadfence(); /* the other blocks' partials, seen through their fences */
	size_t prow = (size_t)(D + 2);
	for (int i = threadIdx.x; i < G * D; i += DA_THREADS) {
		int g = i / D, k = i % D;
		o[i] = ds_f32_to_bf16(dattn_merge_dim(part + (h0 + g) * nz * prow, nsu, prow, k));
	}
}

/* Merges the lane groups of each warp into shared memory, then the warps (dattn_block_merge). */
template <int D, int G>
__device__ __forceinline__ void dattn_finish(float (&m)[G], float (&l)[G], float (&acc)[G][8],
                                             float *sh_m, float *sh_l, float *sh_acc, int nsu,
                                             int z, int nz, float *part, size_t h0, uint16_t *o,
                                             unsigned *cnt)
{
	dattn_lane_merge<D, G>(m, l, acc, sh_m, sh_l, sh_acc);
	dattn_block_merge<D, G>(sh_m, sh_l, sh_acc, nsu, z, nz, part, h0, o, cnt);
}

#ifndef DS_DATTN_EMU /* the register variant (static shared arrays): GPU only */
template <int D, int G>
__global__ void __launch_bounds__(DA_THREADS)
    dattn_kernel(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm, struct ds_k_dims d,
                 float qscale, float *part, uint16_t *out, unsigned *cnt,
                 struct ds_k_qkv_epi /* unused: only the mma variant fuses the epilogue */)
{
	typedef dattn_shape<D, G> S;
	__shared__ float sh_m[DA_WARPS][G], sh_l[DA_WARPS][G];
	__shared__ __align__(16) float sh_acc[DA_WARPS][G][D];
	ds_grid_dep_wait(); /* no-op unless launched with PDL */
	int t = blockIdx.x, kh = blockIdx.y, z = blockIdx.z, nz = gridDim.z;
	int p = tm.pos[t], sq = tm.seq[t]; /* both loads in flight at once */
	uint16_t *o = out + ((size_t)t * d.n_head + (size_t)kh * G) * D;
	if (p < 0) {
		if (z == 0)
			for (int i = threadIdx.x; i < G * D; i += DA_THREADS)
				o[i] = 0;
		return;
	}
	int len = p + 1, chunk, nsu;
	dattn_split(len, nz, S::PB, &chunk, &nsu);
	if (z >= nsu)
		return;
	int lo = z * chunk, hi = min(lo + chunk, len);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int slot = lane / S::LP, sub = lane % S::LP;

	float qr[G][8];
	dattn_load_q<D, G>(q + ((size_t)t * d.n_head + (size_t)kh * G) * D, sub, qscale, qr);
	struct dattn_src src = dattn_src_of<D>(d, kv + (size_t)kh * d.block_size * D + sub * 8, hi,
	                                       tm.bt + tm.bt_off[sq]);

	float m[G], l[G], acc[G][8];
	dattn_state_init<G>(m, l, acc);
	/* iteration it covers [lo + it * PB, + PB); this lane's step u of it is position
	 * base0 + it * PB + u * PPS */
	int base0 = lo + warp * S::U * S::PPS + slot;
	int nit = (hi - lo + S::PB - 1) / S::PB;
	uint4 ka[S::U], va[S::U], kb[S::U], vb[S::U];
	dattn_load<S::U, S::PPS>(src, base0, ka, va);
	for (int it = 0; it < nit; it += 2) {
		if (it + 1 < nit)
			dattn_load<S::U, S::PPS>(src, base0 + (it + 1) * S::PB, kb, vb);
		dattn_step<D, G>(ka, va, base0 + it * S::PB, hi, qr, m, l, acc);
		if (it + 1 >= nit)
			break;
		if (it + 2 < nit)
			dattn_load<S::U, S::PPS>(src, base0 + (it + 2) * S::PB, ka, va);
		dattn_step<D, G>(kb, vb, base0 + (it + 1) * S::PB, hi, qr, m, l, acc);
	}
	dattn_finish<D, G>(m, l, acc, &sh_m[0][0], &sh_l[0][0], &sh_acc[0][0][0], nsu, z, nz, part,
	                   (size_t)t * d.n_head + (size_t)kh * G, o,
	                   cnt ? cnt + (size_t)t * d.n_kv + kh : NULL);
}

#endif

/* ---- variant "pipe": K/V staged in shared memory by cp.async, STAGES deep ---- */

/* Shape of the pipelined instance: a stage is one block iteration (PB positions) of K then V;
 * each thread copies NPOS positions' 16-byte chunk cc of K and of V per stage. Registers are
 * capped (MINB resident blocks) since no K/V lives in registers across the pipeline. */
template <int D, int G> struct dattn_pipe {
	static constexpr int P = dattn_shape<D, G>::PB;
	static constexpr int CPP = D / 8;            /* 16-byte chunks per position */
	static constexpr int PPT = DA_THREADS / CPP; /* positions per pass of the block */
	static constexpr int NPOS = P / PPT;
	static constexpr int STAGE = 2 * P * D; /* elements */
	static constexpr int STAGES = STAGE * 2 >= 16384 ? 3 : 4;
	static constexpr size_t SMEM = (size_t)STAGES * STAGE * 2;
	static constexpr int MINB = G <= 4 ? 4 : G < 8 ? 3 : 2;
	static_assert(P % PPT == 0, "stage not a whole number of passes");
	static_assert(SMEM >= sizeof(float) * DA_WARPS * G * (D + 2), "merge area");
};

/* cp.async primitives; tests/gpu/test_dattn_emu.cc runs this variant on the CPU with
 * tests/gpu/attn_mma_emu.h's emulation (copies land only at the wait that covers them). */
#ifdef DS_DATTN_EMU
#define DATTN_DYN_SMEM(name) uint16_t *name = mt_smem_emu
#else
#include "mma_prims.cuh"
#define DATTN_DYN_SMEM(name) extern __shared__ __align__(16) uint16_t name[]
#endif
#define dattn_cp16 mt_cp16
#define dattn_cp_commit mt_commit
#define dattn_cp_wait mt_wait

/* Issues the copies of stage st (positions lo + st * P..; zero-filled at or past hi). */
template <int D, int G>
__device__ __forceinline__ void dattn_issue(const struct dattn_src &s, uint16_t *sbuf, int lo,
                                            int st)
{
	typedef dattn_pipe<D, G> Q;
	int cc = threadIdx.x % Q::CPP, pr = threadIdx.x / Q::CPP;
	uint16_t *dst = sbuf + (st % Q::STAGES) * Q::STAGE + cc * 8;
#pragma unroll
	for (int j = 0; j < Q::NPOS; j++) {
		int pi = pr + j * Q::PPT, pos = lo + st * Q::P + pi;
		bool ok = pos < s.hi;
		const uint16_t *r = s.kv; /* a valid address; nothing is read when !ok */
		if (ok)
			r = dattn_row(s, pos) + cc * 8;
		dattn_cp16(dst + pi * D, r, ok);
		dattn_cp16(dst + (Q::P + pi) * D, ok ? r + s.vstride : r, ok);
	}
}

template <int D, int G>
__global__ void __launch_bounds__(DA_THREADS, dattn_pipe<D, G>::MINB)
    dattn_pipe_kernel(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm,
                      struct ds_k_dims d, float qscale, float *part, uint16_t *out,
                      unsigned *cnt, struct ds_k_qkv_epi /* unused (see the mma variant) */)
{
	typedef dattn_shape<D, G> S;
	typedef dattn_pipe<D, G> Q;
	DATTN_DYN_SMEM(sh_kv);
	int t = blockIdx.x, kh = blockIdx.y, z = blockIdx.z, nz = gridDim.z;
	/* the pass's metadata is uploaded before its first kernel and written by none, so its
	 * dependent loads may precede the wait for the previous kernel (which every block still
	 * makes before touching q, K/V or the output) */
	int p = tm.pos[t], sq = tm.seq[t];
	int boff = p >= 0 ? tm.bt_off[sq] : 0;
	ds_grid_dep_wait(); /* no-op unless launched with PDL */
	uint16_t *o = out + ((size_t)t * d.n_head + (size_t)kh * G) * D;
	if (p < 0) {
		if (z == 0)
			for (int i = threadIdx.x; i < G * D; i += DA_THREADS)
				o[i] = 0;
		return;
	}
	int len = p + 1, chunk, nsu;
	dattn_split(len, nz, S::PB, &chunk, &nsu);
	if (z >= nsu)
		return;
	int lo = z * chunk, hi = min(lo + chunk, len);
	struct dattn_src src =
	    dattn_src_of<D>(d, kv + (size_t)kh * d.block_size * D, hi, tm.bt + boff);
	int nst = (hi - lo + Q::P - 1) / Q::P;
	/* the first STAGES - 1 stages go out before q is read */
#pragma unroll
	for (int st = 0; st < Q::STAGES - 1; st++) {
		if (st < nst)
			dattn_issue<D, G>(src, sh_kv, lo, st);
		dattn_cp_commit();
	}
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int slot = lane / S::LP, sub = lane % S::LP;
	float qr[G][8];
	dattn_load_q<D, G>(q + ((size_t)t * d.n_head + (size_t)kh * G) * D, sub, qscale, qr);
	float m[G], l[G], acc[G][8];
	dattn_state_init<G>(m, l, acc);
	/* this lane's step u of stage it: index pi0 + u * PPS, position lo + it * P + that */
	int pi0 = warp * S::U * S::PPS + slot;
	for (int it = 0; it < nst; it++) {
		dattn_cp_wait<Q::STAGES - 2>(); /* stage it has landed (this thread's copies) */
		__syncthreads(); /* everyone's copies; everyone is done with stage it - 1 */
		if (it + Q::STAGES - 1 < nst)
			dattn_issue<D, G>(src, sh_kv, lo, it + Q::STAGES - 1); /* into it - 1's buffer */
		dattn_cp_commit();
		const uint16_t *b = sh_kv + (size_t)(it % Q::STAGES) * Q::STAGE + sub * 8;
		uint4 k[S::U], v[S::U];
#pragma unroll
		for (int u = 0; u < S::U; u++) {
			int pi = pi0 + u * S::PPS;
			k[u] = *(const uint4 *)(b + pi * D);
			v[u] = *(const uint4 *)(b + (Q::P + pi) * D);
		}
		dattn_step<D, G>(k, v, lo + it * Q::P + pi0, hi, qr, m, l, acc);
	}
	dattn_cp_wait<0>();
	__syncthreads(); /* the stage buffers become the merge area */
	float *sf = (float *)sh_kv;
	dattn_finish<D, G>(m, l, acc, sf, sf + DA_WARPS * G, sf + 2 * DA_WARPS * G, nsu, z, nz, part,
	                   (size_t)t * d.n_head + (size_t)kh * G, o,
	                   cnt ? cnt + (size_t)t * d.n_kv + kh : NULL);
}

#include "attn_decode_mma.cuh"

/* Merges the nsu partials of rows that used more than one split. */
__global__ void dattn_combine_kernel(const float *part, struct ds_k_tokmeta tm, struct ds_k_dims d,
                                     int nz, int pb, uint16_t *out)
{
	ds_grid_dep_wait();
	int t = blockIdx.x, h = blockIdx.y, D = d.head_dim;
	int p = tm.pos[t];
	if (p < 0)
		return; /* zeroed by the main kernel */
	int chunk, nsu;
	dattn_split(p + 1, nz, pb, &chunk, &nsu);
	if (nsu == 1)
		return; /* written by the main kernel */
	size_t prow = (size_t)(D + 2);
	const float *base = part + ((size_t)t * d.n_head + h) * nz * prow;
	for (int k = threadIdx.x; k < D; k += blockDim.x)
		out[((size_t)t * d.n_head + h) * D + k] =
		    ds_f32_to_bf16(dattn_merge_dim(base, nsu, prow, k));
}

#ifndef DS_DATTN_EMU
extern "C" int ds_k_attn_decode_supported(struct ds_k_dims d)
{
	if (d.n_kv <= 0 || d.n_head <= 0 || d.n_head % d.n_kv != 0 || d.block_size <= 0)
		return 0;
	int G = d.n_head / d.n_kv;
	return (d.head_dim == 64 || d.head_dim == 128) && G >= 1 && G <= DS_K_ATTN_DECODE_MAX_G;
}

typedef void (*dattn_fn)(const uint16_t *, const uint16_t *, struct ds_k_tokmeta, struct ds_k_dims,
                         float, float *, uint16_t *, unsigned *, struct ds_k_qkv_epi);

/* One kernel instance: its function, positions per block iteration and dynamic shared memory. */
struct dattn_inst {
	dattn_fn fn;
	int pb;
	size_t smem;
};

/* The mma variant's instance (NOMATH: copies only; WP: warp-private stages; BULK: staged by
 * bulk async copies). */
template <int D, int G, bool NOMATH, bool WP = true, bool BULK = false>
static struct dattn_inst dattn_mma_inst(bool fused)
{
	typedef dattn_mma<D, G> Q;
	struct dattn_inst r;
	r.fn = fused ? dattn_mma_kernel<D, G, true, NOMATH, WP, BULK>
	             : dattn_mma_kernel<D, G, false, NOMATH, WP, BULK>;
	r.smem = (fused ? Q::SMEM_EPI : Q::SMEM) + Q::BT_BYTES + (BULK ? Q::BAR_BYTES : 0);
	r.pb = Q::P;
	return r;
}

/* The instance of variant v for d (supported dims; fused: the mma variant with the q/k/v
 * epilogue); fn = NULL when there is none. */
static struct dattn_inst dattn_pick(struct ds_k_dims d, int v, bool fused = false)
{
	struct dattn_inst r = {NULL, 0, 0};
	int G = d.n_head / d.n_kv;
#define DA_CASE(dd, g)                                                                             \
	if (d.head_dim == dd && G == g) {                                                          \
		r.pb = dattn_shape<dd, g>::PB;                                                     \
		if (v == DS_K_ATTN_DECODE_PIPE) {                                                  \
			r.fn = dattn_pipe_kernel<dd, g>;                                           \
			r.smem = dattn_pipe<dd, g>::SMEM;                                          \
		} else if (v == DS_K_ATTN_DECODE_MMA) {                                            \
			r = dattn_mma_inst<dd, g, false>(fused);                                   \
		} else if (v == DS_K_ATTN_DECODE_MMA_BLOCK) {                                      \
			r = dattn_mma_inst<dd, g, false, false>(fused);                            \
		} else if (v == DS_K_ATTN_DECODE_MMA_BULK) {                                       \
			r = dattn_mma_inst<dd, g, false, true, true>(fused);                       \
		} else if (v == DS_K_ATTN_DECODE_MMA_COPYONLY) {                                   \
			r = dattn_mma_inst<dd, g, true>(fused);                                    \
		} else if (v == DS_K_ATTN_DECODE_MMA_BULK_COPYONLY) {                              \
			r = dattn_mma_inst<dd, g, true, true, true>(fused);                        \
		} else if (v == DS_K_ATTN_DECODE_REG) {                                            \
			r.fn = dattn_kernel<dd, g>;                                                \
		}                                                                                  \
		if (fused && (v == DS_K_ATTN_DECODE_PIPE || v == DS_K_ATTN_DECODE_REG))            \
			r.fn = NULL; /* the fused epilogue: mma variants only */                   \
		return r;                                                                          \
	}
#define DA_D(dd)                                                                                   \
	DA_CASE(dd, 1)                                                                             \
	DA_CASE(dd, 2)                                                                             \
	DA_CASE(dd, 3)                                                                             \
	DA_CASE(dd, 4)                                                                             \
	DA_CASE(dd, 5)                                                                             \
	DA_CASE(dd, 6)                                                                             \
	DA_CASE(dd, 7)                                                                             \
	DA_CASE(dd, 8)
	DA_D(64)
	DA_D(128)
#undef DA_D
#undef DA_CASE
	return r;
}

/* Allows the instance's dynamic shared memory (over 48 KB needs an opt-in). */
static cudaError_t dattn_prepare(const struct dattn_inst *in)
{
	return in->smem == 0 ? cudaSuccess : ds_allow_smem(in->fn, in->smem);
}

extern "C" cudaError_t ds_k_attn_decode_occupancy_v(struct ds_k_dims d, int variant,
                                                    int *blocks_per_sm)
{
	struct dattn_inst in = {NULL, 0, 0};
	if (ds_k_attn_decode_supported(d))
		in = dattn_pick(d, variant);
	if (!in.fn || !blocks_per_sm)
		return cudaErrorInvalidValue;
	cudaError_t e = dattn_prepare(&in);
	if (e != cudaSuccess)
		return e;
	return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, in.fn, DA_THREADS,
	                                                     in.smem);
}

extern "C" cudaError_t ds_k_attn_decode_occupancy(struct ds_k_dims d, int *blocks_per_sm)
{
	return ds_k_attn_decode_occupancy_v(d, DS_K_ATTN_DECODE_REG, blocks_per_sm);
}

static cudaError_t dattn_launch(struct dattn_inst in, const uint16_t *q, const uint16_t *kv,
                                struct ds_k_tokmeta tm, int T, struct ds_k_dims d, int n_split,
                                float *part, uint16_t *out, unsigned *counters, int pdl,
                                cudaStream_t st, struct ds_k_qkv_epi ep)
{
	if (T <= 0)
		return cudaSuccess;
	if (!in.fn || n_split < 1 || n_split > DS_K_ATTN_DECODE_MAX_SPLIT ||
	    (n_split > 1 && !part) || d.n_head > 65535)
		return cudaErrorInvalidValue;
	cudaError_t e = dattn_prepare(&in);
	if (e != cudaSuccess)
		return e;
	float qscale = DA_LOG2E / sqrtf((float)d.head_dim);
	unsigned *cnt = n_split > 1 ? counters : NULL;
	e = ds_launch(in.fn, dim3(T, d.n_kv, n_split), dim3(DA_THREADS), in.smem, st, pdl, q, kv, tm,
	              d, qscale, part, out, cnt, ep);
	if (e != cudaSuccess || n_split == 1 || cnt)
		return e;
	return ds_launch(dattn_combine_kernel, dim3(T, d.n_head), dim3(d.head_dim), 0, st, pdl,
	                 (const float *)part, tm, d, n_split, in.pb, out);
}

extern "C" cudaError_t ds_k_attn_decode_v(const uint16_t *q, const uint16_t *kv,
                                          struct ds_k_tokmeta tm, int T, struct ds_k_dims d,
                                          int n_split, float *part, uint16_t *out,
                                          unsigned *counters, int variant, int pdl,
                                          cudaStream_t st)
{
	struct dattn_inst in = {NULL, 0, 0};
	if (ds_k_attn_decode_supported(d))
		in = dattn_pick(d, variant);
	struct ds_k_qkv_epi none = {NULL, NULL, NULL, NULL, NULL, NULL, 0};
	return dattn_launch(in, q, kv, tm, T, d, n_split, part, out, counters, pdl, st, none);
}

extern "C" cudaError_t ds_k_attn_decode_qkv(const struct ds_k_qkv_epi *ep, uint16_t *kv,
                                            struct ds_k_tokmeta tm, int T, struct ds_k_dims d,
                                            int n_split, float *part, uint16_t *out,
                                            unsigned *counters, int variant, int pdl,
                                            cudaStream_t st)
{
	struct dattn_inst in = {NULL, 0, 0};
	if (ds_k_attn_decode_supported(d) && ep && ep->qkv && ep->cs)
		in = dattn_pick(d, variant, true);
	struct ds_k_qkv_epi e = {NULL, NULL, NULL, NULL, NULL, NULL, 0};
	if (ep)
		e = *ep;
	e.early = e.early && !pdl;
	return dattn_launch(in, NULL, kv, tm, T, d, n_split, part, out, counters, pdl, st, e);
}

extern "C" cudaError_t ds_k_attn_decode(const uint16_t *q, const uint16_t *kv,
                                        struct ds_k_tokmeta tm, int T, struct ds_k_dims d,
                                        int n_split, float *part, uint16_t *out, int pdl,
                                        cudaStream_t st)
{
	return ds_k_attn_decode_v(q, kv, tm, T, d, n_split, part, out, NULL, DS_K_ATTN_DECODE_REG,
	                          pdl, st);
}
#endif
