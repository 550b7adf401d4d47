/* sample.c - the host sampler (see sample.h for the contract). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>

struct ds_sort_item {
	float logit;
	int32_t id;
};

size_t ds_sample_scratch_size(int vocab)
{
	return (size_t)vocab * sizeof(struct ds_sort_item);
}


/* logit descending, ties to the lower id */
static int cmp_item(const void *a, const void *b)
{
	const struct ds_sort_item *x = a, *y = b;
	if (x->logit > y->logit)
		return -1;
	if (x->logit < y->logit)
		return 1;
	return (x->id > y->id) - (x->id < y->id);
}

void ds_sample(const float *logits, int vocab, const struct ds_sample_params *sp, int64_t pos,
	       void *scratch, struct ds_sample_result *out)
{
	DS_ASSERT(vocab > 0);
	/* top-1 / top-2 and the log-sum-exp of the raw logits, in one fixed-order pass */
	int best = 0;
	float m1 = logits[0], m2 = -INFINITY;
	for (int i = 1; i < vocab; i++) {
		float v = logits[i];
		if (v > m1) {
			m2 = m1;
			m1 = v;
			best = i;
		} else if (v > m2) {
			m2 = v;
		}
	}
	double sum = 0.0;
	for (int i = 0; i < vocab; i++)
		sum += exp((double)logits[i] - (double)m1);
	double lse = (double)m1 + log(sum);
	out->margin = vocab > 1 ? m1 - m2 : INFINITY;

	int32_t tok = best;
	if (sp->temperature > 0.0f) {
		double inv_t = 1.0 / (double)sp->temperature;
		uint64_t rk = ds_sample_row_key(sp->seed, pos); /* the key's row rounds, once */
		bool filter = (sp->top_k > 0 && sp->top_k < vocab) || sp->top_p < 1.0f;
		if (!filter) {
			double bv = -INFINITY;
			for (int i = 0; i < vocab; i++) {
				double g = ds_gumbel64(logits[i], ds_sample_id_key(rk, i), inv_t);
				if (g > bv) {
					bv = g;
					tok = i;
				}
			}
		} else {
			/* Sort candidates; the filtered set is a prefix of the sorted order. */
			DS_ASSERT(scratch != NULL);
			struct ds_sort_item *items = scratch;
			for (int i = 0; i < vocab; i++) {
				items[i].logit = logits[i];
				items[i].id = i;
			}
			qsort(items, (size_t)vocab, sizeof(*items), cmp_item);
			int keep = vocab;
			if (sp->top_k > 0 && sp->top_k < keep)
				keep = sp->top_k;
			if (sp->top_p < 1.0f) {
				/* probabilities at temperature T, renormalised over the top-k set */
				double z = 0.0;
				for (int i = 0; i < keep; i++)
					z += exp(((double)items[i].logit - (double)m1) * inv_t);
				double acc = 0.0;
				int n = 0;
				while (n < keep) {
					acc += exp(((double)items[n].logit - (double)m1) * inv_t) / z;
					n++;
					if (acc >= (double)sp->top_p)
						break;
				}
				keep = n;
			}
			double bv = -INFINITY;
			for (int i = 0; i < keep; i++) {
				int32_t id = items[i].id;
				double g =
				    ds_gumbel64(items[i].logit, ds_sample_id_key(rk, id), inv_t);
				if (g > bv || (g == bv && id < tok)) {
					bv = g;
					tok = id;
				}
			}
		}
	}
	out->token = tok;
	out->logprob = (float)((double)logits[tok] - lse);
}
