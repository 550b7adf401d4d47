/* calibrate.c - the "auto" early-verification threshold: at engine init (DVR mode, threshold
 * < 0) a small batch of seeded sequences runs through the backend on both paths with full
 * logits, and the threshold becomes 4x the largest |fast - ref| logit difference seen, clamped.
 *
 * Key decision: the threshold only decides WHEN a window is verified, never WHETHER a token is
 * (every candidate is replayed on the reference path anyway), so a mis-calibrated value costs
 * throughput, not determinism. A top-1/top-2 margin above the real fast-vs-reference
 * discrepancy cannot flip the token, which is why the discrepancy, not a fixed 0.5 logits, is
 * the scale. The calibration's KV blocks are taken from the pool, never published to the
 * prefix cache, and freed before any request runs; its backend calls happen before the engine
 * snapshots the call counters, so engine stats do not include them. */
#include "engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CAL_SEQS 4
#define CAL_TOKENS 8
#define CAL_SCALE 4.0f
#define CAL_FLOOR 1e-3f /* logits: below this a "tie" is a tie whatever the path */
#define CAL_CEIL 0.5f   /* the former fixed default */

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
		seqs[s] = (struct ds_fwd_seq){
		    .tokens = tok + (size_t)s * (size_t)n_tok,
		    .n_tokens = n_tok,
		    .pos0 = 0,
		    .blocks = kv[s].blocks,
		    .n_blocks = kv[s].n,
		    .all_rows = true,
		    .sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0},
		};
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
	for (size_t i = 0; i < rows * V; i++) {
		float d = fabsf(lg[DS_PATH_FAST][i] - lg[DS_PATH_REF][i]);
		if (isfinite(d) && d > delta)
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
