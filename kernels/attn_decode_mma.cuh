/* attn_decode_mma.cuh - the "mma" variant of the fast path's flash-decoding kernel (included by
 * attn_decode.cu, whose split, metadata and merges it shares).
 *
 * The CUDA-core variants spend about ten instructions per K/V element (unpack, FMA, shuffle
 * reductions), so at batch 8-32 they are bound by issue, not by HBM: 33 us per layer at batch 32,
 * context 512 on the H200, where the KV bytes need 16 (bench/results/gpu-20261129-106949b-ablate).
 * Here the block's G query heads are rows 0..G-1 of an m16n8k16 A operand (the other rows are
 * zero: the tensor cores have throughput to spare) and each warp takes 16 positions of a 64-
 * position stage: S = Q K^T is 2 n8 tiles over head_dim / 16 k steps, the online softmax runs
 * on the 4 lanes of a quad that hold a row, and P (as two bf16 parts, hi + lo, so its
 * rounding stays near fp32's; the C layout of the two tiles is the A layout of one k16 step)
 * times V (ldmatrix.trans) accumulates head_dim / 8 n8 tiles. K/V stages are staged with
 * cp.async three deep in rows padded by 16 bytes (so ldmatrix is free of bank conflicts); with
 * WP (the default) each warp copies the rows of its own 16 positions, so its pipeline needs
 * warp barriers only and the warps run their stages apart; without it (DS_FAST_ATTN=mma_block)
 * the block copies each stage together and meets at a block barrier a stage. The warps' states are
 * merged in shared memory exactly as the other variants' (dattn_block_merge).
 *
 * Key decision: the first stages are requested before the programmatic-dependent-launch wait.
 * In a decode pass every K/V position but the row's own was written by an earlier pass, so
 * those copies may overlap the kernel before (the q/k/v epilogue, which writes the own
 * position); the own position is left out of them and copied after the wait. Without PDL the
 * fused epilogue's inputs are copied first instead (ds_k_qkv_epi.early): at batch 8, ctx 512 on
 * the H200 the epilogue then took 0.8 us of a block's time where loading its inputs after the
 * K/V copies took 2.6 (bench/results/gpu-20261201-ad3e51e-early, bench_gpu attntrace). */

/* A shared-memory pointer as the shared state space's address (bulk copies, mbarriers). The
 * CPU emulation (tests/gpu/test_dattn_emu.cc) runs no bulk form: it gets inert stand-ins. */
#ifdef DS_DATTN_EMU
static inline unsigned dattn_smem_addr(const void *)
{
	return 0;
}
static inline void mbar_wait(unsigned, unsigned)
{
}
static inline void mbar_arrive(unsigned)
{
}
static inline void mbar_expect_tx(unsigned, unsigned)
{
}
#else
#include "mbar.cuh"

__device__ __forceinline__ unsigned dattn_smem_addr(const void *p)
{
	return (unsigned)__cvta_generic_to_shared(p);
}
#endif

template <int D, int G> struct dattn_mma {
	static constexpr int P = DA_WARPS * 16;  /* positions per stage: 16 per warp */
	static constexpr int RS = D + 8;         /* bf16 per staged row */
	static constexpr int STAGE = 2 * P * RS; /* elements: K rows, then V rows */
	static constexpr int STAGES = 3;
	static constexpr size_t SMEM = (size_t)STAGES * STAGE * 2;
	/* the fused q/k/v epilogue's heads (G queries, the key, the value) in fp32 after them,
	 * then the position's RoPE row (D floats: cos, sin pairs) */
	static constexpr size_t SMEM_EPI = SMEM + (size_t)(G + 3) * D * sizeof(float);
	static constexpr int KS = D / 16, ND = D / 8, CPP = D / 8;
	/* the block's block-table entries, copied to shared memory after SMEM (or SMEM_EPI) when
	 * its positions span at most BT_CAP cache blocks */
	static constexpr int BT_CAP = 256;
	static constexpr size_t BT_BYTES = BT_CAP * sizeof(int);
	/* the bulk form's mbarriers (one per warp and stage buffer), after the table */
	static constexpr size_t BAR_BYTES = (size_t)DA_WARPS * STAGES * 8;
	static_assert(G >= 1 && G <= 8, "the query heads are mma rows 0..7");
	static_assert(SMEM >= sizeof(float) * DA_WARPS * G * (D + 2), "merge area");
};

/* Copies K and V of stage st (positions lo + st * P ..) into its buffer, zero-filled at or past
 * s.hi; position skip (if below s.hi) is left out entirely: dattn_mma_own copies it later.
 * A thread's rows are looked up in the block table first, all of them, then copied: the
 * lookups are independent loads in flight together, where a lookup per copy would make the
 * stage's copies wait on a chain of table loads. The kernel copies the block's table entries
 * to shared memory first (s.sbt), so a stage issued inside its loop does not wait on an L2
 * load before its copies go out: on the H200, one machine, old and new binaries alternating,
 * the kernel alone was 3-9% faster at ctx 2048 and 8192 and the same at ctx 512, and the
 * decode step 2.2-2.4% faster at batch 32-128, ctx 2048
 * (bench/results/gpu-20261130-7e92914-ab). */
template <int D, int G, bool WP>
__device__ __forceinline__ void dattn_mma_issue(const struct dattn_src &s, uint16_t *sbuf, int lo,
                                                int st, int skip)
{
	typedef dattn_mma<D, G> Q;
	/* rows per copy instruction: a warp's (WP: each warp copies its own 16 rows) or the
	 * block's */
	constexpr int LR = (WP ? 32 : DA_THREADS) / Q::CPP;
	constexpr int N = (WP ? 16 : Q::P) / LR; /* 16-byte pieces per thread */
	static_assert(32 % Q::CPP == 0 && 16 % LR == 0 && Q::P % LR == 0,
	              "a thread's pieces are one column of evenly spaced rows");
	uint16_t *kb = sbuf + (st % Q::STAGES) * Q::STAGE, *vb = kb + Q::P * Q::RS;
	const int c = threadIdx.x % Q::CPP;
	const int j0 =
	    WP ? (threadIdx.x >> 5) * 16 + (threadIdx.x & 31) / Q::CPP : threadIdx.x / Q::CPP;
	const int base = lo + st * Q::P + j0;
	const uint16_t *row[N];
#pragma unroll
	for (int r = 0; r < N; r++) {
		int pos = base + r * LR;
		row[r] = pos < s.hi ? dattn_row(s, pos) + c * 8 : s.kv; /* nothing read if not */
	}
#pragma unroll
	for (int r = 0; r < N; r++) {
		int j = j0 + r * LR, pos = base + r * LR;
		bool ok = pos < s.hi;
		if (ok && pos == skip)
			continue;
		dattn_cp16(kb + j * Q::RS + c * 8, row[r], ok);
		dattn_cp16(vb + j * Q::RS + c * 8, ok ? row[r] + s.vstride : row[r], ok);
	}
}

/* The bulk form of dattn_mma_issue (WP only): lane l of each warp brings in one row of its
 * 16 positions, K for lanes 0-15 and V for 16-31, as one bulk async copy of D * 2 bytes that
 * completes on the warp's mbarrier of the stage's buffer (bars: the block's barriers, warp-
 * major). Every lane arrives there once a stage, with the bytes it expects or without; rows at
 * or past s.hi are zeroed with plain stores instead (V must be finite where P is 0), and the
 * row of position skip is left for dattn_mma_own(_epi). The copies are the TMA unit's, so a
 * lane's 256-byte row is one instruction where cp.async needs 16. On the H200 the copy-only
 * form took 7-8% less time than cp.async's, and the decode step was 1-2 points of the roofline
 * faster at batch 32, ctx 2048 but up to 2 slower at batch 8, ctx 2048: an option
 * (DS_FAST_ATTN=mma_bulk), not the default (bench/results/HISTORY-gpu.md, twenty-fifth
 * session). */
template <int D, int G>
__device__ __forceinline__ void dattn_mma_issue_bulk(const struct dattn_src &s, uint16_t *sbuf,
                                                     unsigned bars, int lo, int st, int skip)
{
	typedef dattn_mma<D, G> Q;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = warp * 16 + (lane & 15);
	int pos = lo + st * Q::P + j;
	uint16_t *dst =
	    sbuf + (st % Q::STAGES) * Q::STAGE + (lane >= 16 ? Q::P * Q::RS : 0) + j * Q::RS;
	unsigned bar = bars + 8u * (unsigned)(warp * Q::STAGES + st % Q::STAGES);
	if (pos < s.hi && pos != skip) {
		const uint16_t *src = dattn_row(s, pos) + (lane >= 16 ? s.vstride : 0);
		/* this lane's earlier plain stores into the ring (zeros, the own row) before the
		 * async proxy writes it */
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		mbar_expect_tx(bar, D * 2);
		asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
		             " [%0], [%1], %2, [%3];\n" ::"r"(dattn_smem_addr(dst)),
		             "l"(src), "r"(D * 2), "r"(bar)
		             : "memory");
		return;
	}
	if (pos >= s.hi)
		for (int c = 0; c < D / 8; c++)
			*(uint4 *)(dst + c * 8) = make_uint4(0u, 0u, 0u, 0u);
	mbar_arrive(bar);
}

/* The slot of the row's own position pos in the stage buffers: kb and vb point at its K and V
 * rows, and this thread writes elements first, first + step, ... of them: with WP only the warp
 * whose 16 positions hold it (from its lane, in steps of 32), else the block. False for a thread
 * that writes none. */
template <int D, int G, bool WP>
__device__ __forceinline__ bool dattn_mma_own_slot(uint16_t *sbuf, int lo, int pos, uint16_t **kb,
                                                   uint16_t **vb, int *first, int *step)
{
	typedef dattn_mma<D, G> Q;
	int st = (pos - lo) / Q::P, j = (pos - lo) % Q::P;
	*kb = sbuf + (st % Q::STAGES) * Q::STAGE + j * Q::RS;
	*vb = *kb + Q::P * Q::RS;
	*first = WP ? threadIdx.x & 31 : threadIdx.x;
	*step = WP ? 32 : DA_THREADS;
	return !WP || (int)(threadIdx.x >> 5) == j / 16;
}

/* The row's own position pos (in stage (pos - lo) / P, already issued without it), copied
 * with plain loads once the kernel that wrote it has completed. */
template <int D, int G, bool WP>
__device__ __forceinline__ void dattn_mma_own(const struct dattn_src &s, uint16_t *sbuf, int lo,
                                              int pos)
{
	uint16_t *kb, *vb;
	int first, step;
	if (!dattn_mma_own_slot<D, G, WP>(sbuf, lo, pos, &kb, &vb, &first, &step))
		return;
	for (int c = first; c < dattn_mma<D, G>::CPP; c += step) {
		const uint16_t *r = dattn_row(s, pos) + c * 8;
		*(uint4 *)(kb + c * 8) = *(const uint4 *)r;
		*(uint4 *)(vb + c * 8) = *(const uint4 *)(r + s.vstride);
	}
}

/* The row's own K and V (the fused epilogue's, bf16 values held as fp32 in ep) into the slot of
 * position pos in its stage's buffer. */
template <int D, int G, bool WP>
__device__ __forceinline__ void dattn_mma_own_epi(const float *ep, uint16_t *sbuf, int lo, int pos)
{
	uint16_t *kb, *vb;
	int first, step;
	if (!dattn_mma_own_slot<D, G, WP>(sbuf, lo, pos, &kb, &vb, &first, &step))
		return;
	for (int i = first; i < D; i += step) {
		kb[i] = ds_f32_to_bf16(ep[G * D + i]);
		vb[i] = ds_f32_to_bf16(ep[(G + 1) * D + i]);
	}
}

/* The early form's copies (ds_k_qkv_epi.early: no PDL, so the GEMM that wrote them is done
 * before the block starts): the G + 2 heads of row t, KV head kh, from the fp32 GEMM output
 * into ep as cp.async 16-byte pieces, issued first thing so their round trip overlaps the
 * metadata, block-table and K/V work instead of following it. */
template <int D, int G>
__device__ __forceinline__ void dattn_epi_copy_heads(const struct ds_k_qkv_epi &e,
                                                     struct ds_k_dims d, int t, int kh, float *ep)
{
	constexpr int PPH = D / 4; /* 16-byte pieces per head */
	int n_all = d.n_head + 2 * d.n_kv;
	for (int i = threadIdx.x; i < (G + 2) * PPH; i += DA_THREADS) {
		int hh = i / PPH, c = i % PPH;
		int h = hh < G ? kh * G + hh : hh == G ? d.n_head + kh : d.n_head + d.n_kv + kh;
		dattn_cp16(ep + hh * D + c * 4, e.qkv + ((size_t)t * n_all + h) * D + c * 4, true);
	}
}

/* The q/k/v epilogue of qkv_rope_kernel (rows.cu) for one row's KV head kh: its G query heads,
 * key and value from the fp32 GEMM output (or, loaded, already copied into ep), bias added,
 * q/k norms, RoPE on q and k with crow (the position's row of the cos/sin table), each value
 * rounded to bf16 (kept as fp32 in ep: (G + 2, D)). The same per-head arithmetic in the same
 * order as that kernel (one warp per head, lane-strided), so the fused and unfused fast paths
 * store the same K/V bits and attend to the same q. */
template <int D, int G>
__device__ __forceinline__ void dattn_qkv_epi(const struct ds_k_qkv_epi &e, struct ds_k_dims d,
                                              int t, int kh, const float *crow, bool loaded,
                                              float *ep)
{
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, half = D / 2;
	int n_all = d.n_head + 2 * d.n_kv;
	for (int hh = warp; hh < G + 2; hh += DA_WARPS) {
		int h = hh < G ? kh * G + hh : hh == G ? d.n_head + kh : d.n_head + d.n_kv + kh;
		const float *src = e.qkv + ((size_t)t * n_all + h) * D;
		float *buf = ep + hh * D;
		for (int i = lane; i < D; i += 32) {
			float v = loaded ? buf[i] : src[i];
			if (e.bias)
				v = __fadd_rn(v, ds_bf16_to_f32(e.bias[h * D + i]));
			buf[i] = v;
		}
		__syncwarp();
		const uint16_t *nw = hh < G ? e.q_norm : hh == G ? e.k_norm : NULL;
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
		if (hh == G + 1) {
			for (int i = lane; i < D; i += 32)
				buf[i] = ds_bf16_to_f32(ds_f32_to_bf16(buf[i]));
		} else {
			const float *c = crow;
			for (int i = lane; i < half; i += 32) { /* this lane's pair, in place */
				float x1 = buf[i], x2 = buf[i + half];
				float co = c[2 * i], si = c[2 * i + 1];
				buf[i] = ds_bf16_to_f32(
				    ds_f32_to_bf16(__fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si))));
				buf[i + half] = ds_bf16_to_f32(
				    ds_f32_to_bf16(__fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si))));
			}
		}
		__syncwarp();
	}
}

/* Stamp k of this block (ds_k_qkv_epi.trace, bench diagnostics) when tracing. */
__device__ __forceinline__ void dattn_stamp(const struct ds_k_qkv_epi &e, int k)
{
#ifndef DS_DATTN_EMU
	if (e.trace && threadIdx.x == 0) {
		unsigned long long t;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
		size_t b =
		    blockIdx.x + (size_t)gridDim.x * (blockIdx.y + (size_t)gridDim.y * blockIdx.z);
		e.trace[b * DS_K_DATTN_STAMPS + k] = t;
	}
#else
	(void)e;
	(void)k;
#endif
}

/* EPI: q, the own K and V come from the fused epilogue (e) instead of q and the cache; the
 * block holding the row's own position writes that K and V to the cache. NOMATH (a diagnostic
 * for bench_gpu attn only: its output is meaningless): the same copies, stages and barriers
 * without the arithmetic, to tell the copy pipeline's limit from the math's. */
template <int D, int G, bool EPI, bool NOMATH = false, bool WP = true, bool BULK = false>
__global__ void __launch_bounds__(DA_THREADS, 2)
    dattn_mma_kernel(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm,
                     struct ds_k_dims d, float qscale, float *part, uint16_t *out, unsigned *cnt,
                     struct ds_k_qkv_epi e)
{
	typedef dattn_mma<D, G> Q;
	static_assert(!BULK || WP, "bulk copies fill warp-private stages");
	/* stages requested before the loop: all of the ring with bulk copies (the loop refills a
	 * buffer once its warp is done with it), else all but one (cp.async refills the buffer
	 * computed in the previous iteration before computing the current one) */
	constexpr int PRE = BULK ? Q::STAGES : Q::STAGES - 1;
	DATTN_DYN_SMEM(sh_kv);
	dattn_stamp(e, 0);
	int t = blockIdx.x, kh = blockIdx.y, z = blockIdx.z, nz = gridDim.z;
	float *ep = (float *)(sh_kv + (size_t)Q::STAGES * Q::STAGE), *crow = ep + (G + 2) * D;
	const bool early = EPI && e.early;
	if (early)
		dattn_epi_copy_heads<D, G>(e, d, t, kh, ep);
	unsigned bars = 0;
#ifndef DS_DATTN_EMU
	if constexpr (BULK) {
		bars = dattn_smem_addr((char *)sh_kv + (EPI ? Q::SMEM_EPI : Q::SMEM) + Q::BT_BYTES);
		if (threadIdx.x == 0) {
			/* every lane of the warp arrives once a phase */
			for (int i = 0; i < DA_WARPS * Q::STAGES; i++)
				mbar_init(bars + 8u * i, 32);
			asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		}
	}
#endif
	/* metadata: uploaded before the pass's first kernel and written by none (see the pipe
	 * variant), so it is read before the wait */
	int p = tm.pos[t], sq = tm.seq[t];
	int nsu = 0, lo = 0, nst = 0;
	struct dattn_src src = dattn_src_of<D>(d, kv + (size_t)kh * d.block_size * D, 0, tm.bt);
	if (early) { /* the RoPE row, then the epilogue's copies as one group, the oldest */
		for (int i = threadIdx.x; p >= 0 && i < D / 4; i += DA_THREADS)
			dattn_cp16(crow + i * 4, e.cs + (size_t)p * D + i * 4, true);
		dattn_cp_commit();
	}
	if (p >= 0) {
		int chunk;
		dattn_split(p + 1, nz, Q::P, &chunk, &nsu);
		lo = z * chunk;
		src.hi = min(lo + chunk, p + 1);
		src.bt = tm.bt + tm.bt_off[sq];
		nst = z < nsu ? (src.hi - lo + Q::P - 1) / Q::P : 0;
		/* the block's table entries into shared memory, one round trip for all: each
		 * stage issued inside the loop below would otherwise wait on an L2 load of its
		 * rows' entries before its copies go out, stalling that iteration's math */
		int b0 = dattn_blk_index(src, lo);
		int nb = nst > 0 ? dattn_blk_index(src, src.hi - 1) - b0 + 1 : 0;
		if (nb > 0 && nb <= Q::BT_CAP) {
			int *sbt = (int *)((char *)sh_kv + (EPI ? Q::SMEM_EPI : Q::SMEM));
			for (int i = threadIdx.x; i < nb; i += DA_THREADS)
				sbt[i] = __ldg(src.bt + b0 + i);
			__syncthreads();
			src.sbt = sbt;
			src.bi0 = b0;
		}
	}
	if constexpr (BULK)
		__syncthreads(); /* the barriers' initialization */
	dattn_stamp(e, 1);
#pragma unroll
	for (int st = 0; st < PRE; st++) {
		if constexpr (BULK) {
			if (st < nst)
				dattn_mma_issue_bulk<D, G>(src, sh_kv, bars, lo, st, p);
		} else {
			if (st < nst)
				dattn_mma_issue<D, G, WP>(src, sh_kv, lo, st, p);
			dattn_cp_commit();
		}
	}
	dattn_stamp(e, 2);
	ds_grid_dep_wait(); /* no-op unless launched with PDL */
	dattn_stamp(e, 3);
	uint16_t *o = out + ((size_t)t * d.n_head + (size_t)kh * G) * D;
	if (p < 0 || z >= nsu) { /* no K/V was issued; the early copies land first */
		if (early)
			dattn_cp_wait<0>();
		if (p < 0 && z == 0)
			for (int i = threadIdx.x; i < G * D; i += DA_THREADS)
				o[i] = 0;
		return;
	}
	int hi = src.hi;
	bool own = p < hi, own_early = own && p < lo + PRE * Q::P;
	if constexpr (EPI) {
		if (early) { /* every thread's epilogue copies (the group before the stages') */
			if constexpr (BULK)
				dattn_cp_wait<0>();
			else
				dattn_cp_wait<PRE>();
			__syncthreads();
		}
		dattn_qkv_epi<D, G>(e, d, t, kh, early ? crow : e.cs + (size_t)p * D, early, ep);
		__syncthreads();
		if (own) { /* the one block per (row, KV head) holding the own position */
			const uint16_t *kr = dattn_row(src, p);
			uint16_t *kw = (uint16_t *)kr, *vw = kw + src.vstride;
			for (int i = threadIdx.x; i < D; i += DA_THREADS) {
				kw[i] = ds_f32_to_bf16(ep[G * D + i]);
				vw[i] = ds_f32_to_bf16(ep[(G + 1) * D + i]);
			}
		}
		if (own_early)
			dattn_mma_own_epi<D, G, WP>(ep, sh_kv, lo, p);
	} else if (own_early) {
		dattn_mma_own<D, G, WP>(src, sh_kv, lo, p);
	}
	dattn_stamp(e, 4);

	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
	/* Q as the A operand: row g = head kh * G + g (zero for g >= G), rows g + 8 zero */
	unsigned qf[Q::KS][4];
	const uint16_t *qrow = q + ((size_t)t * d.n_head + (size_t)kh * G + min(g, G - 1)) * D;
	const float *qe = ep + min(g, G - 1) * D;
#pragma unroll
	for (int ks = 0; ks < Q::KS; ks++) {
		int k0 = ks * 16 + 2 * tq;
		if constexpr (EPI) {
			qf[ks][0] = g < G ? mt_pack(qe[k0], qe[k0 + 1]) : 0u;
			qf[ks][2] = g < G ? mt_pack(qe[k0 + 8], qe[k0 + 9]) : 0u;
		} else {
			qf[ks][0] = g < G ? *(const unsigned *)(qrow + k0) : 0u;
			qf[ks][2] = g < G ? *(const unsigned *)(qrow + k0 + 8) : 0u;
		}
		qf[ks][1] = 0u;
		qf[ks][3] = 0u;
	}
	float acc[Q::ND][4], m = -INFINITY, l = 0.0f; /* row g; l: this lane's share */
#pragma unroll
	for (int j = 0; j < Q::ND; j++)
		acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

	for (int it = 0; it < nst; it++) {
		if constexpr (BULK)
			mbar_wait(bars + 8u * (unsigned)(warp * Q::STAGES + it % Q::STAGES),
			          (unsigned)(it / Q::STAGES) & 1u);
		else
			dattn_cp_wait<Q::STAGES -
			              2>(); /* stage it has landed (this thread's copies) */
		/* WP: the warp's lanes' copies (and zero rows), and the warp is done with stage
		 * it - 1 (its rows are its own: it copies, reads and refills them alone); else
		 * everyone's copies, everyone done with stage it - 1 */
		if constexpr (WP)
			__syncwarp();
		else
			__syncthreads();
		if (it == 0)
			dattn_stamp(e, 5);
		/* refill stage it - 1's buffer (BULK: with stage it - 1 + STAGES; else it - 1 +
		 * STAGES - 1 = it + STAGES - 2 + 1, the stage after the last one requested) */
		int st = it + Q::STAGES - 1;
		if (st >= PRE && st < nst) {
			if constexpr (BULK)
				dattn_mma_issue_bulk<D, G>(src, sh_kv, bars, lo, st, EPI ? p : -1);
			else
				dattn_mma_issue<D, G, WP>(src, sh_kv, lo, st, EPI ? p : -1);
			/* fused: the own position is not in the cache for this launch's copies */
			if (EPI && own && (p - lo) / Q::P == st)
				dattn_mma_own_epi<D, G, WP>(ep, sh_kv, lo, p);
		}
		if constexpr (!BULK)
			dattn_cp_commit();
		int base = lo + it * Q::P + warp * 16; /* this warp's first position */
		if (NOMATH || base >= hi)
			continue;
		const uint16_t *kb = sh_kv + (size_t)(it % Q::STAGES) * Q::STAGE;
		const uint16_t *vb = kb + Q::P * Q::RS;
		float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
		for (int ks = 0; ks < Q::KS; ks++) {
			unsigned b[4];
			int row = warp * 16 + ((lane >> 4) << 3) + (lane & 7);
			int ch = ks * 2 + ((lane >> 3) & 1);
			mt_ldsm_x4(b, kb + row * Q::RS + ch * 8);
			mt_mma(s[0], qf[ks], b[0], b[1]);
			mt_mma(s[1], qf[ks], b[2], b[3]);
		}
		/* scale, mask by selection (position base is held by lane 0: the max is finite) */
		float mx = -INFINITY;
#pragma unroll
		for (int j = 0; j < 2; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				int pos = base + j * 8 + 2 * tq + e;
				s[j][e] = pos < hi ? s[j][e] * qscale : -INFINITY;
				mx = fmaxf(mx, s[j][e]);
			}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		float mn = fmaxf(m, mx);
		float alpha = exp2f(m - mn); /* 0 while nothing was seen */
		m = mn;
		l *= alpha;
#pragma unroll
		for (int j = 0; j < Q::ND; j++) {
			acc[j][0] *= alpha;
			acc[j][1] *= alpha;
		}
		/* P in two bf16 parts, hi = bf16(p) and lo = bf16(p - hi): P V from hi alone
		 * carries bf16's 2^-9 relative error per weight, which at short contexts (two
		 * positions) reaches the output; hi + lo is within 2^-17 of p */
		float pr[4] = {exp2f(s[0][0] - mn), exp2f(s[0][1] - mn), exp2f(s[1][0] - mn),
		               exp2f(s[1][1] - mn)};
		unsigned ph[4], pl[4];
		ph[0] = mt_pack(pr[0], pr[1]);
		ph[2] = mt_pack(pr[2], pr[3]);
		pl[0] = mt_pack(pr[0] - __uint_as_float(ph[0] << 16),
		                pr[1] - __uint_as_float(ph[0] & 0xffff0000u));
		pl[2] = mt_pack(pr[2] - __uint_as_float(ph[2] << 16),
		                pr[3] - __uint_as_float(ph[2] & 0xffff0000u));
		ph[1] = ph[3] = pl[1] = pl[3] = 0u;
		l += (pr[0] + pr[1]) + (pr[2] + pr[3]);
#pragma unroll
		for (int dj = 0; dj < D / 16; dj++) {
			unsigned bv[4];
			int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
			int col = dj * 16 + (lane >> 4) * 8;
			mt_ldsm_x4_trans(bv, vb + row * Q::RS + col);
			mt_mma(acc[2 * dj], ph, bv[0], bv[1]);
			mt_mma(acc[2 * dj + 1], ph, bv[2], bv[3]);
			mt_mma(acc[2 * dj], pl, bv[0], bv[1]);
			mt_mma(acc[2 * dj + 1], pl, bv[2], bv[3]);
		}
	}
	dattn_cp_wait<0>();
	__syncthreads(); /* the stage buffers become the merge area */
	dattn_stamp(e, 6);
	if (NOMATH) {
		m = 0.0f;
		l = 1.0f;
	}
	l += __shfl_xor_sync(0xffffffffu, l, 1);
	l += __shfl_xor_sync(0xffffffffu, l, 2);
	float *sf = (float *)sh_kv, *sh_m = sf, *sh_l = sf + DA_WARPS * G;
	float *sh_acc = sf + 2 * DA_WARPS * G;
	if (g < G) {
#pragma unroll
		for (int j = 0; j < Q::ND; j++) {
			sh_acc[(warp * G + g) * D + j * 8 + 2 * tq] = acc[j][0];
			sh_acc[(warp * G + g) * D + j * 8 + 2 * tq + 1] = acc[j][1];
		}
		if (tq == 0) {
			sh_m[warp * G + g] = m;
			sh_l[warp * G + g] = l;
		}
	}
	dattn_block_merge<D, G>(sh_m, sh_l, sh_acc, nsu, z, nz, part,
	                        (size_t)t * d.n_head + (size_t)kh * G, o,
	                        cnt ? cnt + (size_t)t * d.n_kv + kh : NULL);
	dattn_stamp(e, 7);
}
