/* warmup.c - the engine's start-up warm-up (opts.warmup): forward passes of every size class
 * the scheduler will use, on every path the mode uses, before any request runs, so that
 * one-time costs land at start-up and not on the first requests: the CUDA backend autotunes
 * its GEMMs per M bucket on first use and captures a CUDA graph per batch bucket on second use
 * (decode on FAST, padded passes of up to 512 rows on REF, in buckets the backend names); a
 * first capture or autotune costs 50-500 ms on the H200, ten to a hundred times a steady step
 * (README, GPU section). This is what vLLM does when it captures its graphs at start-up.
 *
 * Key decisions: sizes are powers of two of tokens per pass, and the backend's own graph
 * buckets (ds_backend_warm_sizes), from 1 up to max(max_running, 512), each run twice (eager,
 * then capture), made of up to max_running sequences; then single passes of 1024, 2048, ...
 * up to the power of two above max_step_tokens (prefill chunks: autotuning only, no graphs).
 * KV blocks come from the pool and go back before any request; nothing is published to the
 * prefix cache; the passes happen before the engine snapshots the call counters, so stats do
 * not include them. A size the pool cannot hold is skipped, not an error. */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#define WARM_MIN_GRAPH_TOKENS 512 /* the CUDA backend graphs REF passes up to this size */

/* One pass of T tokens over n_seq sequences (T / n_seq each, one more for the first T % n_seq),
 * run reps times; skipped when the pool cannot hold it. */
static enum ds_status warm_pass(struct ds_engine *e, enum ds_path path, int n_seq, int T, int reps,
                                int32_t *tok, struct ds_kv_seq *kv, struct ds_fwd_seq *seqs,
                                struct ds_fwd_row *rows, struct ds_err *err)
{
	enum ds_status rv = DS_OK;
	int got = 0, at = 0;
	for (; got < n_seq; got++) {
		int n = T / n_seq + (got < T % n_seq);
		if (!ds_kv_seq_reserve(e->pool, &kv[got], n))
			break;
		seqs[got] = ds_engine_scratch_seq(tok + at, n, &kv[got], n > 1);
		at += n;
	}
	struct ds_fwd_batch b = {.path = path, .seqs = seqs, .n_seqs = got, .rows = rows};
	for (int r = 0; got == n_seq && r < reps && rv == DS_OK; r++)
		rv = ds_backend_forward(e->be, &b, err);
	for (int s = 0; s < got; s++)
		ds_kv_seq_release(e->pool, &kv[s]);
	return rv;
}

#define WARM_MAX_SIZES 64

/* The graph-bucket sizes of a path up to top: the powers of two and the backend's own
 * (ds_backend_warm_sizes), ascending, without repeats; returns how many. */
static int warm_sizes(struct ds_engine *e, enum ds_path path, int top, int *out)
{
	int n = ds_backend_warm_sizes(e->be, path, out, WARM_MAX_SIZES / 2);
	for (int T = 1; T <= top && n < WARM_MAX_SIZES; T *= 2)
		out[n++] = T;
	/* insertion sort, dropping sizes above top and repeats */
	int k = 0;
	for (int i = 0; i < n; i++) {
		int v = out[i], j = k;
		if (v > top)
			continue;
		while (j > 0 && out[j - 1] > v)
			j--;
		if (j > 0 && out[j - 1] == v)
			continue;
		memmove(&out[j + 1], &out[j], (size_t)(k - j) * sizeof(int));
		out[j] = v;
		k++;
	}
	return k;
}

enum ds_status ds_engine_warmup(struct ds_engine *e, struct ds_err *err)
{
	const struct ds_model_config *c = &e->model->cfg;
	bool use[DS_N_PATHS] = {e->o.mode == DS_MODE_FAST || e->o.mode == DS_MODE_DVR,
	                        e->o.mode != DS_MODE_FAST};
	int max_seq = e->o.max_running;
	int top = DS_MAX(max_seq, WARM_MIN_GRAPH_TOKENS);
	top = DS_MIN(top, DS_MAX(e->o.max_step_tokens, max_seq));
	int biggest = DS_MAX(top, 2 * e->o.max_step_tokens);
	size_t n_tok = (size_t)biggest;
	int32_t *tok = malloc(n_tok * sizeof(int32_t));
	struct ds_kv_seq *kv = calloc((size_t)max_seq, sizeof(*kv));
	struct ds_fwd_seq *seqs = calloc((size_t)max_seq, sizeof(*seqs));
	struct ds_fwd_row *rows = malloc(n_tok * sizeof(*rows));
	enum ds_status rv = DS_OK;
	if (!tok || !kv || !seqs || !rows) {
		rv = ds_errf(err, DS_ERR_NOMEM, "engine: out of memory for the warm-up");
		goto out;
	}
	for (size_t i = 0; i < n_tok; i++)
		tok[i] = (int32_t)(ds_hash3(0x7761726dull, i, 1) % (uint64_t)c->vocab_size);
	for (int p = 0; p < DS_N_PATHS && rv == DS_OK; p++) {
		if (!use[p])
			continue;
		/* graph buckets: T tokens in min(T, max_running) sequences, twice */
		int sizes[WARM_MAX_SIZES];
		int n_sizes = warm_sizes(e, (enum ds_path)p, top, sizes);
		for (int i = 0; i < n_sizes && rv == DS_OK; i++) {
			int T = sizes[i], n_seq = DS_MIN(T, max_seq);
			if ((T + n_seq - 1) / n_seq > c->max_pos)
				break;
			rv = warm_pass(e, (enum ds_path)p, n_seq, T, 2, tok, kv, seqs, rows, err);
		}
		/* prefill chunks: one sequence, once (autotuning); up to the power of two above the
		 * budget, which a step reaches when ready windows overrun it */
		for (int T = 2 * top; T <= 2 * e->o.max_step_tokens && rv == DS_OK; T *= 2) {
			if (T > c->max_pos)
				break;
			rv = warm_pass(e, (enum ds_path)p, 1, T, 1, tok, kv, seqs, rows, err);
		}
	}
out:
	free(tok);
	free(kv);
	free(seqs);
	free(rows);
	return rv;
}
