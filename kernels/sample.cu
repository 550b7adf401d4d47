/* sample.cu - device sampling: the same function as ds_sample (common/sample.c), one block per
 * row, so only token ids, logprobs and margins leave the device.
 *
 * Greedy is argmax with ties to the lowest id. Temperature without filters is Gumbel-max over
 * every id with noise from ds_sample_key(seed, pos, id). With top-k / top-p the host sorts; here
 * the kept set, a prefix of the (logit desc, id asc) order, is found without sorting: a bitwise
 * search over order-preserving float keys finds the k-th largest key, then the smallest key
 * whose upper mass reaches top_p; ties at the cut are taken in id order via a block scan. */
#include "kernels.h"
#include "cu_common.cuh"
#include "pdl.cuh"
#include "sample.h"

#include <math.h>

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)
#define SMP_BATCH 8 /* a range pass's loads in flight per thread */

__device__ __forceinline__ uint32_t fkey(float f)
{
	uint32_t u = __float_as_uint(f);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float fkey_val(uint32_t k)
{
	return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct top2 {
	float m1, m2;
	int id;
};

__device__ __forceinline__ struct top2 top2_merge(struct top2 a, struct top2 b)
{
	if (b.m1 > a.m1 || (b.m1 == a.m1 && b.id < a.id)) {
		struct top2 t = a;
		a = b;
		b = t;
	}
	a.m2 = fmaxf(a.m2, b.m1);
	return a;
}

struct gbest {
	double g;
	int id;
};

__device__ __forceinline__ struct gbest gbest_merge(struct gbest a, struct gbest b)
{
	return (b.g > a.g || (b.g == a.g && b.id < a.id)) ? b : a;
}

/* Id i's Gumbel-perturbed logit in fp64 (logit x, key ds_sample_key through rk, the row's
 * ds_sample_row_key): the reference path's value, the host's (ds_gumbel64, common/sample.h). */
__device__ __forceinline__ double gumbel64(float x, int i, uint64_t rk, double inv_t)
{
	return ds_gumbel64(x, ds_sample_id_key(rk, i), inv_t);
}

/* b <- (g, i) where that is the larger, ties to the lower id (gbest_merge's order, as an update
 * in place) */
__device__ __forceinline__ void gbest_take(struct gbest *b, double g, int i)
{
	if (g > b->g || (g == b->g && i < b->id)) {
		b->g = g;
		b->id = i;
	}
}

/* The fast path's Gumbel-max step: id i's perturbed logit, kept in b when it is the larger (ties
 * to the lower id: the fast path's walks do not visit a thread's ids in order). The noise from
 * the key's top 23 bits, u in (0, 1) exactly, and fp32 logs: with two fp64 logs per logit a
 * temperature row at 256 rows took 347 us, with fp32 ones 196 us on the H200 (bench/results/
 * gpu-20261130-603456e-merge, -2c76465-final: sample.log, temp0.8); the token differs from the
 * fp64 one's only when two perturbed logits are within fp32 rounding. */
__device__ __forceinline__ void gumbel_take_f32(struct gbest *b, float x, int i, uint64_t rk,
                                                double inv_t)
{
	uint64_t h = ds_sample_id_key(rk, i);
	float u = ((float)(uint32_t)(h >> 41) + 0.5f) * (1.0f / 8388608.0f);
	gbest_take(b, (double)(x * (float)inv_t - logf(-logf(u))), i);
}

/* The reference path's Gumbel-max without an fp64 log pair per logit. Each logit's perturbed
 * value g (gumbel64) is bracketed in fp32 (ds_gumbel_bracket, common/sample.h): lo <= g <= hi,
 * from the same u with fp32 logs (log1pf of -(1 - u) where u > 1/2, so that -log(u) keeps its
 * relative accuracy near 1). The bracket's half-width, 2^-16 (1 + |x / T| + |log(-log u)|), is
 * eight times a bound on the fp32 terms' error (the rounding of u, 1 - u and x / T, 1 ulp for
 * logf and log1pf, and 1 ulp of each sum: under 2^-19 of the same). The row's maximum g is at
 * least M = max lo, so only logits with hi >= M can hold it, and an exact tie is a candidate
 * too: gumbel64 of the candidates alone picks the token gumbel64 of every logit picks (ties to
 * the lowest id). A thread keeps its largest hi (and its id), its second largest and its
 * largest lo; where a thread's second is a candidate too (a near tie in one thread; rare) the
 * block walks its range again. Logits without a bracket (+-inf, x / T overflowing, or u
 * rounded to 1) take gumbel64 on the spot. */
struct gfilt {
	float hi1, hi2, lo;
	int id1;
	struct gbest ex; /* logits decided in fp64 on the spot */
};

__device__ __forceinline__ struct gfilt gfilt_init(void)
{
	struct gfilt f = {-INFINITY, -INFINITY, -INFINITY, -1, {-INFINITY, 0x7fffffff}};
	return f;
}

/* Id i's bracket [*lo, *hi] (ds_gumbel_bracket, common/sample.h); false where it is not finite
 * (decide in fp64). */
__device__ __forceinline__ bool gumbel_bracket(float x, int i, uint64_t rk, float inv_tf, float *lo,
                                               float *hi)
{
	return ds_gumbel_bracket(x, ds_sample_id_key(rk, i), inv_tf, lo, hi);
}

__device__ __forceinline__ void gfilt_take(struct gfilt *f, float x, int i, uint64_t rk,
                                           float inv_tf, double inv_t)
{
	float lo, hi;
	if (!gumbel_bracket(x, i, rk, inv_tf, &lo, &hi)) {
		gbest_take(&f->ex, gumbel64(x, i, rk, inv_t), i);
		return;
	}
	if (hi > f->hi1) {
		f->hi2 = f->hi1;
		f->hi1 = hi;
		f->id1 = i;
	} else if (hi > f->hi2) {
		f->hi2 = hi;
	}
	f->lo = fmaxf(f->lo, lo);
}

/* The key searches (top-k's k-th largest key, top-p's cut) take SMP_KBITS / SMP_PBITS bits of
 * the key a pass, evaluating every candidate of those bits in one pass over the row. */
#define SMP_KBITS 3
#define SMP_PBITS 3
#define SMP_KJ ((1 << SMP_KBITS) - 1) /* candidates a pass */
#define SMP_PJ ((1 << SMP_PBITS) - 1)

struct smp_shared {
	struct top2 t2[SMP_WARPS];
	struct gbest gb[SMP_WARPS];
	double d[SMP_WARPS];
	long long c[SMP_WARPS];
	double dm[SMP_PJ][SMP_WARPS]; /* per candidate: the warps' sums */
	int cm[SMP_KJ][SMP_WARPS];    /* per candidate: the warps' counts */
};

/* Calls f(i, L[i]) for i = i0, i0 + step, ... below hi, in that order, with the loads of
 * SMP_BATCH of them in flight at once. A loop that loaded and used one logit per iteration
 * waited a memory round trip per logit: a pass over a row of 128256 took about 50 us of one
 * block on the H200 (bench/results/gpu-20261130-2f13592-sample2), and a top-k / top-p row
 * makes about 14 of them. The order of the calls, so every sum's order, is the loop's: the same bits. */
template <typename F>
__device__ __forceinline__ void smp_walk(const float *L, int i0, int hi, int step, F f)
{
	for (; i0 < hi; i0 += SMP_BATCH * step) {
		float v[SMP_BATCH];
#pragma unroll
		for (int k = 0; k < SMP_BATCH; k++) {
			int i = i0 + k * step;
			v[k] = i < hi ? L[i] : 0.0f;
		}
#pragma unroll
		for (int k = 0; k < SMP_BATCH; k++) {
			int i = i0 + k * step;
			if (i >= hi)
				break;
			f(i, v[k]);
		}
	}
}

/* Calls f(i, L[i]) for every i in [lo, hi) of the block's range: F32 false, as smp_walk from
 * lo + thread with stride SMP_THREADS (each thread's ids in increasing order: the reference
 * path's sums keep their order); F32 true (the fast path, whose sums need not keep it), with
 * 16-byte loads, SMP_BATCH4 of them in flight a thread, where L is 16-byte aligned (a thread's
 * ids then do not come in increasing order: maxima break ties by id explicitly). */
#define SMP_BATCH4 4
template <bool F32, typename F>
__device__ __forceinline__ void smp_walk_range(const float *L, int lo, int hi, F f)
{
	int tid = threadIdx.x;
	if (!F32 || (uintptr_t)L % 16 != 0) {
		smp_walk(L, lo + tid, hi, SMP_THREADS, f);
		return;
	}
	int a = min(hi, (lo + 3) & ~3), b = max(a, hi & ~3); /* [a, b): whole float4s */
	if (tid < a - lo)
		f(lo + tid, L[lo + tid]);
	if (tid < hi - b)
		f(b + tid, L[b + tid]);
	const float4 *V = (const float4 *)(L + a);
	int n4 = (b - a) / 4;
	for (int j0 = tid; j0 < n4; j0 += SMP_BATCH4 * SMP_THREADS) {
		float4 v[SMP_BATCH4];
#pragma unroll
		for (int k = 0; k < SMP_BATCH4; k++) {
			int j = j0 + k * SMP_THREADS;
			v[k] = j < n4 ? V[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		}
#pragma unroll
		for (int k = 0; k < SMP_BATCH4; k++) {
			int j = j0 + k * SMP_THREADS;
			if (j >= n4)
				break;
			int i = a + 4 * j;
			f(i, v[k].x);
			f(i + 1, v[k].y);
			f(i + 2, v[k].z);
			f(i + 3, v[k].w);
		}
	}
}

/* Folds logit v of id i into a thread's top two. A thread's ids come in increasing order
 * unless F32 (smp_walk_range), so then the maximum's ties go to the lowest id explicitly. */
template <bool F32> __device__ __forceinline__ void top2_take(struct top2 *t, float v, int i)
{
	if (v > t->m1 || (F32 && v == t->m1 && i < t->id)) {
		t->m2 = t->m1;
		t->m1 = v;
		t->id = i;
	} else if (v > t->m2) {
		t->m2 = v;
	}
}

__device__ struct top2 block_top2(struct top2 v, struct smp_shared *sh)
{
	for (int o = 16; o > 0; o >>= 1) {
		struct top2 w;
		w.m1 = __shfl_xor_sync(0xffffffffu, v.m1, o);
		w.m2 = __shfl_xor_sync(0xffffffffu, v.m2, o);
		w.id = __shfl_xor_sync(0xffffffffu, v.id, o);
		v = top2_merge(v, w);
	}
	if ((threadIdx.x & 31) == 0)
		sh->t2[threadIdx.x >> 5] = v;
	__syncthreads();
	struct top2 r = sh->t2[0];
	for (int w = 1; w < SMP_WARPS; w++)
		r = top2_merge(r, sh->t2[w]);
	__syncthreads();
	return r;
}

__device__ struct gbest block_gbest(struct gbest v, struct smp_shared *sh)
{
	for (int o = 16; o > 0; o >>= 1) {
		struct gbest w;
		w.g = __shfl_xor_sync(0xffffffffu, v.g, o);
		w.id = __shfl_xor_sync(0xffffffffu, v.id, o);
		v = gbest_merge(v, w);
	}
	if ((threadIdx.x & 31) == 0)
		sh->gb[threadIdx.x >> 5] = v;
	__syncthreads();
	struct gbest r = sh->gb[0];
	for (int w = 1; w < SMP_WARPS; w++)
		r = gbest_merge(r, sh->gb[w]);
	__syncthreads();
	return r;
}

/* v reduced over the block by op: a shuffle tree in each warp, then the warps' results in warp
 * order from init, through slots (SMP_WARPS entries of shared memory). The order is fixed, so a
 * sum has the same bits at every launch. */
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, T *slots, T init, Op op)
{
	for (int o = 16; o > 0; o >>= 1)
		v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
	if ((threadIdx.x & 31) == 0)
		slots[threadIdx.x >> 5] = v;
	__syncthreads();
	T r = init;
	for (int w = 0; w < SMP_WARPS; w++)
		r = op(r, slots[w]);
	__syncthreads();
	return r;
}

__device__ double block_dsum(double v, struct smp_shared *sh)
{
	return block_reduce(v, sh->d, 0.0, [](double a, double b) { return a + b; });
}

__device__ long long block_count(long long v, struct smp_shared *sh)
{
	return block_reduce(v, sh->c, 0LL, [](long long a, long long b) { return a + b; });
}

/* (no NaN reaches it: fmax from -inf is then the first warp's value, as a max from it is) */
__device__ double block_dmax(double v, struct smp_shared *sh)
{
	return block_reduce(v, sh->d, (double)-INFINITY,
	                    [](double a, double b) { return fmax(a, b); });
}

/* The reference path's Gumbel-max (gumbel64's, ties to the lowest id) from every thread's gfilt:
 * walk(fn) calls fn(i, x) for the logits the walk that filled f took, each in the same thread. */
template <typename W>
__device__ struct gbest gfilt_resolve(const struct gfilt &f, const float *L, uint64_t rk,
                                      float inv_tf, double inv_t, W walk, struct smp_shared *sh)
{
	double m = block_dmax(fmax((double)f.lo, f.ex.g), sh);
	struct gbest b = f.ex;
	if (__syncthreads_or(f.hi2 >= m)) {
		walk([&](int i, float x) {
			float lo, hi;
			if (gumbel_bracket(x, i, rk, inv_tf, &lo, &hi) && hi >= m)
				gbest_take(&b, gumbel64(x, i, rk, inv_t), i);
		});
	} else if (f.id1 >= 0 && f.hi1 >= m) {
		gbest_take(&b, gumbel64(L[f.id1], f.id1, rk, inv_t), f.id1);
	}
	return block_gbest(b, sh);
}

/* exclusive prefix of v over threads in index order */
__device__ long long block_excl_scan(long long v, struct smp_shared *sh)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	long long inc = v;
	for (int o = 1; o < 32; o <<= 1) {
		long long n = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += n;
	}
	if (lane == 31)
		sh->c[warp] = inc;
	__syncthreads();
	long long base = 0;
	for (int w = 0; w < warp; w++)
		base += sh->c[w];
	__syncthreads();
	return base + inc - v;
}

/* A logit x's weight exp((x - m1) / T) in a row's top-p mass (m1: the row's maximum, inv_t:
 * 1 / T): fp64, or (F32, the fast path) fp32 summed in fp64 (a top-p 0.9 row took 854 us with
 * fp64 weights, 546 us with fp32 ones: bench/results/gpu-20261130-8de707c-topp32). */
template <bool F32> __device__ __forceinline__ double smp_weight(float x, double m1, double inv_t)
{
	return F32 ? (double)expf((x - (float)m1) * (float)inv_t) : exp(((double)x - m1) * inv_t);
}

/* The filtered set's mass at or above key c (exp((logit - m1) / T) summed in a fixed order):
 * items with key >= c that are in the top-k set, where take_k ties at tk belong to it. */
template <bool F32>
__device__ double mass_ge(const float *L, int vocab, uint32_t c, bool has_k, uint32_t tk,
                          long long take_k, double m1, double inv_t, struct smp_shared *sh)
{
	double s = 0.0;
	smp_walk_range<F32>(L, 0, vocab, [&](int, float v) {
		uint32_t k = fkey(v);
		if (k >= c && (!has_k || k > tk))
			s += smp_weight<F32>(v, m1, inv_t);
	});
	s = block_dsum(s, sh);
	if (has_k && c <= tk)
		s += (double)take_k * smp_weight<F32>(fkey_val(tk), m1, inv_t);
	return s;
}

/* The largest key c, built NB bits a pass from the top, for which ok(c, total) holds, where
 * total is the block's sum over the row's logits x of key k >= c of the value val gives them
 * (val(k, x, &v) false: x adds nothing): each pass sums at every nonzero candidate of its bits at
 * once, each in the per-thread order of smp_walk_range and then over the warps in order from zero,
 * as block_count and block_dsum do. ok must hold at c = 0 and, as c grows, stop holding for good
 * (a count or a mass of positive terms only falls as c grows: rounding is monotone), so this
 * finds the key a one-bit-a-pass search finds, in about 32 / NB passes instead of 32. part:
 * (2^NB - 1, SMP_WARPS) shared scratch. */
template <int NB, bool F32, typename T, typename Val, typename Ok>
__device__ uint32_t smp_key_search(const float *L, int vocab, T (*part)[SMP_WARPS], Val val, Ok ok)
{
	constexpr int NJ = (1 << NB) - 1;
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	uint32_t c = 0;
	for (int hi = 32; hi > 0;) {
		int nb = min(NB, hi), lo = hi - nb, J = (1 << nb) - 1;
		uint32_t c0 = c | (uint32_t)1 << lo; /* the lowest candidate */
		T s[NJ];
#pragma unroll
		for (int j = 0; j < NJ; j++)
			s[j] = 0;
		smp_walk_range<F32>(L, 0, vocab, [&](int, float x) {
			uint32_t k = fkey(x);
			T v;
			if (k < c0 || !val(k, x, &v))
				return;
#pragma unroll
			for (int j = 0; j < NJ; j++)
				if (k >= (c | (uint32_t)(j + 1) << lo))
					s[j] += v;
		});
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			for (int o = 16; o > 0; o >>= 1)
				s[j] += __shfl_xor_sync(0xffffffffu, s[j], o);
			if (lane == 0)
				part[j][warp] = s[j];
		}
		__syncthreads();
		int best = 0;
		for (int j = 0; j < J; j++) {
			T t = 0;
			for (int w = 0; w < SMP_WARPS; w++)
				t += part[j][w];
			if (ok(c | (uint32_t)(j + 1) << lo, t))
				best = j + 1;
		}
		__syncthreads();
		c |= (uint32_t)best << lo;
		hi = lo;
	}
	return c;
}

/* The top_k-th largest key of the row (top_k < vocab): the largest key c with at least top_k
 * logits of key >= c. */
template <bool F32>
__device__ uint32_t smp_kth_key(const float *L, int vocab, int top_k, struct smp_shared *sh)
{
	return smp_key_search<SMP_KBITS, F32, int>(
	    L, vocab, sh->cm,
	    [](uint32_t, float, int *v) {
		    *v = 1;
		    return true;
	    },
	    [&](uint32_t, int n) { return n >= top_k; });
}

/* How many of the ties at key tk a top_k set takes: top_k less the logits of key > tk. */
template <bool F32>
__device__ long long smp_take_at(const float *L, int vocab, int top_k, uint32_t tk,
                                 struct smp_shared *sh)
{
	long long gt = 0;
	smp_walk_range<F32>(L, 0, vocab, [&](int, float x) { gt += fkey(x) > tk; });
	return top_k - block_count(gt, sh);
}

/* The top-p cut: the largest key v with mass_ge(v) >= target; each candidate's mass has
 * mass_ge's bits (the same terms in the same order and tree). */
template <bool F32>
__device__ uint32_t smp_p_cut(const float *L, int vocab, bool has_k, uint32_t tk, long long take_k,
                              double m1, double inv_t, double target, struct smp_shared *sh)
{
	double tie = has_k ? (double)take_k * smp_weight<F32>(fkey_val(tk), m1, inv_t) : 0.0;
	return smp_key_search<SMP_PBITS, F32, double>(
	    L, vocab, sh->dm,
	    [&](uint32_t k, float x, double *v) {
		    if (has_k && k <= tk)
			    return false;
		    *v = smp_weight<F32>(x, m1, inv_t);
		    return true;
	    },
	    [&](uint32_t c, double m) { return (has_k && c <= tk ? m + tie : m) >= target; });
}

/* The one-bit-a-pass searches smp_kth_key and smp_p_cut replaced, kept as the reference that
 * ds_k_sample_search_check holds them to. */
template <bool F32>
__device__ uint32_t smp_kth_key_bitwise(const float *L, int vocab, int top_k, struct smp_shared *sh)
{
	uint32_t tk = 0;
	for (int bit = 31; bit >= 0; bit--) {
		uint32_t cand = tk | (1u << bit);
		long long n = 0;
		smp_walk_range<F32>(L, 0, vocab, [&](int, float x) { n += fkey(x) >= cand; });
		if (block_count(n, sh) >= top_k)
			tk = cand;
	}
	return tk;
}

template <bool F32>
__device__ uint32_t smp_p_cut_bitwise(const float *L, int vocab, bool has_k, uint32_t tk,
                                      long long take_k, double m1, double inv_t, double target,
                                      struct smp_shared *sh)
{
	uint32_t v = 0;
	for (int bit = 31; bit >= 0; bit--) {
		uint32_t cand = v | (1u << bit);
		if (mass_ge<F32>(L, vocab, cand, has_k, tk, take_k, m1, inv_t, sh) >= target)
			v = cand;
	}
	return v;
}

/* One block's share of a row: its range's top two and lowest-id maximum, the sum of
 * exp(logit - m1) over the range with m1 the range's maximum, and (temperature without filters)
 * its range's Gumbel-max. Two passes: the top two with the Gumbel-max (which needs no statistic
 * of the row), then the sum. The exp terms are fp32, summed in fp64, on both paths: the reference
 * path's logprobs are its own bits, a function of the row alone (test_gpu_kernels holds them
 * within 1e-4 of the host's fp64 ones, the fast path's within 1e-5 of the reference's). With
 * fp64 terms 256 greedy rows took 124.8 us on the reference path, 80.9 with the fast path's fp32
 * ones (bench/results/gpu-20261130-6f2d241-gbracket, sample.log). A single pass with an online
 * sum (a running maximum and sum a thread, rescaled as the maximum rises) was no faster on the
 * fast path: 83.9 us at 256 greedy rows, 178.0 at temperature 0.8, against 80.9 and 172.3
 * (-84233a4-refsplit). With the range the whole row this is the single-block sampler's first
 * pass. */
struct smp_part {
	struct top2 t;
	double se;
	struct gbest gb;
};

template <bool F32>
__device__ struct smp_part sample_range(const float *L, int lo, int hi,
                                        const struct ds_k_sample_row &P, bool gumbel,
                                        struct smp_shared *sh)
{
	struct smp_part pt;
	struct top2 t = {-INFINITY, -INFINITY, 0x7fffffff};
	struct gbest b = {-INFINITY, 0x7fffffff};
	struct gfilt gf = gfilt_init();
	uint64_t rk = ds_sample_row_key(P.seed, P.pos);
	double inv_t = gumbel ? 1.0 / (double)P.temperature : 0.0;
	float inv_tf = (float)inv_t;
	smp_walk_range<F32>(L, lo, hi, [&](int i, float v) {
		top2_take<F32>(&t, v, i);
		if (!gumbel)
			return;
		if (F32)
			gumbel_take_f32(&b, v, i, rk, inv_t);
		else
			gfilt_take(&gf, v, i, rk, inv_tf, inv_t);
	});
	pt.t = block_top2(t, sh);
	float m1f = pt.t.m1;
	double se = 0.0;
	smp_walk_range<F32>(L, lo, hi, [&](int, float v) { se += (double)expf(v - m1f); });
	pt.se = block_dsum(se, sh);
	if (gumbel)
		b = F32 ? block_gbest(b, sh)
		        : gfilt_resolve(
		              gf, L, rk, inv_tf, inv_t,
		              [&](auto fn) { smp_walk_range<F32>(L, lo, hi, fn); }, sh);
	pt.gb = b;
	return pt;
}

/* Row blockIdx.x: the top-k key and the top-p cut by both searches, as sample_finish<F32> sets
 * them up (out: tk, tk bitwise, v, v bitwise; 0 where the row has no such filter). */
template <bool F32>
__global__ void __launch_bounds__(SMP_THREADS)
    sample_search_check_kernel(const float *logits, int vocab, const struct ds_k_sample_row *sp,
                               uint32_t *out)
{
	__shared__ struct smp_shared sh;
	const float *L = logits + (size_t)blockIdx.x * vocab;
	struct ds_k_sample_row P = sp[blockIdx.x];
	struct top2 t = sample_range<F32>(L, 0, vocab, P, false, &sh).t;
	double m1 = (double)t.m1, inv_t = 1.0 / (double)P.temperature;
	bool has_k = P.top_k > 0 && P.top_k < vocab, has_p = P.top_p < 1.0f;
	uint32_t tk = 0, tk_b = 0, v = 0, v_b = 0;
	long long take_k = vocab;
	if (has_k) {
		tk = smp_kth_key<F32>(L, vocab, P.top_k, &sh);
		tk_b = smp_kth_key_bitwise<F32>(L, vocab, P.top_k, &sh);
		take_k = smp_take_at<F32>(L, vocab, P.top_k, tk, &sh);
	}
	if (has_p) {
		double z = mass_ge<F32>(L, vocab, 0, has_k, tk, take_k, m1, inv_t, &sh);
		double target = (double)P.top_p * z;
		v = smp_p_cut<F32>(L, vocab, has_k, tk, take_k, m1, inv_t, target, &sh);
		v_b = smp_p_cut_bitwise<F32>(L, vocab, has_k, tk, take_k, m1, inv_t, target, &sh);
	}
	if (threadIdx.x == 0) {
		uint32_t *o = out + (size_t)blockIdx.x * 4;
		o[0] = tk;
		o[1] = tk_b;
		o[2] = v;
		o[3] = v_b;
	}
}

extern "C" cudaError_t ds_k_sample_search_check(const float *logits, int n_rows, int vocab,
                                                const struct ds_k_sample_row *sp, int f32,
                                                uint32_t *out, cudaStream_t st)
{
	if (n_rows <= 0)
		return cudaSuccess;
	if (f32)
		sample_search_check_kernel<true>
		    <<<n_rows, SMP_THREADS, 0, st>>>(logits, vocab, sp, out);
	else
		sample_search_check_kernel<false>
		    <<<n_rows, SMP_THREADS, 0, st>>>(logits, vocab, sp, out);
	return cudaGetLastError();
}

/* The row's token from its merged statistics (t, lse; gb: the Gumbel-max when gumbel), running
 * the top-k / top-p search over the whole row when the row has filters; writes out. */
template <bool F32>
__device__ void sample_finish(const float *L, int vocab, const struct ds_k_sample_row &P,
                              struct top2 t, double lse, struct gbest gb, bool gumbel,
                              struct ds_k_sample_out *out, struct smp_shared *sh)
{
	int tid = threadIdx.x;
	if (t.id == 0x7fffffff)
		t.id = 0;
	double m1 = (double)t.m1;
	int tok = t.id;
	if (gumbel) {
		tok = gb.id == 0x7fffffff ? t.id : gb.id;
	} else if (P.temperature > 0.0f) {
		double inv_t = 1.0 / (double)P.temperature;
		bool has_k = P.top_k > 0 && P.top_k < vocab;
		bool has_p = P.top_p < 1.0f;
		/* top-k: the k-th largest key tk; take_k of the ties at tk, in id order */
		uint32_t tk = 0;
		long long take_k = vocab;
		if (has_k) {
			tk = smp_kth_key<F32>(L, vocab, P.top_k, sh);
			take_k = smp_take_at<F32>(L, vocab, P.top_k, tk, sh);
		}
		/* top-p: the largest key v whose upper mass reaches top_p of the total */
		uint32_t v = tk;
		long long take = take_k;
		if (has_p) {
			double z = mass_ge<F32>(L, vocab, 0, has_k, tk, take_k, m1, inv_t, sh);
			double target = (double)P.top_p * z;
			v = smp_p_cut<F32>(L, vocab, has_k, tk, take_k, m1, inv_t, target, sh);
			double above = v == 0xffffffffu ? 0.0
			                                : mass_ge<F32>(L, vocab, v + 1, has_k, tk,
			                                               take_k, m1, inv_t, sh);
			long long avail;
			if (has_k && v == tk) {
				avail = take_k;
			} else {
				long long n = 0;
				smp_walk_range<F32>(L, 0, vocab,
				                    [&](int, float x) { n += fkey(x) == v; });
				avail = block_count(n, sh);
			}
			double ev = smp_weight<F32>(fkey_val(v), m1, inv_t);
			double need = ceil((target - above) / ev);
			take = need < 1.0 ? 1 : (long long)need;
			if (take > avail)
				take = avail;
		}
		/* Gumbel-max over {key > v} and the first `take` ids with key == v */
		int per = (vocab + SMP_THREADS - 1) / SMP_THREADS;
		int lo = tid * per, hi = min(lo + per, vocab);
		long long ties = 0;
		smp_walk(L, lo, hi, 1, [&](int, float x) { ties += fkey(x) == v; });
		long long rank0 = block_excl_scan(ties, sh);
		uint64_t rk = ds_sample_row_key(P.seed, P.pos);
		float inv_tf = (float)inv_t;
		/* fn(i, x) for the kept ids of the thread's range */
		auto kept = [&](auto fn) {
			long long rank = rank0;
			smp_walk(L, lo, hi, 1, [&](int i, float x) {
				uint32_t k = fkey(x);
				bool in = k > v;
				if (k == v)
					in = rank++ < take;
				if (in)
					fn(i, x);
			});
		};
		struct gbest b = {-INFINITY, 0x7fffffff};
		if (F32) {
			kept([&](int i, float x) { gumbel_take_f32(&b, x, i, rk, inv_t); });
			b = block_gbest(b, sh);
		} else {
			struct gfilt gf = gfilt_init();
			kept([&](int i, float x) { gfilt_take(&gf, x, i, rk, inv_tf, inv_t); });
			b = gfilt_resolve(gf, L, rk, inv_tf, inv_t, kept, sh);
		}
		tok = b.id == 0x7fffffff ? t.id : b.id;
	}
	if (tid == 0) {
		out->token = tok;
		out->logprob = (float)((double)L[tok] - lse);
		out->margin = vocab > 1 ? t.m1 - t.m2 : INFINITY;
	}
}

/* Row blockIdx.x over gridDim.y blocks: with one, the whole row in this block; with more, each
 * block's range's statistics go to part (row r's at r * pstride), the last block of the row to
 * finish (cnt, left zero) merges them in range order (fixed: the same bits whichever block is
 * last) and finishes. The caller picks the block count (the fast path: from the batch).
 * The merging block's threads fetch the parts at once (one L2 round trip, not one or two per
 * part in thread 0's loop: at 31 parts that chain took most of the kernel's 39-57 us on the
 * H200, bench/results/gpu-20261130-e572c35-trace). */
static_assert(DS_K_SAMPLE_MAX_SPLIT <= SMP_WARPS, "the merge's terms sit in smp_shared.d");

template <bool F32>
__global__ void __launch_bounds__(SMP_THREADS)
    sample_kernel(const float *logits, int vocab, const struct ds_k_sample_row *sp,
                  struct ds_k_sample_out *out, struct smp_part *part, int pstride, unsigned *cnt)
{
	__shared__ struct smp_shared sh;
	__shared__ struct smp_part merged, parts[DS_K_SAMPLE_MAX_SPLIT];
	__shared__ bool last;
	ds_grid_dep_wait(); /* no-op unless launched with PDL (the fast path's decode chain) */
	int r = blockIdx.x, b = blockIdx.y, nb = gridDim.y;
	const float *L = logits + (size_t)r * vocab;
	struct ds_k_sample_row P = sp[r];
	bool gumbel =
	    P.temperature > 0.0f && !(P.top_k > 0 && P.top_k < vocab) && !(P.top_p < 1.0f);
	int chunk = (vocab + nb - 1) / nb, lo = min(b * chunk, vocab), hi = min(lo + chunk, vocab);
	struct smp_part pt = sample_range<F32>(L, lo, hi, P, gumbel, &sh);
	if (nb > 1) {
		if (threadIdx.x == 0) {
			part[(size_t)r * pstride + b] = pt;
			__threadfence();
			last = atomicAdd(cnt + r, 1u) == (unsigned)nb - 1;
			if (last)
				cnt[r] = 0; /* the row's other blocks are done with it */
		}
		__syncthreads();
		if (!last)
			return;
		if (threadIdx.x < nb) {
			__threadfence();
			const volatile struct smp_part *q =
			    part + (size_t)r * pstride + threadIdx.x;
			struct smp_part *d = &parts[threadIdx.x];
			d->t.m1 = q->t.m1;
			d->t.m2 = q->t.m2;
			d->t.id = q->t.id;
			d->se = q->se;
			d->gb.g = q->gb.g;
			d->gb.id = q->gb.id;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			struct smp_part m = parts[0];
			for (int k = 1; k < nb; k++) {
				m.t = top2_merge(m.t, parts[k].t);
				m.gb = gbest_merge(m.gb, parts[k].gb);
			}
			merged = m;
		}
		__syncthreads();
		/* each part's share of the row's sum of exp(logit - max), in parallel; summed in
		 * range order (ranges whose maximum is -inf hold nothing) */
		double m1 = (double)merged.t.m1;
		if (threadIdx.x < nb)
			sh.d[threadIdx.x] =
			    parts[threadIdx.x].t.m1 != -INFINITY
			        ? parts[threadIdx.x].se * exp((double)parts[threadIdx.x].t.m1 - m1)
			        : 0.0;
		__syncthreads();
		if (threadIdx.x == 0) {
			double se = 0.0;
			for (int k = 0; k < nb; k++)
				se += sh.d[k];
			merged.se = se;
		}
		__syncthreads();
		pt = merged;
	}
	sample_finish<F32>(L, vocab, P, pt.t, (double)pt.t.m1 + log(pt.se), pt.gb, gumbel, out + r,
	                   &sh);
}

extern "C" int ds_k_sample_split_blocks(int vocab)
{
	int nb = vocab / 4096;
	return nb < 1 ? 1 : nb > DS_K_SAMPLE_MAX_SPLIT ? DS_K_SAMPLE_MAX_SPLIT : nb;
}

/* The workspace of cap rows: a counter per row first, then each row's parts, at places that do
 * not depend on the launch's rows or block count (a counter must stay zero between launches; a
 * part is written before it is read in every launch). */
static size_t smp_cnt_bytes(int cap)
{
	return ((size_t)cap * sizeof(unsigned) + 15) / 16 * 16;
}

extern "C" size_t ds_k_sample_ws_bytes(int cap, int vocab)
{
	return smp_cnt_bytes(cap) +
	       (size_t)cap * ds_k_sample_split_blocks(vocab) * sizeof(struct smp_part);
}

/* Rows over nb blocks each, on ws (ds_k_sample_ws_bytes(cap, vocab)); nb 1 needs no ws. */
template <bool F32>
static cudaError_t sample_launch(const float *logits, int n_rows, int vocab, int nb,
                                 const struct ds_k_sample_row *sp, struct ds_k_sample_out *out,
                                 void *ws, int cap, int pdl, cudaStream_t st)
{
	if (n_rows <= 0)
		return cudaSuccess;
	int nmax = ds_k_sample_split_blocks(vocab);
	if (nb < 1 || nb > nmax || (nb > 1 && (!ws || (uintptr_t)ws % 16 != 0 || n_rows > cap)))
		return cudaErrorInvalidValue;
	unsigned *cnt = nb > 1 ? (unsigned *)ws : NULL;
	struct smp_part *part =
	    nb > 1 ? (struct smp_part *)((char *)ws + smp_cnt_bytes(cap)) : NULL;
	return ds_launch(sample_kernel<F32>, dim3(n_rows, nb), dim3(SMP_THREADS), 0, st, pdl,
	                 logits, vocab, sp, out, part, nmax, cnt);
}

extern "C" cudaError_t ds_k_sample_split_pdl(const float *logits, int n_rows, int vocab, int nb,
                                             const struct ds_k_sample_row *sp,
                                             struct ds_k_sample_out *out, void *ws, int cap,
                                             int pdl, cudaStream_t st)
{
	return sample_launch<true>(logits, n_rows, vocab, nb, sp, out, ws, cap, pdl, st);
}

/* The reference path keeps one block a row, whatever the batch: its logprob's sum would take
 * another order over more blocks. Spread over 8 blocks a row, a temperature row took 33 us
 * alone (146 on one block) but 256 of them 418 us (293 on one block a row): bench/results/
 * gpu-20261130-84233a4-refsplit, -6f2d241-gbracket (sample.log). */
extern "C" cudaError_t ds_k_sample_pdl(const float *logits, int n_rows, int vocab,
                                       const struct ds_k_sample_row *sp,
                                       struct ds_k_sample_out *out, int pdl, cudaStream_t st)
{
	return sample_launch<false>(logits, n_rows, vocab, 1, sp, out, NULL, 0, pdl, st);
}

extern "C" cudaError_t ds_k_sample(const float *logits, int n_rows, int vocab,
                                   const struct ds_k_sample_row *sp, struct ds_k_sample_out *out,
                                   cudaStream_t st)
{
	return ds_k_sample_pdl(logits, n_rows, vocab, sp, out, 0, st);
}
