/* step_cost.c - what a forward pass costs, learned from the passes the engine runs, and the
 * choice of path for a whole DVR step (step_cost.h).
 *
 * Key decisions:
 *  - measured, not modelled: the engine times every backend forward call (they are synchronous:
 *    the backend returns sampled tokens) and keeps a moving average per path and half-octave
 *    of tokens. The same table serves a CPU, an H200 or a model that does not fit a roofline
 *    formula, and it follows load changes (context length, prefill mix);
 *  - the first pass of a size is dropped: on the GPU it captures a CUDA graph or autotunes,
 *    ten to a hundred times a steady pass;
 *  - when a size is unknown the answer is "unknown", and the caller then keeps DVR's default
 *    (propose on FAST, verify later): a wrong guess may only cost speed, and the choice never
 *    changes a committed token (every token committed on REF is the oracle's). */
#include "step_cost.h"

#include <math.h>
#include <string.h>

#define COST_ALPHA 0.25 /* weight of a new sample in the moving average */
#define COST_REACH 1.5  /* a measured size stands for sizes within this factor */

static int bucket_of(int tokens)
{
	if (tokens < 1)
		tokens = 1;
	int b = (int)floor(2.0 * log2((double)tokens));
	return b < DS_COST_BUCKETS ? b : DS_COST_BUCKETS - 1;
}

void ds_step_cost_reset(struct ds_step_cost *c)
{
	memset(c, 0, sizeof(*c));
}

void ds_step_cost_add(struct ds_step_cost *c, enum ds_path path, int tokens, double secs)
{
	if ((unsigned)path >= DS_N_PATHS || tokens < 1 || !(secs >= 0.0) || !isfinite(secs))
		return;
	int b = bucket_of(tokens);
	unsigned n = ++c->n[path][b];
	if (n == 1)
		return; /* the first pass of a size: graph capture / autotuning, not a steady cost */
	double a = n == 2 ? 1.0 : COST_ALPHA;
	c->secs[path][b] += a * (secs - c->secs[path][b]);
	c->tokens[path][b] += a * ((double)tokens - c->tokens[path][b]);
}

static bool known(const struct ds_step_cost *c, enum ds_path path, int b)
{
	return c->n[path][b] >= 2;
}

/* The measured buckets of a path in order of size (bucket ranges are disjoint, and a bucket's
 * average stays inside its range) into k; returns how many, and in *at how many of them average
 * no more than `tokens`: k[*at - 1] is the nearest at or below, k[*at] the nearest above. */
static int measured(const struct ds_step_cost *c, enum ds_path path, double tokens,
                    int k[DS_COST_BUCKETS], int *at)
{
	int n = 0;
	*at = 0;
	for (int b = 0; b < DS_COST_BUCKETS; b++) {
		if (!known(c, path, b))
			continue;
		k[n++] = b;
		*at += c->tokens[path][b] <= tokens;
	}
	return n;
}

bool ds_step_cost_est(const struct ds_step_cost *c, enum ds_path path, int tokens, double *secs)
{
	if ((unsigned)path >= DS_N_PATHS)
		return false;
	int k[DS_COST_BUCKETS], i;
	double t = tokens;
	int n = measured(c, path, t, k, &i);
	int lo = i > 0 ? k[i - 1] : -1, hi = i < n ? k[i] : -1;
	if (lo >= 0 && hi >= 0) {
		double t0 = c->tokens[path][lo], t1 = c->tokens[path][hi];
		double s0 = c->secs[path][lo], s1 = c->secs[path][hi];
		*secs = s0 + (s1 - s0) * (t - t0) / (t1 - t0);
		return true;
	}
	if (lo >= 0 && t <= COST_REACH * c->tokens[path][lo]) {
		*secs = c->secs[path][lo];
		return true;
	}
	if (hi >= 0 && t * COST_REACH >= c->tokens[path][hi]) {
		*secs = c->secs[path][hi];
		return true;
	}
	return false;
}

double ds_step_cost_marginal(const struct ds_step_cost *c, enum ds_path path, int tokens)
{
	if ((unsigned)path >= DS_N_PATHS)
		return 0.0;
	int k[DS_COST_BUCKETS], i;
	int n = measured(c, path, tokens, k, &i);
	if (n < 2)
		return 0.0;
	/* the pair around `tokens`, or the two nearest on the one side that has any */
	i = i < 1 ? 1 : i < n ? i : n - 1;
	int lo = k[i - 1], hi = k[i];
	double dt = c->tokens[path][hi] - c->tokens[path][lo];
	double ds = c->secs[path][hi] - c->secs[path][lo];
	return dt > 0.0 && ds > 0.0 ? ds / dt : 0.0;
}

bool ds_step_cost_ref_now(const struct ds_step_cost *c, const struct ds_step_shape *s, double bias)
{
	if (bias <= 0.0)
		return true;
	int ref_tokens = s->fast_tokens + s->pending;
	double cf, cr, cr_same;
	if (!ds_step_cost_est(c, DS_PATH_FAST, s->fast_tokens, &cf) ||
	    !ds_step_cost_est(c, DS_PATH_REF, ref_tokens, &cr))
		return false;
	if (!ds_step_cost_est(c, DS_PATH_REF, s->fast_tokens, &cr_same))
		cr_same = cr;
	double m = ds_step_cost_marginal(c, DS_PATH_REF, ref_tokens);
	double premium = cr_same > cf ? cr_same - cf : 0.0;
	double stay = cf + (double)(s->pending + s->proposals) * m + premium / (s->window + 1);
	return bias * cr <= stay;
}
