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

#endif
