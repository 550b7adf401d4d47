/* step_cost.h - measured cost of a forward pass per path and size, and the DVR step-path choice
 * that uses it (step_cost.c). Step-thread state of the engine; no locking. */
#ifndef DS_STEP_COST_H
#define DS_STEP_COST_H

#include <stdbool.h>

#include "backend.h"

/* Half-octave buckets of the tokens in a pass: bucket b holds 2^(b/2) <= tokens < 2^((b+1)/2). */
#define DS_COST_BUCKETS 36

struct ds_step_cost {
	double secs[DS_N_PATHS][DS_COST_BUCKETS];   /* moving average of a pass's wall time */
	double tokens[DS_N_PATHS][DS_COST_BUCKETS]; /* moving average of its tokens */
	unsigned n[DS_N_PATHS][DS_COST_BUCKETS];    /* samples seen */
};

void ds_step_cost_reset(struct ds_step_cost *c);
/* Records one forward pass of `tokens` tokens on `path` that took `secs` seconds. */
void ds_step_cost_add(struct ds_step_cost *c, enum ds_path path, int tokens, double secs);
/* Estimated seconds of a pass of `tokens` tokens: interpolated between the nearest measured
 * sizes around it, or taken from a measured size within a factor 1.5. False when unknown. */
bool ds_step_cost_est(const struct ds_step_cost *c, enum ds_path path, int tokens, double *secs);
/* Estimated seconds one more token adds to a pass of about `tokens` tokens (the slope between
 * measured sizes); 0 when fewer than two sizes are known. */
double ds_step_cost_marginal(const struct ds_step_cost *c, enum ds_path path, int tokens);

/* One step's shape, as the scheduler would plan it on the fast path. */
struct ds_step_shape {
	int fast_tokens; /* tokens of the step on FAST (decode rows, prefill chunks) */
	int pending;     /* unverified candidates of the DVR requests that would verify now */
	int proposals;   /* DVR requests that would propose one more candidate on FAST */
	int window;      /* W */
};

/* Should a DVR step without a due verification run entirely on the reference path (DVR requests
 * verify what they hold and decode their next token there, committed at once)? Yes when the
 * REF pass (fast_tokens + pending tokens), times bias, costs no more than the FAST pass plus
 * what staying on FAST commits the engine to: the later verification of the pending and proposed
 * candidates (at the REF marginal cost per token) and a share 1/(W+1) of a REF step's premium
 * over FAST. bias <= 0: always; unknown costs: never. */
bool ds_step_cost_ref_now(const struct ds_step_cost *c, const struct ds_step_shape *s, double bias);

#endif
