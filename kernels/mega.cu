/* mega.cu - the fast path's fused decode layers: every transformer layer of a decode pass of 1, 2,
 * 4 or 8 rows, then the final RMSNorm and the LM head, in one persistent kernel.
 *
 * Why: a decode step at small batch is bound by reading the weights, yet the captured graph of
 * ~7 kernels per layer leaves DRAM idle at every kernel boundary (ramp-up, tail, launch latency)
 * and through the small kernels (RMSNorm, RoPE, attention), which together cost about a fifth
 * of the llama3-8b step at batch 1 on the H200 (bench/results/gpu-20261129-0ba97d4, ablate).
 *
 * How: one block per SM, resident for the whole pass (a cooperative launch). Each block owns a
 * fixed share of the output rows of each GEMM (the same share in every layer), and the block's
 * producer warp streams exactly those rows of every weight matrix, layer after layer, into a
 * ring of 4 KB shared-memory slots with bulk async copies (cp.async.bulk + mbarriers). It never
 * waits for the grid, only for free slots, so while the block's consumer warps sit at a grid
 * barrier or run attention, the ring fills with the next GEMM's weights: DRAM keeps streaming.
 * The weight copies carry an L2 evict-first policy (weights are read once a pass), so the K/V,
 * activations and partials the phases share stay in L2; and a layer's o-phase copies can wait,
 * after the first few, for the block's attention dot products (a.att_gate), so attention's K/V
 * loads do not queue behind a whole ring of copies.
 * The eight consumer warps run the phases of a layer, separated by grid-wide barriers:
 *   1. RMSNorm of x (every block computes x * w into shared memory and applies the row's 1 / rms
 *      to the dot products, so the GEMV need not wait for the reduction) and the q/k/v GEMV over
 * the block's (i, i + head_dim/2) row pairs, so RoPE happens in the epilogue, which writes q and
 * this position's K/V into the paged cache;
 *   2. flash-decoding attention: items (row, KV head, split), the same in every layer, so a block
 *      works its first item out once per launch and loads the item's K/V of earlier positions
 *      before the barrier that starts this phase (only q and the new position's K/V come after
 *      it); the last split of a (row, KV head) to finish merges the partials (a counter), so no
 *      merge phase follows;
 *   3. the o GEMV, whose epilogue adds into the residual stream x;
 *   4. RMSNorm and the gate/up GEMV over (gate j, up j) row pairs, SiLU*mul in the epilogue;
 *   5. the down GEMV, adding into x;
 * and after the last layer, RMSNorm and the LM head GEMV (fp32 logits), whose rows the producer
 * streams during the last layer's barriers.
 * A GEMV slot holds one K-segment (up to 2048 elements) of one weight row; a warp dots it with
 * the bf16 inputs held in shared memory and stores one partial per (row, segment, batch row);
 * the epilogue sums a row's segments in order. At 8 rows the GEMVs run on tensor cores instead
 * (mg_gemv_tc: 16 slots hold one segment of a 16-row tile, every warp takes an eighth of its
 * columns). Data other blocks wrote in this launch is read with ld.global.cg or cp.async.cg
 * (L2), never through L1.
 *
 * Key decision: the persistent grid replaces kernel boundaries by barriers, which alone would
 * save little; what pays is that the weight stream does not stop at them. The arithmetic is
 * the fast path's (fp32 accumulation of bf16 products, bf16 rounding at the kernel-per-op step's
 * points except that RMSNorm's scale comes after the GEMV), in an order fixed by the grid size,
 * so outputs are deterministic for a given device and batch, not batch-invariant. */
#include "kernels.h"
#include "cu_common.cuh"
#include "mbar.cuh"
#include "pdl.cuh"
#include "silu.cuh"

#include "attn_decode_core.cuh"
#include "mma_prims.cuh"
#include <string.h>

#define MG_CWARPS 8 /* consumer warps */
#define MG_CTHREADS (MG_CWARPS * 32)
#define MG_THREADS (MG_CTHREADS + 32) /* + the producer warp */
#define MG_SLOT 4096                  /* bytes per ring slot */
#define MG_SEG (MG_SLOT / 2)          /* elements per slot at most */
#define MG_PLANES 16                  /* producer lanes issuing copies */
#define MG_MIN_SLOTS 16               /* >= MG_PLANES, a multiple of MG_CWARPS */
#define MG_MAX_SLOTS 64

/* From MG_TC_M batch rows up, the GEMVs run on tensor cores (mma.sync m16n8k16) over tiles of 16
 * weight rows: 16 consecutive slots hold one K segment of a tile's rows, which all eight consumer
 * warps read (warp w: the segment's w-th eighth of columns) and release (a slot's empty barrier
 * then counts 8 arrivals). Slots sit MG_TSLOT bytes apart, so rows g and g + 1 (the lanes of one
 * 16-byte load phase) hit different banks. */
#define MG_TC_M 8
#define MG_TSLOT (MG_SLOT + 64)
#define MG_TROWS 16

enum { MG_QKV, MG_O, MG_GU, MG_DOWN, MG_NPHASE, MG_HEAD = MG_NPHASE /* after the layers */ };

/* What the host computed for a launch: the shared-memory carve-up and the attention split. */
struct mg_plan {
	int nslot;
	unsigned a_off;  /* bf16 GEMV inputs (T, kmax); between phases, attention's merge area */
	unsigned ps_off; /* per-(row, segment) partial dots */
	unsigned red_off;
	unsigned row_off; /* the first attention item; per batch row: K/V write offset, position */
	unsigned scr_off; /* tensor-core mode: the warps' partial tiles, twice */
	unsigned bar_off; /* 2 * nslot mbarriers */
	int nz;           /* attention splits per (row, KV head) */
	int head_rows;    /* LM head rows per chunk (the partial-dot area's capacity) */
	float qscale;
	int diag; /* ds_k_mega.diag */
};

/* The largest segment (in elements) that divides K: slots never straddle two rows. */
__host__ __device__ __forceinline__ int mg_seg(int K)
{
	int s = MG_SEG;
	while (s > 256 && K % s != 0)
		s >>= 1;
	return s;
}

/* One GEMV phase of one block: rows of W (N, K) grouped in units of rpu rows, in nseg segments of
 * seg columns; parts: the partial dots per row (nseg, or 1 in tensor-core mode, whose warps sum
 * theirs before storing). */
struct mg_phase {
	const uint16_t *W;
	int K, seg, nseg, parts;
	int u0, u1, rpu;
	int kind, half, ffn; /* kind: the phase; half: head_dim / 2 (q/k/v pairs); ffn: gate/up */
};

/* The reduction length K of a phase's weights, and its rows per unit (q/k/v and gate/up pair
 * two rows). */
__host__ __device__ __forceinline__ int mg_k(int kind, const struct ds_k_mega &a)
{
	return kind == MG_O ? a.d.n_head * a.d.head_dim : kind == MG_DOWN ? a.ffn : a.hidden;
}

__host__ __device__ __forceinline__ int mg_rpu(int kind)
{
	return kind == MG_QKV || kind == MG_GU ? 2 : 1;
}

__host__ __device__ __forceinline__ int mg_units(int kind, const struct ds_k_mega &a)
{
	switch (kind) {
	case MG_QKV:
		return (a.d.n_head + 2 * a.d.n_kv) * a.d.head_dim / 2;
	case MG_GU:
		return a.ffn;
	case MG_HEAD:
		return a.vocab;
	default:
		return a.hidden;
	}
}

/* Block b's share [u0, u1) of n units over nb blocks (balanced: sizes differ by at most 1). */
__host__ __device__ __forceinline__ void mg_share(int n, int b, int nb, int *u0, int *u1)
{
	*u0 = (int)((long long)n * b / nb);
	*u1 = (int)((long long)n * (b + 1) / nb);
}

__device__ __forceinline__ struct mg_phase
mg_phase_of(const struct ds_k_mega &a, const struct ds_k_mega_layer &L, int kind, bool tc)
{
	struct mg_phase p;
	p.kind = kind;
	p.half = a.d.head_dim / 2;
	p.ffn = a.ffn;
	p.rpu = mg_rpu(kind);
	p.W = kind == MG_QKV ? L.wqkv
	      : kind == MG_O ? L.wo
	      : kind == MG_GU ? L.w_gu
	      : kind == MG_DOWN ? L.w_down
	                      : a.lm_head;
	p.K = mg_k(kind, a);
	p.seg = mg_seg(p.K);
	p.nseg = p.K / p.seg;
	p.parts = tc ? 1 : p.nseg;
	mg_share(mg_units(kind, a), (int)blockIdx.x, (int)gridDim.x, &p.u0, &p.u1);
	return p;
}

/* The weight row of the block's local row r: q/k/v rows pair (i, i + half) within a head,
 * gate/up rows pair (j, ffn + j). */
__device__ __forceinline__ int mg_row(const struct mg_phase &p, int r)
{
	int u = p.u0 + r / p.rpu, mem = r % p.rpu;
	if (p.kind == MG_QKV)
		return (u / p.half) * 2 * p.half + u % p.half + mem * p.half;
	if (p.kind == MG_GU)
		return u + mem * p.ffn;
	return u;
}

/* Tensor-core mode: row i of a block's tile T is local row mg_tc_lrow; paired phases put a unit's
 * first row at i < 8 and its second at i + 8, so one lane's accumulators hold both rows of a pair
 * (mma rows g and g + 8). Rows past the block's share are empty slots. */
__device__ __forceinline__ int mg_tc_lrow(const struct mg_phase &p, int T, int i)
{
	return p.rpu == 2 ? 2 * (8 * T + (i & 7)) + (i >> 3) : 16 * T + i;
}

/* Tensor-core mode: slot items of phase p (tile by tile, segment by segment, 16 rows each). */
__device__ __forceinline__ int mg_tc_items(const struct mg_phase &p)
{
	return ((p.u1 - p.u0) * p.rpu + MG_TROWS - 1) / MG_TROWS * p.nseg * MG_TROWS;
}

/* ---- synchronization ---- */

/* The consumer warps only (the producer never joins). */
__device__ __forceinline__ void mg_csync(void)
{
	asm volatile("bar.sync 1, %0;\n" ::"n"(MG_CTHREADS) : "memory");
}

__device__ __forceinline__ unsigned long long mg_ld_acquire(const unsigned long long *p)
{
	unsigned long long v;
	asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
	return v;
}

/* Grid-wide barrier of the consumer warps on one 64-bit counter that only grows: a block's
 * arrival returns the count before it, so the barrier it is in ends when the count reaches the
 * next multiple of the grid size (every launch adds whole barriers: the count stays a multiple
 * between launches, and 2^64 arrivals never wrap). One atomic per block and a spin on an
 * acquire load, under mbar.cuh's watchdog. */
__device__ __forceinline__ void mg_grid_sync(unsigned long long *bar)
{
	mg_csync();
	if (threadIdx.x == 0) {
		unsigned long long nb = gridDim.x;
		__threadfence();
		unsigned long long target = (atomicAdd(bar, 1ull) / nb + 1) * nb;
		uint64_t t0 = 0;
		for (unsigned n = 1; (long long)(mg_ld_acquire(bar) - target) < 0; n++)
			if ((n & 1023u) == 0)
				ds_spin_watchdog(t0);
		__threadfence();
	}
	mg_csync();
}

/* ---- the producer: the block's weight rows, in consumption order ---- */

/* The weight copies' L2 cache hint: on, with policy pol (createpolicy), or off. */
struct mg_hint {
	unsigned long long pol;
	bool on;
};

/* A bulk copy of bytes from src to shared dst, completing on mbarrier bar, under hint h. */
__device__ __forceinline__ void mg_bulk(unsigned dst, const void *src, unsigned bytes, unsigned bar,
                                        struct mg_hint h)
{
	if (h.on)
		asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
		             ".L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
		             "l"(src), "r"(bytes), "r"(bar), "l"(h.pol)
		             : "memory");
	else
		asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
		             " [%0], [%1], %2, [%3];\n" ::"r"(dst),
		             "l"(src), "r"(bytes), "r"(bar)
		             : "memory");
}

/* The weight copies' hint: evict first (weights are read once a pass, so they need not push
 * out what attention reads again), or none. */
__device__ __forceinline__ struct mg_hint mg_weight_hint(bool evict_first)
{
	struct mg_hint h = {0, evict_first};
	if (evict_first)
		asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n"
		             : "=l"(h.pol));
	return h;
}

/* Where a producer phase waits for the block's attention dot products (mbarrier bar, phase
 * parity): before copy item `item` (< 0: nowhere). */
struct mg_gate {
	int item;
	unsigned bar, parity;
};

/* The turn (first item of step items) at which a phase of n items waits for gate g; -1: none. */
__device__ __forceinline__ int mg_gate_turn(struct mg_gate g, int n, int step)
{
	return g.item < 0 ? -1 : min(g.item, n - 1) / step * step;
}

/* The producer warp: its first MG_PLANES lanes take the block's slot items of each phase in
 * turns (item q = segment q % nseg of local row q / nseg, slot (it + q) % nslot), so per-item
 * bookkeeping is spread over lanes and copies are issued MG_PLANES at a time. The lanes
 * reconverge after every turn: the items they wait for at once then span fewer than nslot
 * slots, so no lane waits on a slot's barrier a round ahead of another (parity aliasing). */
__device__ void mg_produce_phase(const struct mg_phase &p, const struct mg_plan &pl, unsigned ring,
                                 unsigned full, unsigned empty, unsigned &it, struct mg_hint hint,
                                 struct mg_gate g)
{
	unsigned ns = (unsigned)pl.nslot;
	int lane = threadIdx.x & 31;
	int items = (p.u1 - p.u0) * p.rpu * p.nseg;
	unsigned bytes = (unsigned)p.seg * 2;
	int gq = mg_gate_turn(g, items, MG_PLANES);
	for (int q0 = 0; q0 < items; q0 += MG_PLANES) {
		if (q0 == gq)
			mbar_wait(g.bar, g.parity);
		int q = q0 + lane;
		if (lane < MG_PLANES && q < items) {
			unsigned gi = it + (unsigned)q, slot = gi % ns;
			const uint16_t *src =
			    p.W + (size_t)mg_row(p, q / p.nseg) * p.K + (size_t)(q % p.nseg) * p.seg;
			mbar_wait(empty + 8 * slot, ((gi / ns) & 1u) ^ 1u);
			mbar_expect_tx(full + 8 * slot, bytes);
			mg_bulk(ring + slot * MG_SLOT, src, bytes, full + 8 * slot, hint);
		}
		__syncwarp();
	}
	it += (unsigned)items;
}

/* Tensor-core mode: one turn per (tile, segment), lane i copying row i's segment (an empty row:
 * an arrival without bytes). */
__device__ void mg_produce_phase_tc(const struct mg_phase &p, const struct mg_plan &pl,
                                    unsigned ring, unsigned full, unsigned empty, unsigned &it,
                                    struct mg_hint hint, struct mg_gate g)
{
	unsigned ns = (unsigned)pl.nslot;
	int lane = threadIdx.x & 31, nrows = (p.u1 - p.u0) * p.rpu, items = mg_tc_items(p);
	unsigned bytes = (unsigned)p.seg * 2;
	int gq = mg_gate_turn(g, items, MG_TROWS);
	for (int q0 = 0; q0 < items; q0 += MG_TROWS) {
		if (q0 == gq)
			mbar_wait(g.bar, g.parity);
		int grp = q0 / MG_TROWS, T = grp / p.nseg, sg = grp % p.nseg;
		if (lane < MG_TROWS) {
			int i = lane, s = sg;
			if ((pl.diag & 5) == 5 && p.nseg == 2) { /* diag: 8 whole rows a step */
				i = 8 * sg + lane / 2;
				s = lane % 2;
			}
			int lr = mg_tc_lrow(p, T, i);
			bool v = lr < nrows;
			unsigned gi = it + (unsigned)(q0 + lane), slot = gi % ns;
			mbar_wait(empty + 8 * slot, ((gi / ns) & 1u) ^ 1u);
			mbar_expect_tx(full + 8 * slot, v ? bytes : 0u);
			if (v)
				mg_bulk(ring + slot * MG_TSLOT,
				        p.W + (size_t)mg_row(p, lr) * p.K + (size_t)s * p.seg,
				        bytes, full + 8 * slot, hint);
		}
		__syncwarp();
	}
	it += (unsigned)items;
}

template <int M>
__device__ __forceinline__ void mg_produce_rows(const struct mg_phase &p, const struct mg_plan &pl,
                                                unsigned ring, unsigned full, unsigned empty,
                                                unsigned &it, struct mg_hint hint, struct mg_gate g)
{
	if (M >= MG_TC_M)
		mg_produce_phase_tc(p, pl, ring, full, empty, it, hint, g);
	else
		mg_produce_phase(p, pl, ring, full, empty, it, hint, g);
}

/* The producer warp: the block's weight rows of every phase of every layer, then the LM head's;
 * a layer's o phase waits at a.att_gate for the block's attention dot products (att_bar). */
template <int M>
__device__ void mg_produce(const struct ds_k_mega &a, const struct mg_plan &pl, unsigned ring,
                           unsigned full, unsigned empty, unsigned att_bar)
{
	struct mg_gate none = {-1, 0, 0};
	constexpr bool TC = M >= MG_TC_M;
	unsigned it = 0;
	struct mg_hint hint = mg_weight_hint(a.weights_evict_first);
	for (int l = 0; l < a.n_layer; l++) {
		struct ds_k_mega_layer L = a.layers[l];
		for (int kind = 0; kind < MG_NPHASE; kind++) {
			struct mg_gate g = {kind == MG_O ? a.att_gate : -1, att_bar,
			                    (unsigned)l & 1u};
			mg_produce_rows<M>(mg_phase_of(a, L, kind, TC), pl, ring, full, empty, it,
			                   hint, g);
		}
	}
	/* the LM head in the consumers' chunks */
	struct mg_phase p = mg_phase_of(a, a.layers[0], MG_HEAD, TC);
	int u1 = p.u1;
	for (int u = p.u0; u < u1; u += pl.head_rows) {
		p.u0 = u;
		p.u1 = min(u + pl.head_rows, u1);
		mg_produce_rows<M>(p, pl, ring, full, empty, it, hint, none);
	}
}

/* ---- consumer phases ---- */

/* The row stride (elements) of the GEMV input A for K columns: tensor-core mode pads a row by 64
 * bytes, so the lanes of rows g and g + 1 reading the same columns hit different banks. */
template <int M> __host__ __device__ __forceinline__ int mg_astride(int K)
{
	return M >= MG_TC_M ? K + 32 : K;
}

/* The GEMV input of an RMSNorm phase in one pass over x: A (M, n) bf16 = x * w, and each warp's
 * part of each row's sum of squares in red[m * MG_CWARPS + warp]. The 1 / rms factor is a
 * scalar per row, so it is applied to the dot products in the epilogue (mg_norm_scale) instead
 * of before the bf16 rounding: the GEMV need not wait for the reduction. */
template <int M>
__device__ void mg_norm_in(const struct ds_k_mega &a, const uint16_t *w, uint16_t *A, float *red)
{
	int n = a.hidden;
	float ss[M];
#pragma unroll
	for (int m = 0; m < M; m++)
		ss[m] = 0.0f;
	for (int i = threadIdx.x * 4; i < n; i += MG_CTHREADS * 4) {
		uint2 wv = __ldg((const uint2 *)(w + i));
		float4 v[M]; /* every row's loads in flight at once */
#pragma unroll
		for (int m = 0; m < M; m++)
			v[m] = __ldcg((const float4 *)(a.x + (size_t)m * n + i));
		unsigned wp[2] = {wv.x, wv.y};
#pragma unroll
		for (int m = 0; m < M; m++) {
			float xs[4] = {v[m].x, v[m].y, v[m].z, v[m].w};
			uint16_t o[4];
#pragma unroll
			for (int k = 0; k < 4; k++) {
				unsigned wb = (wp[k / 2] >> (16 * (k % 2))) & 0xffffu;
				ss[m] = __fmaf_rn(xs[k], xs[k], ss[m]);
				o[k] = ds_f32_to_bf16(__fmul_rn(xs[k], ds_bf16_to_f32(wb)));
			}
			*(uint2 *)(A + (size_t)m * mg_astride<M>(n) + i) =
			    make_uint2(o[0] | (unsigned)o[1] << 16, o[2] | (unsigned)o[3] << 16);
		}
	}
#pragma unroll
	for (int m = 0; m < M; m++) {
		for (int o = 16; o > 0; o >>= 1)
			ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], o);
		if ((threadIdx.x & 31) == 0)
			red[m * MG_CWARPS + (threadIdx.x >> 5)] = ss[m];
	}
	mg_csync();
}

/* Row m's 1 / rms from mg_norm_in's partial sums (the same fixed order in every block). */
__device__ __forceinline__ float mg_norm_scale(const struct ds_k_mega &a, const float *red, int m)
{
	float ss = 0.0f;
#pragma unroll
	for (int w = 0; w < MG_CWARPS; w++)
		ss += red[m * MG_CWARPS + w];
	return 1.0f / sqrtf(ss / (float)a.hidden + a.rms_eps);
}

/* A (M, n) = src (M, n) bf16, written by other blocks in this launch. */
template <int M> __device__ void mg_copy_in(const uint16_t *src, int n, uint16_t *A)
{
	constexpr int B = M >= MG_TC_M ? 4 : 1; /* loads in flight per thread */
	int n8 = n / 8;
	for (int i0 = threadIdx.x; i0 < M * n8; i0 += B * MG_CTHREADS) {
		uint4 v[B];
#pragma unroll
		for (int k = 0; k < B; k++)
			if (i0 + k * MG_CTHREADS < M * n8)
				v[k] = __ldcg((const uint4 *)src + i0 + k * MG_CTHREADS);
#pragma unroll
		for (int k = 0; k < B; k++) {
			int i = i0 + k * MG_CTHREADS;
			if (i < M * n8)
				*(uint4 *)(A + (size_t)(i / n8) * mg_astride<M>(n) + i % n8 * 8) =
				    v[k];
		}
	}
	mg_csync();
}

/* The GEMV of phase p over the ring: slot item q = (local row q / nseg, segment q % nseg) goes
 * to warp q % MG_CWARPS; ps[(r * nseg + s) * M + m] = dot of that segment with A row m. it is
 * the running slot count, the same as the producer's. */
template <int M>
__device__ void mg_gemv(const struct mg_phase &p, const struct mg_plan &pl, const uint16_t *A,
                        float *ps, unsigned char *smem, unsigned full, unsigned empty, unsigned &it)
{
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int items = (p.u1 - p.u0) * p.rpu * p.nseg;
	int nu = p.seg / 256; /* 16-byte chunks per lane */
	for (int q = warp; q < items; q += MG_CWARPS) {
		unsigned gi = it + (unsigned)q, slot = gi % (unsigned)pl.nslot;
		int s = q % p.nseg;
		mbar_wait(full + 8 * slot, (gi / (unsigned)pl.nslot) & 1u);
		const uint4 *w = (const uint4 *)(smem + (size_t)slot * MG_SLOT);
		const uint4 *a = (const uint4 *)A + (size_t)s * (p.seg / 8);
		float acc[M];
#pragma unroll
		for (int m = 0; m < M; m++)
			acc[m] = 0.0f;
#pragma unroll 8
		for (int u = 0; u < nu; u++) {
			float wf[8];
			dattn_unpack(w[u * 32 + lane], wf);
#pragma unroll
			for (int m = 0; m < M; m++) {
				float af[8];
				dattn_unpack(a[(size_t)m * (p.K / 8) + u * 32 + lane], af);
#pragma unroll
				for (int i = 0; i < 8; i++)
					acc[m] = fmaf(wf[i], af[i], acc[m]);
			}
		}
#pragma unroll
		for (int m = 0; m < M; m++)
			for (int o = 16; o > 0; o >>= 1)
				acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
		__syncwarp();
		if (lane == 0) {
			mbar_arrive(empty + 8 * slot);
#pragma unroll
			for (int m = 0; m < M; m++)
				ps[(size_t)q * M + m] = acc[m];
		}
	}
	it += (unsigned)items;
	mg_csync();
}

/* Tensor-core mode, an input in global memory: rows 0 .. M - 1 of step (tile, segment) sg's
 * columns of B (row stride bs) into stg (row stride seg + 32, the banks' padding) with cp.async,
 * one commit group. */
template <int M>
__device__ __forceinline__ void mg_stage(const uint16_t *B, int bs, int seg, int sg, uint16_t *stg)
{
	int n8 = seg / 8;
	for (int i = threadIdx.x; i < M * n8; i += MG_CTHREADS)
		mt_cp16(stg + (size_t)(i / n8) * (seg + 32) + i % n8 * 8,
		        B + (size_t)(i / n8) * bs + (size_t)sg * seg + i % n8 * 8, true);
	mt_commit();
}

/* The GEMV of phase p on tensor cores (M a multiple of 8): per 16-row tile and segment, warp w
 * takes columns [w * seg / 8, (w + 1) * seg / 8) of the 16 slots, one m16n8k16 pair per 32 of
 * them and 8 batch rows; lane (g, t) waits only for the slots of rows g and g + 8. The K order
 * within 32 columns is permuted alike on both sides: lane (g, t) takes columns 8t .. 8t + 7 from
 * weight rows g and g + 8 and from input row g, 8t + {0..3} for the first mma and 8t + {4..7}
 * for the second. The warps' partial tiles meet in scr (two buffers: one sync per tile) and are
 * summed in warp order into ps[row * M + m]. The input B (M rows of stride bs) is in shared
 * memory or, ST, in global memory written in this launch: then each step's segment is staged
 * into one of two buffers at stg with cp.async while the step before runs (one consumer sync a
 * step). */
template <int M, bool ST>
__device__ void mg_gemv_tc(const struct mg_phase &p, const struct mg_plan &pl, const uint16_t *B,
                           int bs, uint16_t *stg, float *ps, float *scr, unsigned char *smem,
                           unsigned full, unsigned empty, unsigned &it)
{
	constexpr int NT = M / 8, TM = MG_TROWS * M;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	int nrows = (p.u1 - p.u0) * p.rpu, nt = (nrows + MG_TROWS - 1) / MG_TROWS;
	int cw = p.seg / MG_CWARPS, nc = cw / 32; /* 1 .. 8 chunks of 32 columns */
	if (pl.diag & 1)                          /* diag: no chunks, the stream's pace alone */
		nc = 0;
	unsigned ns = (unsigned)pl.nslot;
	int sst = p.seg + 32, steps = nt * p.nseg;
	if (ST && steps > 0)
		mg_stage<M>(B, bs, p.seg, 0, stg);
	for (int T = 0; T < nt; T++) {
		float acc[NT][4];
#pragma unroll
		for (int n = 0; n < NT; n++)
			acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
		for (int sg = 0; sg < p.nseg; sg++) {
			unsigned g0 = it + (unsigned)((T * p.nseg + sg) * MG_TROWS);
			unsigned ga = g0 + (unsigned)g, gb = ga + 8;
			int col = warp * cw + 8 * t, step = T * p.nseg + sg;
			const uint16_t *bp = B + (size_t)g * bs + (size_t)sg * p.seg + col;
			int bstr = bs;
			if (ST) {
				mt_wait<0>();
				/* the step's segment in; every warp past the step before */
				mg_csync();
				if (step + 1 < steps)
					mg_stage<M>(B, bs, p.seg, (step + 1) % p.nseg,
					            stg + (size_t)((step + 1) & 1) * M * sst);
				bp = stg + (size_t)(step & 1) * M * sst + (size_t)g * sst + col;
				bstr = sst;
			}
			mbar_wait(full + 8 * (ga % ns), (ga / ns) & 1u);
			mbar_wait(full + 8 * (gb % ns), (gb / ns) & 1u);
			if ((pl.diag & 3) == 3) { /* diag: each slot freed as soon as it landed */
				if (t == 0) {
					mbar_arrive(empty + 8 * (ga % ns));
					mbar_arrive(empty + 8 * (gb % ns));
				}
				continue;
			}
			__syncwarp();
			const unsigned char *wa = smem + (size_t)(ga % ns) * MG_TSLOT + col * 2;
			const unsigned char *wb = smem + (size_t)(gb % ns) * MG_TSLOT + col * 2;
#pragma unroll
			for (int c = 0; c < 8; c++) {
				if (c >= nc)
					break;
				uint4 x0 = *(const uint4 *)(wa + c * 64),
				      x1 = *(const uint4 *)(wb + c * 64);
				unsigned lo[4] = {x0.x, x1.x, x0.y, x1.y};
				unsigned hi[4] = {x0.z, x1.z, x0.w, x1.w};
#pragma unroll
				for (int n = 0; n < NT; n++) {
					uint4 b =
					    *(const uint4 *)(bp + (size_t)n * 8 * bstr + c * 32);
					mt_mma(acc[n], lo, b.x, b.y);
					mt_mma(acc[n], hi, b.z, b.w);
				}
			}
			__syncwarp();
			if (lane < MG_TROWS)
				mbar_arrive(empty + 8 * ((g0 + (unsigned)lane) % ns));
		}
		float *sc = scr + (T & 1) * MG_CWARPS * TM;
#pragma unroll
		for (int h = 0; h < 2; h++) /* mma rows g and g + 8 */
#pragma unroll
			for (int n = 0; n < NT; n++) {
				float *o = sc + (size_t)warp * TM + (g + 8 * h) * M + n * 8 + 2 * t;
				o[0] = acc[n][2 * h];
				o[1] = acc[n][2 * h + 1];
			}
		mg_csync();
		for (int i = threadIdx.x; i < TM; i += MG_CTHREADS) {
			int lr = mg_tc_lrow(p, T, i / M);
			if (lr >= nrows)
				continue;
			float v = 0.0f;
#pragma unroll
			for (int w = 0; w < MG_CWARPS; w++)
				v += sc[w * TM + i];
			ps[(size_t)lr * M + i % M] = v;
		}
	}
	it += (unsigned)mg_tc_items(p);
	mg_csync();
}

/* Phase p's GEMV over input B of K = p.K columns: in shared memory, row stride mg_astride<M>(K),
 * or (ST, tensor-core mode) in global memory, row stride K, staged through stg. */
template <int M, bool ST>
__device__ __forceinline__ void mg_gemv_any(const struct mg_phase &p, const struct mg_plan &pl,
                                            const uint16_t *B, int K, uint16_t *stg, float *ps,
                                            float *scr, unsigned char *smem, unsigned full,
                                            unsigned empty, unsigned &it)
{
	if constexpr (M >= MG_TC_M)
		mg_gemv_tc<M, ST>(p, pl, B, ST ? K : mg_astride<M>(K), stg, ps, scr, smem, full,
		                  empty, it);
	else
		mg_gemv<M>(p, pl, B, ps, smem, full, empty, it);
}

/* The full dot of local row r with A row m: its segments summed in order. */
template <int M>
__device__ __forceinline__ float mg_dot(const float *ps, const struct mg_phase &p, int r, int m)
{
	float v = 0.0f;
	for (int s = 0; s < p.parts; s++)
		v += ps[((size_t)r * p.parts + s) * M + m];
	return v;
}

/* Batch row m's block table. */
__device__ __forceinline__ const int32_t *mg_bt(const struct ds_k_mega &a, int m)
{
	return a.tm.bt + __ldg(a.tm.bt_off + __ldg(a.tm.seq + m));
}

/* Per batch row, once per launch (positions and block tables hold for the whole pass): where
 * this position's K/V goes in a layer's cache (kvo, elements; -1 for a padding row) and the
 * position, so no layer's q/k/v epilogue walks position -> block table -> block again. */
template <int M>
__device__ void mg_rows_init(const struct ds_k_mega &a, long long *kvo, int *rpos)
{
	struct ds_k_dims d = a.d;
	for (int m = threadIdx.x; m < M; m += MG_CTHREADS) {
		int pos = __ldg(a.tm.pos + m);
		long long o = -1;
		if (pos >= 0) {
			int blk = __ldg(mg_bt(a, m) + pos / d.block_size);
			o = (long long)blk * 2 * d.n_kv * d.block_size * d.head_dim +
			    (long long)(pos % d.block_size) * d.head_dim;
		}
		kvo[m] = o;
		rpos[m] = pos;
	}
	mg_csync();
}

/* q/k/v epilogue: RoPE on q and k pairs, q to a.q, K/V of this position into layer l's cache
 * (padding rows: q zeros, no K/V). The expressions of ds_k_qkv_rope. */
template <int M>
__device__ void mg_qkv_out(const struct ds_k_mega &a, const struct mg_phase &p, const float *ps,
                           const float *red, const long long *kvo, const int *rpos, uint16_t *kv)
{
	struct ds_k_dims d = a.d;
	int D = d.head_dim, half = p.half, np = p.u1 - p.u0;
	size_t hs = (size_t)d.block_size * D; /* one head's block */
	for (int i = threadIdx.x; i < np * M; i += MG_CTHREADS) {
		int k = i % np, m = i / np, u = p.u0 + k;
		int h = u / half, j = u % half;
		float sc = mg_norm_scale(a, red, m);
		float x1 = __fmul_rn(mg_dot<M>(ps, p, 2 * k, m), sc);
		float x2 = __fmul_rn(mg_dot<M>(ps, p, 2 * k + 1, m), sc);
		int pos = rpos[m];
		uint16_t *dst;
		if (h < d.n_head) {
			dst = a.q + ((size_t)m * d.n_head + h) * D;
		} else if (pos < 0) {
			continue;
		} else { /* V heads follow K heads: n_kv + vh */
			dst = kv + kvo[m] + (size_t)(h - d.n_head) * hs;
		}
		if (h >= d.n_head + d.n_kv) { /* V */
			dst[j] = ds_f32_to_bf16(x1);
			dst[j + half] = ds_f32_to_bf16(x2);
		} else if (pos < 0) {
			dst[j] = 0;
			dst[j + half] = 0;
		} else {
			const float *c = a.rope_cs + (size_t)pos * half * 2;
			float co = __ldg(c + 2 * j), si = __ldg(c + 2 * j + 1);
			dst[j] = ds_f32_to_bf16(__fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si)));
			dst[j + half] =
			    ds_f32_to_bf16(__fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si)));
		}
	}
}

/* x[m][row] += the row's dot (o and down). */
template <int M>
__device__ void mg_residual_out(const struct ds_k_mega &a, const struct mg_phase &p,
                                const float *ps)
{
	int np = p.u1 - p.u0;
	for (int i = threadIdx.x; i < np * M; i += MG_CTHREADS) {
		int r = i % np, m = i / np;
		float *xp = a.x + (size_t)m * a.hidden + p.u0 + r;
		*xp = __ldcg(xp) + mg_dot<M>(ps, p, r, m);
	}
}

/* act[m][j] = bf16(silu(gate) * up), as ds_k_silu_mul. */
template <int M>
__device__ void mg_silu_out(const struct ds_k_mega &a, const struct mg_phase &p, const float *ps,
                            const float *red)
{
	int np = p.u1 - p.u0;
	for (int i = threadIdx.x; i < np * M; i += MG_CTHREADS) {
		int k = i % np, m = i / np;
		float sc = mg_norm_scale(a, red, m);
		float g = __fmul_rn(mg_dot<M>(ps, p, 2 * k, m), sc);
		float u = __fmul_rn(mg_dot<M>(ps, p, 2 * k + 1, m), sc);
		a.act[(size_t)m * a.ffn + p.u0 + k] = ds_silu_mul_bf16(g, u);
	}
}

/* logits[m][row] = the row's dot, scaled by row m's 1 / rms (the final RMSNorm). */
template <int M>
__device__ void mg_head_out(const struct ds_k_mega &a, const struct mg_phase &p, const float *ps,
                            const float *red)
{
	int np = p.u1 - p.u0;
	for (int i = threadIdx.x; i < np * M; i += MG_CTHREADS) {
		int r = i % np, m = i / np;
		a.logits[(size_t)m * a.vocab + p.u0 + r] =
		    __fmul_rn(mg_dot<M>(ps, p, r, m), mg_norm_scale(a, red, m));
	}
}

/* Merges the nsu split partials of G heads (base: head 0, split 0; rows of D + 2 floats: m, l,
 * acc; split stride one row, head stride nz rows) into o (G, D) bf16. Each output issues the
 * (m, l, acc) loads of up to MG_MERGE splits at once (one L2 round trip for up to MG_MERGE
 * splits, not one for the weights and one for the accumulators) and combines them in split
 * order, rescaling its running sums when a later group raises the maximum. */
#define MG_MERGE 16
template <int D, int G>
__device__ void mg_merge_splits(const float *base, int nz, int nsu, uint16_t *o)
{
	size_t prow = (size_t)D + 2;
	for (int i = threadIdx.x; i < G * D; i += MG_CTHREADS) {
		int g = i / D, k = i % D;
		const float *pg = base + (size_t)g * nz * prow;
		float M = -INFINITY, L = 0.0f, A = 0.0f;
		for (int z0 = 0; z0 < nsu; z0 += MG_MERGE) {
			float m[MG_MERGE], l[MG_MERGE], acc[MG_MERGE];
#pragma unroll
			for (int j = 0; j < MG_MERGE; j++) {
				const float *pz = pg + (size_t)(z0 + j) * prow;
				bool in = z0 + j < nsu;
				m[j] = in ? __ldcg(pz) : -INFINITY;
				l[j] = in ? __ldcg(pz + 1) : 0.0f;
				acc[j] = in ? __ldcg(pz + 2 + k) : 0.0f;
			}
			float Mn = M;
#pragma unroll
			for (int j = 0; j < MG_MERGE; j++)
				Mn = fmaxf(Mn, m[j]);
			if (Mn == -INFINITY)
				continue;
			float r = M == -INFINITY ? 0.0f : exp2f(M - Mn);
			L *= r;
			A *= r;
#pragma unroll
			for (int j = 0; j < MG_MERGE; j++) {
				float e = m[j] == -INFINITY ? 0.0f : exp2f(m[j] - Mn);
				L = fmaf(l[j], e, L);
				A = fmaf(acc[j], e, A);
			}
			M = Mn;
		}
		o[i] = ds_f32_to_bf16(A / L);
	}
}

/* One attention item (row m, KV head kh, split z) of a launch: the same in every layer, so a
 * block works out its first item once (mg_att_of, kept in shared memory, and each lane's K
 * offsets, mg_att_offs) and, in each layer, loads the item's K/V of earlier positions before the
 * q/k/v -> attention barrier (mg_att_load_old): only q and this position's K/V, which the q/k/v
 * phase writes, are read after it. */
struct mg_att {
	int m, kh, z; /* m < 0: no item */
	int pos;      /* the row's position (< 0: a padding row) */
	int nsu, lo, hi;
	const int32_t *bt; /* the row's block table */
};
#define MG_NO_OFF 0xffffffffu
#define MG_ATT_BYTES ((sizeof(struct mg_att) + 15) / 16 * 16)

template <int M, int D, int G>
__device__ struct mg_att mg_att_of(const struct ds_k_mega &a, const struct mg_plan &pl, int item)
{
	constexpr int PB = MG_CWARPS * dattn_shape<D, G>::U * dattn_shape<D, G>::PPS;
	struct ds_k_dims d = a.d;
	struct mg_att t;
	t.m = -1;
	t.nsu = 0;
	if (item >= M * d.n_kv * pl.nz)
		return t;
	t.m = item / (d.n_kv * pl.nz);
	t.kh = (item / pl.nz) % d.n_kv;
	t.z = item % pl.nz;
	t.pos = __ldg(a.tm.pos + t.m);
	if (t.pos < 0)
		return t;
	int len = t.pos + 1, chunk, c_old, n_old;
	dattn_split(len, pl.nz, PB, &chunk, &t.nsu);
	/* when the earlier positions alone split into shorter items, split them and let the last
	 * item also take this position (one more step for its first warp, not one more iteration
	 * for every item: 2049 positions over 16 splits of 64-position iterations are 11 items of 3
	 * iterations, 2048 are 16 of 2) */
	dattn_split(max(t.pos, 1), pl.nz, PB, &c_old, &n_old);
	if (c_old < chunk) {
		chunk = c_old;
		t.nsu = n_old;
	}
	t.lo = t.z * chunk;
	t.hi = t.z == t.nsu - 1 ? len : min(t.lo + chunk, len);
	t.bt = mg_bt(a, t.m);
	return t;
}

/* The lane's first position of item t. */
template <int D, int G> __device__ __forceinline__ int mg_att_base(const struct mg_att &t)
{
	typedef dattn_shape<D, G> S;
	return t.lo + (int)(threadIdx.x >> 5) * S::U * S::PPS + (int)(threadIdx.x & 31) / S::LP;
}

/* This lane's first-iteration K offsets of item t in a layer's cache, in 16-byte units
 * (MG_NO_OFF past hi; the host keeps a layer's cache under 2^32 units). */
template <int D, int G>
__device__ void mg_att_offs(const struct ds_k_mega &a, const struct mg_att &t,
                            unsigned (&off)[dattn_shape<D, G>::U])
{
	typedef dattn_shape<D, G> S;
	int base0 = mg_att_base<D, G>(t), sub = (threadIdx.x & 31) % S::LP;
	bool any = t.m >= 0 && t.pos >= 0 && t.z < t.nsu;
	struct dattn_src src = dattn_src_of<D>(a.d, a.kv, t.hi, t.bt);
#pragma unroll
	for (int u = 0; u < S::U; u++) {
		int p = base0 + u * S::PPS;
		off[u] = MG_NO_OFF;
		if (any && p < t.hi)
			off[u] = (unsigned)(((size_t)t.kh * a.d.block_size * D + sub * 8 +
			                     dattn_kv_off(src, p)) /
			                    8);
	}
}

/* The item's first-iteration K/V at positions before pos (written by earlier passes); zeros
 * elsewhere. */
template <int D, int G>
__device__ __forceinline__ void mg_att_load_old(const struct mg_att &t,
                                                const unsigned (&off)[dattn_shape<D, G>::U],
                                                const uint16_t *kv, size_t vstride,
                                                uint4 (&k)[dattn_shape<D, G>::U],
                                                uint4 (&v)[dattn_shape<D, G>::U])
{
	typedef dattn_shape<D, G> S;
	int base0 = mg_att_base<D, G>(t);
	const uint4 *kq = (const uint4 *)kv, *vq = (const uint4 *)(kv + vstride);
#pragma unroll
	for (int u = 0; u < S::U; u++) {
		bool old = off[u] != MG_NO_OFF && base0 + u * S::PPS < t.pos;
		k[u] = old ? __ldcg(kq + off[u]) : make_uint4(0, 0, 0, 0);
		v[u] = old ? __ldcg(vq + off[u]) : make_uint4(0, 0, 0, 0);
	}
}

/* Stamp k of layer l (DS_K_MEGA_STAMPS per layer) when tracing. */
__device__ __forceinline__ void mg_stamp(const struct ds_k_mega &a, int l, int k)
{
	if (a.trace && threadIdx.x == 0) {
		unsigned long long t;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
		a.trace[((size_t)blockIdx.x * a.n_layer + l) * DS_K_MEGA_STAMPS + k] = t;
	}
}

/* Opens the producer's gate (a.att_gate) at this point of the block's first attention item (sl
 * >= 0): after the dot products (late false) or after the partials are stored and counted
 * (late true), as a.att_gate_late asks. */
__device__ __forceinline__ void mg_gate_open(const struct ds_k_mega &a, int sl, bool late,
                                             unsigned att_bar)
{
	if (sl >= 0 && a.att_gate >= 0 && a.att_gate_late == late && threadIdx.x == 0)
		mbar_arrive(att_bar);
}

/* Runs item t of layer cache kv, its first iteration's K/V of earlier positions already in k, v.
 * A row with one split writes its output; otherwise every split writes its partials (m, l, acc)
 * for the KV head's G query heads, counts itself in, and the last one merges them (counters
 * return to zero), so no barrier and merge phase follow. */
template <int D, int G>
__device__ void mg_att_run(const struct ds_k_mega &a, const struct mg_plan &pl,
                           const struct mg_att &t, const unsigned (&off)[dattn_shape<D, G>::U],
                           const uint16_t *kv, uint4 (&ka)[dattn_shape<D, G>::U],
                           uint4 (&va)[dattn_shape<D, G>::U], float *sh, float *red, int sl,
                           unsigned att_bar)
{
	typedef dattn_shape<D, G> S;
	constexpr int PB = MG_CWARPS * S::U * S::PPS;
	struct ds_k_dims d = a.d;
	int sub = (threadIdx.x & 31) % S::LP, slot = (threadIdx.x & 31) / S::LP;
	float *sh_m = sh, *sh_l = sh + MG_CWARPS * G, *sh_acc = sh + 2 * MG_CWARPS * G;
	size_t h0 = (size_t)t.m * d.n_head + (size_t)t.kh * G, prow = (size_t)D + 2;
	size_t vstride = (size_t)d.n_kv * d.block_size * D;
	uint16_t *o = a.att + h0 * D; /* this KV head's G query heads */
	if (t.pos < 0) {              /* a padding row: zero output */
		if (t.z == 0)
			for (int i = threadIdx.x; i < G * D; i += MG_CTHREADS)
				o[i] = 0;
		return;
	}
	if (t.z >= t.nsu)
		return;
	int base0 = mg_att_base<D, G>(t);
#pragma unroll
	for (int u = 0; u < S::U; u++)
		if (off[u] != MG_NO_OFF && base0 + u * S::PPS == t.pos) { /* written this phase */
			ka[u] = __ldcg((const uint4 *)kv + off[u]);
			va[u] = __ldcg((const uint4 *)(kv + vstride) + off[u]);
		}
	float qr[G][8];
	dattn_load_q<D, G, true>(a.q + h0 * D, sub, pl.qscale, qr);
	float mm[G], ll[G], acc[G][8];
	dattn_state_init<G>(mm, ll, acc);
	dattn_step<D, G>(ka, va, base0, t.hi, qr, mm, ll, acc);
	struct dattn_src src =
	    dattn_src_of<D>(d, kv + (size_t)t.kh * d.block_size * D + sub * 8, t.hi, t.bt);
	for (int b = base0 + PB; b - slot < t.hi; b += PB) { /* further iterations */
		dattn_load<S::U, S::PPS, true>(src, b, ka, va);
		dattn_step<D, G>(ka, va, b, t.hi, qr, mm, ll, acc);
	}
	if (sl >= 0)
		mg_stamp(a, sl, 12);
	dattn_lane_merge<D, G>(mm, ll, acc, sh_m, sh_l, sh_acc);
	mg_csync();
	mg_gate_open(a, sl, false, att_bar); /* every warp's dot products done */
	for (int i = threadIdx.x; i < G * D; i += MG_CTHREADS)
		dattn_store_merged<D, G, MG_CWARPS>(sh_m, sh_l, sh_acc, i, t.nsu, t.z, pl.nz, a.part,
		                                    h0, o);
	if (sl >= 0 && t.nsu <= 1) {
		mg_stamp(a, sl, 13);
		mg_gate_open(a, sl, true, att_bar);
	}
	if (t.nsu > 1) {
		/* the last split of (row, KV head) to finish merges them all */
		__threadfence();
		mg_csync();
		if (threadIdx.x == 0) {
			unsigned *cnt = a.cnt + (size_t)t.m * d.n_kv + t.kh;
			bool last = atomicAdd(cnt, 1u) == (unsigned)t.nsu - 1;
			if (last) /* no other block touches it again in this phase */
				*cnt = 0;
			red[0] = last ? 1.0f : 0.0f;
		}
		mg_csync();
		if (sl >= 0)
			mg_stamp(a, sl, 13);
		mg_gate_open(a, sl, true, att_bar);
		if (red[0] != 0.0f) {
			__threadfence();
			mg_merge_splits<D, G>(a.part + h0 * pl.nz * prow, pl.nz, t.nsu, o);
		}
	}
}

/* The attention items of layer cache kv, strided over the grid: the block's first item is mine
 * (ka, va loaded before the barrier), any further one is worked out here. */
template <int M, int D, int G>
__device__ void mg_attention(const struct ds_k_mega &a, const struct mg_plan &pl,
                             const struct mg_att &mine, const unsigned (&off)[dattn_shape<D, G>::U],
                             const uint16_t *kv, uint4 (&ka)[dattn_shape<D, G>::U],
                             uint4 (&va)[dattn_shape<D, G>::U], float *sh, float *red, int l,
                             unsigned att_bar)
{
	mg_stamp(a, l, 12); /* in case the block has no dot products or partials */
	mg_stamp(a, l, 13);
	/* the producer's gate (a.att_gate) opens once this block's own dot products are done */
	bool dots = mine.m >= 0 && mine.pos >= 0 && mine.z < mine.nsu;
	if (a.att_gate >= 0 && !dots && threadIdx.x == 0)
		mbar_arrive(att_bar);
	if (mine.m < 0)
		return;
	mg_att_run<D, G>(a, pl, mine, off, kv, ka, va, sh, red, l, att_bar);
	mg_csync();
	size_t vstride = (size_t)a.d.n_kv * a.d.block_size * a.d.head_dim;
	for (int item = blockIdx.x + gridDim.x; item < M * a.d.n_kv * pl.nz; item += gridDim.x) {
		struct mg_att t = mg_att_of<M, D, G>(a, pl, item);
		unsigned o[dattn_shape<D, G>::U];
		mg_att_offs<D, G>(a, t, o);
		mg_att_load_old<D, G>(t, o, kv, vstride, ka, va);
		mg_att_run<D, G>(a, pl, t, o, kv, ka, va, sh, red, -1, 0);
		mg_csync();
	}
}

/* Stamp k, the grid barrier, stamp k + 1: the end of a phase. */
__device__ __forceinline__ void mg_phase_sync(const struct ds_k_mega &a, int l, int k)
{
	mg_stamp(a, l, k);
	mg_grid_sync(a.bar);
	mg_stamp(a, l, k + 1);
}

template <int M, int D, int G>
__global__ void __launch_bounds__(MG_THREADS, 1)
    mega_kernel(const __grid_constant__ struct ds_k_mega a, const struct mg_plan pl)
{
	constexpr bool TC = M >= MG_TC_M;
	extern __shared__ __align__(1024) unsigned char smem[];
	unsigned ring = (unsigned)__cvta_generic_to_shared(smem);
	unsigned full = ring + pl.bar_off, empty = full + 8 * pl.nslot;
	unsigned att_bar = empty + 8 * pl.nslot; /* a.att_gate: attention's dot products done */
	uint16_t *A = (uint16_t *)(smem + pl.a_off);
	float *ps = (float *)(smem + pl.ps_off), *red = (float *)(smem + pl.red_off);
	float *scr = (float *)(smem + pl.scr_off);
	/* the block's first attention item, then per batch row the K/V write offset and position */
	struct mg_att *mine = (struct mg_att *)(smem + pl.row_off);
	long long *kvo = (long long *)(smem + pl.row_off + MG_ATT_BYTES);
	int *rpos = (int *)(kvo + M);
	if (threadIdx.x == 0) {
		for (int s = 0; s < pl.nslot; s++) {
			mbar_init(full + 8 * s, 1);
			mbar_init(empty + 8 * s, TC ? MG_CWARPS : 1); /* tensor cores: every warp */
		}
		mbar_init(att_bar, 1);
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	__syncthreads();
	if (threadIdx.x >= MG_CTHREADS) { /* the producer warp */
		mg_produce<M>(a, pl, ring, full, empty, att_bar);
		return;
	}
	unsigned it = 0;
	int qd = a.d.n_head * a.d.head_dim;
	size_t vstride = (size_t)a.d.n_kv * a.d.block_size * D;
	if (threadIdx.x == 0)
		*mine = mg_att_of<M, D, G>(a, pl, blockIdx.x);
	mg_rows_init<M>(a, kvo, rpos); /* syncs the consumer warps */
	unsigned off[dattn_shape<D, G>::U];
	mg_att_offs<D, G>(a, *mine, off);
	uint4 ka[dattn_shape<D, G>::U], va[dattn_shape<D, G>::U];
	for (int l = 0; l < a.n_layer; l++) {
		struct ds_k_mega_layer L = a.layers[l];
		uint16_t *kv = a.kv + (size_t)l * a.kv_layer_elems;
		mg_stamp(a, l, 0);

		struct mg_phase p = mg_phase_of(a, L, MG_QKV, TC);
		mg_norm_in<M>(a, L.attn_norm, A, red);
		mg_stamp(a, l, 1);
		mg_gemv_any<M, false>(p, pl, A, a.hidden, A, ps, scr, smem, full, empty, it);
		mg_qkv_out<M>(a, p, ps, red, kvo, rpos, kv);
		mg_att_load_old<D, G>(*mine, off, kv, vstride, ka, va); /* across the barrier */
		mg_phase_sync(a, l, 2);

		/* attention's merge area: A, idle until the o phase copies its input in */
		mg_attention<M, D, G>(a, pl, *mine, off, kv, ka, va, (float *)A, red, l, att_bar);
		mg_phase_sync(a, l, 4);

		p = mg_phase_of(a, L, MG_O, TC);
		mg_copy_in<M>(a.att, qd, A);
		mg_gemv_any<M, false>(p, pl, A, qd, A, ps, scr, smem, full, empty, it);
		mg_residual_out<M>(a, p, ps);
		mg_phase_sync(a, l, 6);

		p = mg_phase_of(a, L, MG_GU, TC);
		mg_norm_in<M>(a, L.ffn_norm, A, red);
		mg_gemv_any<M, false>(p, pl, A, a.hidden, A, ps, scr, smem, full, empty, it);
		mg_silu_out<M>(a, p, ps, red);
		mg_phase_sync(a, l, 8);

		/* tensor-core mode stages the down projection's input segment by segment in A: M
		 * rows of ffn would not fit in shared memory */
		p = mg_phase_of(a, L, MG_DOWN, TC);
		if (TC) {
			mg_gemv_any<M, true>(p, pl, a.act, a.ffn, A, ps, scr, smem, full, empty,
			                     it);
		} else {
			mg_copy_in<M>(a.act, a.ffn, A);
			mg_gemv_any<M, false>(p, pl, A, a.ffn, A, ps, scr, smem, full, empty, it);
		}
		mg_residual_out<M>(a, p, ps);
		mg_stamp(a, l, 10);
		mg_grid_sync(a.bar);
		mg_stamp(a, l, 11);
	}

	/* the final RMSNorm and the LM head, in chunks of head_rows rows (the partial-dot area) */
	struct mg_phase p = mg_phase_of(a, a.layers[0], MG_HEAD, TC);
	mg_norm_in<M>(a, a.out_norm, A, red);
	int u1 = p.u1;
	for (int u = p.u0; u < u1; u += pl.head_rows) {
		p.u0 = u;
		p.u1 = min(u + pl.head_rows, u1);
		mg_gemv_any<M, false>(p, pl, A, a.hidden, A, ps, scr, smem, full, empty, it);
		mg_head_out<M>(a, p, ps, red);
		mg_csync();
	}
}

/* ---- host ---- */

extern "C" int ds_k_mega_supported(struct ds_k_dims d, int hidden, int ffn)
{
	int G = d.n_kv > 0 ? d.n_head / d.n_kv : 0;
	int qd = d.n_head * d.head_dim;
	bool dims = (d.head_dim == 64 || d.head_dim == 128) && d.n_kv * G == d.n_head &&
	            (G == 1 || G == 2 || G == 4 || G == 8);
	return dims && hidden % 256 == 0 && ffn % 256 == 0 && qd % 256 == 0 &&
	       (d.n_head + 2 * d.n_kv) * d.head_dim % 2 == 0;
}

typedef void (*mg_fn)(struct ds_k_mega, struct mg_plan);

static mg_fn mg_pick(int T, int D, int G)
{
#define MG_CASE(m, dd, g)                                                                          \
	if (T == m && D == dd && G == g)                                                           \
		return mega_kernel<m, dd, g>;
#define MG_M(m)                                                                                    \
	MG_CASE(m, 64, 1)                                                                          \
	MG_CASE(m, 64, 2)                                                                          \
	MG_CASE(m, 64, 4)                                                                          \
	MG_CASE(m, 64, 8)                                                                          \
	MG_CASE(m, 128, 1)                                                                         \
	MG_CASE(m, 128, 2)                                                                         \
	MG_CASE(m, 128, 4)                                                                         \
	MG_CASE(m, 128, 8)
	MG_M(1)
	MG_M(2)
	MG_M(4)
	MG_M(8)
#undef MG_M
#undef MG_CASE
	return NULL;
}

/* Rows of the largest share of a phase times its partial dots per row (one in tensor-core mode). */
static int mg_max_items(int kind, const struct ds_k_mega *a, int nb, bool tc)
{
	int n = mg_units(kind, *a), K = mg_k(kind, *a);
	return (n + nb - 1) / nb * mg_rpu(kind) * (tc ? 1 : K / mg_seg(K));
}

static size_t mg_align(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* The launch plan of ds_k_mega_decode (a valid, T > 0): the kernel, the shared-memory carve-up
 * and its bytes, the attention split. */
static cudaError_t mg_plan_of(const struct ds_k_mega *a, int T, int n_blocks, mg_fn *fnp,
                              struct mg_plan *plp, size_t *smem)
{
	struct ds_k_dims d = a->d;
	if (!ds_k_mega_supported(d, a->hidden, a->ffn) || n_blocks < 1 || !a->layers || !a->bar ||
	    a->kv_layer_elems / 8 >= MG_NO_OFF || /* mg_att_offs's 16-byte units */
	    !a->cnt || T > DS_K_MEGA_MAX_T || !a->out_norm || !a->lm_head || !a->logits ||
	    a->vocab < 1)
		return cudaErrorInvalidValue;
	int D = d.head_dim, G = d.n_head / d.n_kv, qd = d.n_head * D;
	mg_fn fn = mg_pick(T, D, G);
	if (!fn)
		return cudaErrorInvalidValue;
	struct mg_plan pl;
	memset(&pl, 0, sizeof(pl));
	/* attention: about one item per block, within the partial buffer */
	int nz = a->attn_splits > 0 ? a->attn_splits : n_blocks / (T * d.n_kv);
	nz = nz < 1 ? 1 : nz > DS_K_ATTN_DECODE_MAX_SPLIT ? DS_K_ATTN_DECODE_MAX_SPLIT : nz;
	while (nz > 1 && (size_t)T * d.n_head * (D + 2) * nz > a->part_floats)
		nz--;
	if ((size_t)T * d.n_head * (D + 2) * nz > a->part_floats)
		return cudaErrorInvalidValue;
	pl.nz = nz;
	pl.qscale = DA_LOG2E / sqrtf((float)D);
	pl.diag = a->diag;
	/* shared memory: ring | A (or the attention merge area) | partial dots | reduction | the
	 * attention item and row offsets | mbarriers */
	/* tensor-core mode stages the down projection's input segment by segment (mg_stage) */
	bool tc = T >= MG_TC_M;
	unsigned slot_bytes = tc ? MG_TSLOT : MG_SLOT;
	size_t scr_bytes = tc ? (size_t)2 * MG_CWARPS * MG_TROWS * T * 4 : 0;
	int kmax = a->hidden > qd ? a->hidden : qd;
	kmax = tc || kmax > a->ffn ? kmax : a->ffn;
	size_t a_bytes = (size_t)T * (tc ? mg_astride<MG_TC_M>(kmax) : kmax) * 2;
	size_t stage_bytes = (size_t)2 * T * (mg_seg(a->ffn) + 32) * 2; /* mg_stage's two buffers */
	a_bytes = tc && stage_bytes > a_bytes ? stage_bytes : a_bytes;
	size_t ps_floats = tc ? (size_t)MG_TROWS * T : 0; /* a head chunk: at least a tile */
	for (int k = 0; k < MG_NPHASE; k++) {
		size_t n = (size_t)mg_max_items(k, a, n_blocks, tc) * T;
		ps_floats = n > ps_floats ? n : ps_floats;
	}
	/* attention merges its warps' states in A's area */
	size_t attn_floats = (size_t)2 * MG_CWARPS * G + (size_t)MG_CWARPS * G * D;
	a_bytes = a_bytes > attn_floats * 4 ? a_bytes : attn_floats * 4;
	if (tc) /* whole tiles */
		pl.head_rows = (int)(ps_floats / T / MG_TROWS * MG_TROWS);
	else
		pl.head_rows = (int)(ps_floats / ((size_t)T * (a->hidden / mg_seg(a->hidden))));
	size_t red_bytes = (size_t)T * MG_CWARPS * 4; /* the RMSNorm partial sums */
	size_t row_bytes = MG_ATT_BYTES + (size_t)T * (8 + 4);
	size_t rest = mg_align(a_bytes, 16) + mg_align(ps_floats * 4, 16) + scr_bytes +
	              mg_align(red_bytes, 8) + mg_align(row_bytes, 8) + 8 /* att_bar */;
	int dev = 0, optin = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
	if (e != cudaSuccess)
		return e;
	long room = (long)optin - (long)rest - 1024; /* slack: the static 1024 alignment */
	int nslot = (int)(room / (slot_bytes + 16));
	nslot = nslot > MG_MAX_SLOTS ? MG_MAX_SLOTS : nslot;
	nslot = a->max_slots > 0 && a->max_slots < nslot ? a->max_slots : nslot;
	/* a multiple of the consumer warps: slot item gi - nslot (the slot's previous round) is
	 * then the same warp's earlier item, so a warp never waits on a slot's full barrier while
	 * the round before is still in flight, when the parity would pass a phase early (the
	 * producer would then refill the slot under a copy: a corrupt tx count, a trap). Across
	 * phases the consumers' sync at each phase's end does the same. (Tensor-core mode: every
	 * warp takes every slot; two tiles' groups of slots at least.) */
	nslot = nslot / MG_CWARPS * MG_CWARPS;
	if (nslot < (tc ? 2 * MG_TROWS : MG_MIN_SLOTS))
		return cudaErrorInvalidValue;
	pl.nslot = nslot;
	size_t off = (size_t)nslot * slot_bytes;
	pl.a_off = (unsigned)off;
	off += mg_align(a_bytes, 16);
	pl.ps_off = (unsigned)off;
	off += mg_align(ps_floats * 4, 16);
	pl.scr_off = (unsigned)off;
	off += scr_bytes;
	pl.red_off = (unsigned)off;
	off = mg_align(off + red_bytes, 8);
	pl.row_off = (unsigned)off;
	off = mg_align(off + row_bytes, 8);
	pl.bar_off = (unsigned)off;
	off += (size_t)16 * nslot + 8;
	*fnp = fn;
	*plp = pl;
	*smem = off;
	return cudaSuccess;
}

extern "C" cudaError_t ds_k_mega_decode(const struct ds_k_mega *a, int T, int n_blocks,
                                        cudaStream_t st)
{
	if (!a || T <= 0)
		return T == 0 ? cudaSuccess : cudaErrorInvalidValue;
	mg_fn fn;
	struct mg_plan pl;
	size_t smem;
	cudaError_t e = mg_plan_of(a, T, n_blocks, &fn, &pl, &smem);
	if (e == cudaSuccess)
		e = ds_allow_smem(fn, smem);
	if (e != cudaSuccess)
		return e;
	return ds_launch_attrs(fn, dim3((unsigned)n_blocks), dim3(MG_THREADS), smem, st, 0, 1, 1,
	                       *a, pl);
}

extern "C" cudaError_t ds_k_mega_ring_slots(const struct ds_k_mega *a, int T, int n_blocks,
                                            int *nslot)
{
	if (!a || T <= 0 || !nslot)
		return cudaErrorInvalidValue;
	mg_fn fn;
	struct mg_plan pl;
	size_t smem;
	cudaError_t e = mg_plan_of(a, T, n_blocks, &fn, &pl, &smem);
	*nslot = e == cudaSuccess ? pl.nslot : 0;
	return e;
}
