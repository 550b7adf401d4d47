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

struct smp_shared {
	struct top2 t2[SMP_WARPS];
	struct gbest gb[SMP_WARPS];
	double d[SMP_WARPS];
	long long c[SMP_WARPS];
};

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

__device__ double block_dsum(double v, struct smp_shared *sh)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if ((threadIdx.x & 31) == 0)
		sh->d[threadIdx.x >> 5] = v;
	__syncthreads();
	double r = 0.0;
	for (int w = 0; w < SMP_WARPS; w++)
		r += sh->d[w];
	__syncthreads();
	return r;
}

__device__ long long block_count(long long v, struct smp_shared *sh)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if ((threadIdx.x & 31) == 0)
		sh->c[threadIdx.x >> 5] = v;
	__syncthreads();
	long long r = 0;
	for (int w = 0; w < SMP_WARPS; w++)
		r += sh->c[w];
	__syncthreads();
	return r;
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

/* The filtered set's mass at or above key c (exp((logit - m1) / T) summed in a fixed order):
 * items with key >= c that are in the top-k set, where take_k ties at tk belong to it. */
__device__ double mass_ge(const float *L, int vocab, uint32_t c, bool has_k, uint32_t tk,
                          long long take_k, double m1, double inv_t, struct smp_shared *sh)
{
	double s = 0.0;
	for (int i = threadIdx.x; i < vocab; i += SMP_THREADS) {
		float v = L[i];
		uint32_t k = fkey(v);
		if (k >= c && (!has_k || k > tk))
			s += exp(((double)v - m1) * inv_t);
	}
	s = block_dsum(s, sh);
	if (has_k && c <= tk)
		s += (double)take_k * exp(((double)fkey_val(tk) - m1) * inv_t);
	return s;
}

__global__ void __launch_bounds__(SMP_THREADS)
    sample_kernel(const float *logits, int vocab, const struct ds_k_sample_row *sp,
                  struct ds_k_sample_out *out)
{
	__shared__ struct smp_shared sh;
	ds_grid_dep_wait(); /* no-op unless launched with PDL (the fast path's decode chain) */
	int r = blockIdx.x, tid = threadIdx.x;
	const float *L = logits + (size_t)r * vocab;
	struct ds_k_sample_row P = sp[r];

	struct top2 t = {-INFINITY, -INFINITY, 0x7fffffff};
	for (int i = tid; i < vocab; i += SMP_THREADS) {
		float v = L[i];
		if (v > t.m1) {
			t.m2 = t.m1;
			t.m1 = v;
			t.id = i;
		} else if (v > t.m2) {
			t.m2 = v;
		}
	}
	t = block_top2(t, &sh);
	if (t.id == 0x7fffffff)
		t.id = 0;
	double m1 = (double)t.m1;
	double se = 0.0;
	for (int i = tid; i < vocab; i += SMP_THREADS)
		se += exp((double)L[i] - m1);
	se = block_dsum(se, &sh);
	double lse = m1 + log(se);

	int tok = t.id;
	if (P.temperature > 0.0f) {
		double inv_t = 1.0 / (double)P.temperature;
		bool has_k = P.top_k > 0 && P.top_k < vocab;
		bool has_p = P.top_p < 1.0f;
		if (!has_k && !has_p) {
			struct gbest b = {-INFINITY, 0x7fffffff};
			for (int i = tid; i < vocab; i += SMP_THREADS) {
				double u = ds_hash_unit_open(ds_sample_key(P.seed, P.pos, i));
				double g = (double)L[i] * inv_t - log(-log(u));
				if (g > b.g) {
					b.g = g;
					b.id = i;
				}
			}
			b = block_gbest(b, &sh);
			tok = b.id == 0x7fffffff ? t.id : b.id;
		} else {
			/* top-k: the k-th largest key tk; take_k of the ties at tk, in id order */
			uint32_t tk = 0;
			long long take_k = vocab;
			if (has_k) {
				for (int bit = 31; bit >= 0; bit--) {
					uint32_t cand = tk | (1u << bit);
					long long n = 0;
					for (int i = tid; i < vocab; i += SMP_THREADS)
						n += fkey(L[i]) >= cand;
					if (block_count(n, &sh) >= P.top_k)
						tk = cand;
				}
				long long gt = 0;
				for (int i = tid; i < vocab; i += SMP_THREADS)
					gt += fkey(L[i]) > tk;
				take_k = P.top_k - block_count(gt, &sh);
			}
			/* top-p: the largest key v whose upper mass reaches top_p of the total */
			uint32_t v = tk;
			long long take = take_k;
			if (has_p) {
				double z = mass_ge(L, vocab, 0, has_k, tk, take_k, m1, inv_t, &sh);
				double target = (double)P.top_p * z;
				v = 0;
				for (int bit = 31; bit >= 0; bit--) {
					uint32_t cand = v | (1u << bit);
					if (mass_ge(L, vocab, cand, has_k, tk, take_k, m1, inv_t,
					            &sh) >= target)
						v = cand;
				}
				double above = v == 0xffffffffu
				                   ? 0.0
				                   : mass_ge(L, vocab, v + 1, has_k, tk, take_k, m1,
				                             inv_t, &sh);
				long long avail;
				if (has_k && v == tk) {
					avail = take_k;
				} else {
					long long n = 0;
					for (int i = tid; i < vocab; i += SMP_THREADS)
						n += fkey(L[i]) == v;
					avail = block_count(n, &sh);
				}
				double ev = exp(((double)fkey_val(v) - m1) * inv_t);
				double need = ceil((target - above) / ev);
				take = need < 1.0 ? 1 : (long long)need;
				if (take > avail)
					take = avail;
			}
			/* Gumbel-max over {key > v} and the first `take` ids with key == v */
			int per = (vocab + SMP_THREADS - 1) / SMP_THREADS;
			int lo = tid * per, hi = min(lo + per, vocab);
			long long ties = 0;
			for (int i = lo; i < hi; i++)
				ties += fkey(L[i]) == v;
			long long rank = block_excl_scan(ties, &sh);
			struct gbest b = {-INFINITY, 0x7fffffff};
			for (int i = lo; i < hi; i++) {
				uint32_t k = fkey(L[i]);
				bool in = k > v;
				if (k == v)
					in = rank++ < take;
				if (!in)
					continue;
				double u = ds_hash_unit_open(ds_sample_key(P.seed, P.pos, i));
				double g = (double)L[i] * inv_t - log(-log(u));
				if (g > b.g) {
					b.g = g;
					b.id = i;
				}
			}
			b = block_gbest(b, &sh);
			tok = b.id == 0x7fffffff ? t.id : b.id;
		}
	}
	if (tid == 0) {
		out[r].token = tok;
		out[r].logprob = (float)((double)L[tok] - lse);
		out[r].margin = vocab > 1 ? t.m1 - t.m2 : INFINITY;
	}
}

extern "C" cudaError_t ds_k_sample_pdl(const float *logits, int n_rows, int vocab,
                                       const struct ds_k_sample_row *sp,
                                       struct ds_k_sample_out *out, int pdl, cudaStream_t st)
{
	if (n_rows <= 0)
		return cudaSuccess;
	return ds_launch(sample_kernel, dim3(n_rows), dim3(SMP_THREADS), 0, st, pdl, logits, vocab,
	                 sp, out);
}

extern "C" cudaError_t ds_k_sample(const float *logits, int n_rows, int vocab,
                                   const struct ds_k_sample_row *sp, struct ds_k_sample_out *out,
                                   cudaStream_t st)
{
	return ds_k_sample_pdl(logits, n_rows, vocab, sp, out, 0, st);
}
