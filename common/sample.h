/* sample.h - token sampling as a pure function of (logits, params, absolute position).
 *
 * Greedy is argmax with ties to the lowest id. Temperature / top-k / top-p use Gumbel-max with
 * noise hash(seed, position, token id), so the sampled token depends on nothing but the logits,
 * the seed and the position of the token being produced (DESIGN.md section 3). The CUDA
 * backend implements the same function on the device and must agree with this one. */
#ifndef DS_SAMPLE_H
#define DS_SAMPLE_H

#include "ds_common.h"
#include "rng.h"

#include <math.h>

struct ds_sample_params {
	float temperature; /* 0 = greedy */
	int top_k;         /* 0 = off */
	float top_p;       /* 1 = off; must be in (0, 1] */
	uint64_t seed;
};

struct ds_sample_result {
	int32_t token;
	float logprob; /* log-softmax of the raw logits (temperature 1) at token */
	float margin;  /* top-1 minus top-2 raw logit; +inf when vocab == 1 */
};

/* Scratch needed by ds_sample for a given vocab (bytes). */
size_t ds_sample_scratch_size(int vocab);

/* Samples the token at absolute position pos (the position the new token will occupy) from
 * logits (vocab). scratch must hold ds_sample_scratch_size(vocab) bytes (may be NULL when the
 * params are greedy or use neither top-k nor top-p). Never fails for valid params. */
void ds_sample(const float *logits, int vocab, const struct ds_sample_params *sp, int64_t pos,
	       void *scratch, struct ds_sample_result *out);

/* Gumbel noise key for token id at position pos; device code uses the same formula. */
static inline DS_HD uint64_t ds_sample_key(uint64_t seed, int64_t pos, int32_t id)
{
	return ds_hash3(seed, (uint64_t)pos, (uint64_t)(uint32_t)id);
}

/* The same key in two steps, for a loop over a row's ids: ds_sample_id_key(ds_sample_row_key(
 * seed, pos), id) == ds_sample_key(seed, pos, id). */
static inline DS_HD uint64_t ds_sample_row_key(uint64_t seed, int64_t pos)
{
	return ds_hash2(seed, (uint64_t)pos);
}

static inline DS_HD uint64_t ds_sample_id_key(uint64_t row_key, int32_t id)
{
	return ds_hash3_last(row_key, (uint64_t)(uint32_t)id);
}

/* The Gumbel-perturbed logit g = x / T - log(-log(u)) in fp64, u = ds_hash_unit_open(key),
 * inv_t = 1 / T: the sampler's temperature draw is the argmax of g (ties to the lowest id), on the
 * host (ds_sample) and on the CUDA reference path alike. */
static inline DS_HD double ds_gumbel64(float x, uint64_t key, double inv_t)
{
	double u = ds_hash_unit_open(key);
	return (double)x * inv_t - log(-log(u));
}

/* An fp32 bracket lo <= g <= hi of ds_gumbel64's g, with u = ds_hash_unit_open(key) and inv_tf =
 * (float)(1.0 / T); false where the bracket is not finite or g is not (x infinite, x / T
 * overflowing, or u rounded to 1: take g in fp64). The CUDA reference sampler (kernels/sample.cu)
 * takes fp64 logs only for the logits whose hi reaches the largest lo of the row.
 *
 * u is fl(m + 1/2) 2^-53 with m the key's top 53 bits: m + 1/2 itself below u = 1/2, and the
 * even one of m and m + 1 from there up (the sum needs 54 bits; ties go to even), so 1 - u is
 * q 2^-53 with q = 2^53 - m - (m & 1), zero for the last m. That value, u below 1/2 or 1 - u
 * above, is taken to fp32 from its integer's top 32 bits and low 21 in one fma (relative error
 * under 2^-23, no fp64 conversion); log1pf keeps -log(u) accurate near u = 1. The half-width,
 * 2^-16 (1 + |x / T| + |log(-log u)|), is eight times a bound on the fp32 terms' error with
 * logf and log1pf within 1 ulp (their bound in CUDA); test_sample measures the error with the
 * host's. */
static inline DS_HD bool ds_gumbel_bracket(float x, uint64_t key, float inv_tf, float *lo,
                                           float *hi)
{
	uint64_t m = key >> 11;
	bool upper = (m >> 52) != 0;
	uint64_t q = upper ? ((1ull << 53) - m - (m & 1)) : m;
	if (upper && q == 0)
		return false; /* u == 1: g is +inf */
	float half = upper ? 0.0f : 0.5f;
	float qf = fmaf((float)(uint32_t)(q >> 21), 0x1p-32f,
	                ((float)(uint32_t)(q & 0x1fffffu) + half) * 0x1p-53f);
	float e = upper ? -log1pf(-qf) : -logf(qf); /* -log(u) > 0 */
	float le = logf(e), a = x * inv_tf, g = a - le;
	float w = 0x1p-16f * (1.0f + fabsf(a) + fabsf(le));
	*lo = g - w;
	*hi = g + w;
	return isfinite(*lo) && isfinite(*hi);
}

#endif
