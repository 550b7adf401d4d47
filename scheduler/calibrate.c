/* calibrate.c - the "auto" early-verification threshold: at engine init (DVR mode, threshold
 * < 0) a small batch of seeded sequences runs through the backend on both paths with full
 * logits. A fast-path token flips on the reference path when the reference reverses the order
 * of the fast top-1 and a competitor j, i.e. when the error of the GAP (f_top1 - f_j) -
 * (r_top1 - r_j) exceeds the fast gap. So the calibration measures that gap error for the fast
 * top-1 against each of the next CAL_TOPK - 1 fast candidates of every row, and the threshold is
 * CAL_SCALE x its largest value, clamped.
 *
 * Key decisions:
 *  - the threshold only decides WHEN a window is verified, never WHETHER a token is (every
 *    candidate is replayed on the reference path anyway), so a mis-calibrated value costs
 *    throughput, not determinism;
 *  - the scale is the gap error, not the largest |fast - ref| over the whole vocabulary: that
 *    maximum comes from far-tail logits that never compete for the top, and 4x it (the former
 *    rule) made early verification fire on about every second token of the synthetic 8B model
 *    on the H200, a reference pass each time (README, GPU section). With 32 rows x 7
 *    competitors the largest gap error sits near 3 standard deviations of the gap error, so
 *    1.5x it is about 4.5 of them;
 *  - the calibration's KV blocks are taken from the pool, never published to the prefix cache,
 *    and freed before any request runs; its backend calls happen before the engine snapshots
 *    the call counters, so engine stats do not include them. */
#include "engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CAL_SEQS 4
#define CAL_TOKENS 8
#define CAL_TOPK 8
#define CAL_SCALE 1.5f
#define CAL_FLOOR 1e-3f /* logits: below this a "tie" is a tie whatever the path */
#define CAL_CEIL 0.5f   /* the former fixed default */

/* The largest |(f[a] - f[j]) - (r[a] - r[j])| over the fast top-1 a and the next CAL_TOPK - 1
 * fast candidates j of one row (non-finite logits skipped). */
static float gap_error(const float *f, const float *r, size_t V)
{
	size_t top[CAL_TOPK];
	int n = 0;
	for (size_t v = 0; v < V; v++) {
		if (!isfinite(f[v]) || !isfinite(r[v]))
			continue;
		int k = n < CAL_TOPK ? n++ : CAL_TOPK;
		if (k == CAL_TOPK) {
			if (f[v] <= f[top[CAL_TOPK - 1]])
				continue;
			k = CAL_TOPK - 1;
		}
		while (k > 0 && f[top[k - 1]] < f[v]) { /* insertion, highest first */
			top[k] = top[k - 1];
			k--;
		}
		top[k] = v;
	}
	float worst = 0.0f;
	for (int k = 1; k < n; k++) {
		size_t a = top[0], j = top[k];
		float d = fabsf((f[a] - f[j]) - (r[a] - r[j]));
		if (d > worst)
			worst = d;
	}
	return worst;
}

struct ds_fwd_seq ds_engine_scratch_seq(const int32_t *tokens, int n, const struct ds_kv_seq *kv,
                                        bool all_rows)
{
	return (struct ds_fwd_seq){
	    .tokens = tokens,
	    .n_tokens = n,
	    .pos0 = 0,
	    .blocks = kv->blocks,
	    .n_blocks = kv->n,
	    .all_rows = all_rows,
	    .sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0},
	};
}

enum ds_status ds_engine_calibrate(struct ds_engine *e, struct ds_err *err)
{
	const struct ds_model_config *c = &e->model->cfg;
	int n_tok = DS_MIN(CAL_TOKENS, c->max_pos);
	int bs = e->o.kv_block_size;
	int per_seq = (n_tok + bs - 1) / bs;
	int n_seq = DS_MIN(CAL_SEQS, e->o.kv_blocks / per_seq);
	e->margin_delta = -1.0f;
	e->margin_thr = CAL_CEIL;
	if (n_seq < 1 || n_tok < 1)
		return DS_OK; /* no room to calibrate: keep the conservative ceiling */
	enum ds_status rv = DS_OK;
	size_t V = (size_t)c->vocab_size, rows = (size_t)n_seq * (size_t)n_tok;
	int32_t *tok = malloc(rows * sizeof(int32_t));
	float *lg[2] = {malloc(rows * V * sizeof(float)), malloc(rows * V * sizeof(float))};
	struct ds_fwd_row *out = malloc(rows * sizeof(*out));
	struct ds_kv_seq kv[CAL_SEQS];
	struct ds_fwd_seq seqs[CAL_SEQS];
	memset(kv, 0, sizeof(kv));
	if (!tok || !lg[0] || !lg[1] || !out) {
		rv = ds_errf(err, DS_ERR_NOMEM,
		             "engine: out of memory for margin calibration "
		             "(%zu rows x %zu logits)",
		             rows, V);
		goto out;
	}
	for (size_t i = 0; i < rows; i++)
		tok[i] = (int32_t)(ds_hash3(0x63616c6962ull, i / (size_t)n_tok, i) % V);
	for (int s = 0; s < n_seq; s++) {
		if (!ds_kv_seq_reserve(e->pool, &kv[s], n_tok))
			goto out; /* not with n_seq bounded by the pool; keeps the ceiling */
		seqs[s] = ds_engine_scratch_seq(tok + (size_t)s * (size_t)n_tok, n_tok, &kv[s], true);
	}
	for (int p = 0; p < DS_N_PATHS; p++) {
		struct ds_fwd_batch b = {.path = (enum ds_path)p,
		                         .seqs = seqs,
		                         .n_seqs = n_seq,
		                         .rows = out,
		                         .logits = lg[p]};
		if ((rv = ds_backend_forward(e->be, &b, err)) != DS_OK)
			goto out;
	}
	float delta = 0.0f;
	for (size_t i = 0; i < rows; i++) {
		float d = gap_error(lg[DS_PATH_FAST] + i * V, lg[DS_PATH_REF] + i * V, V);
		if (d > delta)
			delta = d;
	}
	e->margin_delta = delta;
	float thr = CAL_SCALE * delta;
	e->margin_thr = thr < CAL_FLOOR ? CAL_FLOOR : thr > CAL_CEIL ? CAL_CEIL : thr;
out:
	for (int s = 0; s < n_seq && s < CAL_SEQS; s++)
		ds_kv_seq_release(e->pool, &kv[s]);
	free(tok);
	free(lg[0]);
	free(lg[1]);
	free(out);
	return rv;
}
