/* test_engine_harness.c - scenario generation, running and the oracle check
 * (see test_engine_harness.h). */
#include "test_engine_harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

struct rng {
	uint64_t s;
};

static uint64_t rnext(struct rng *r)
{
	return ds_mix64(r->s += 0x9e3779b97f4a7c15ull);
}
static int rint_(struct rng *r, int lo, int hi)
{
	return lo + (int)(rnext(r) % (uint64_t)(hi - lo + 1));
}
static double runit(struct rng *r)
{
	return ds_hash_unit_open(rnext(r));
}

static bool failf(char *msg, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
	return false;
}

void scen_generate(struct scenario *s, uint64_t seed, const struct ds_model_config *cfg,
                   const struct scen_gen_opts *g)
{
	struct rng r = {seed * 0x2545f4914f6cdd1dull + 1};
	memset(s, 0, sizeof(*s));
	s->seed = seed;
	struct ds_engine_opts *o = &s->opts;
	ds_engine_opts_default(o);
	static const int groups[] = {1, 4, 16};
	static const int bsz[] = {4, 8, 16};
	static const int budgets[] = {8, 32, 512};
	static const int runs[] = {3, 16, 256};
	static const float margins[] = {0.0f, 0.05f, 0.3f};
	o->mode = runit(&r) < g->invariant_share ? DS_MODE_INVARIANT : DS_MODE_DVR;
	o->window = g->windows[rint_(&r, 0, g->n_windows - 1)];
	o->group = groups[rint_(&r, 0, 2)];
	o->inject_mismatch = g->inject >= 0 ? g->inject : (rnext(&r) & 1) ? 0.2 : 0.0;
	o->inject_seed = rnext(&r);
	o->margin_threshold = margins[rint_(&r, 0, 2)];
	o->kv_block_size = bsz[rint_(&r, 0, 2)];
	o->max_step_tokens = budgets[rint_(&r, 0, 2)];
	o->max_running = runs[rint_(&r, 0, 2)];
	o->prefix_cache = runit(&r) < 0.85;
	/* the step policy from its own draw (the stream above is unchanged): split, merge, auto
	 * with REF whenever a deterministic request runs (bias 0), auto on measured costs */
	static const enum ds_step_policy policies[4] = {DS_STEP_SPLIT, DS_STEP_MERGE, DS_STEP_AUTO,
	                                                DS_STEP_AUTO};
	int pol = (int)(ds_mix64(seed ^ 0x5e1ec7ull) % (g->windowed ? 2 : 4));
	o->step_policy = policies[pol];
	o->ref_step_bias = pol == 2 ? 0.0 : 1.0;
	o->window_auto = !g->windowed; /* windowed: a fixed W keeps the schedule timing-free */
	/* admission from a draw of its own too: arrival order, or deterministic requests first
	 * with an overtaking cap of 1, 4 or max_running (0) */
	static const int overtake[3] = {1, 4, 0};
	uint64_t ad = ds_mix64(seed ^ 0xad317ull);
	o->admit_policy = (ad & 1) ? DS_ADMIT_DET_FIRST : DS_ADMIT_FCFS;
	o->admit_max_overtake = overtake[(ad >> 1) % 3];

	/* shared prompt prefixes make prefix-cache hits */
	int32_t fam[3][SCEN_MAX_PROMPT];
	for (int f = 0; f < 3; f++)
		for (int i = 0; i < SCEN_MAX_PROMPT; i++)
			fam[f][i] = rint_(&r, 0, 255);
	s->n_req =
	    runit(&r) < 0.5 ? rint_(&r, 1, DS_MIN(8, g->n_req_max)) : rint_(&r, 1, g->n_req_max);
	s->req = calloc((size_t)s->n_req, sizeof(*s->req));
	DS_ASSERT(s->req);
	int max_need = 1;
	for (int i = 0; i < s->n_req; i++) {
		struct scen_req *q = &s->req[i];
		if (runit(&r) < 0.6) {
			const int32_t *f = fam[rint_(&r, 0, 2)];
			int n = rint_(&r, 1, 40);
			memcpy(q->prompt, f, (size_t)n * sizeof(int32_t));
			int extra = rint_(&r, 0, 8);
			for (int k = 0; k < extra; k++)
				q->prompt[n + k] = rint_(&r, 0, 255);
			q->n_prompt = n + extra;
		} else {
			q->n_prompt = rint_(&r, 1, 24);
			for (int k = 0; k < q->n_prompt; k++)
				q->prompt[k] = rint_(&r, 0, cfg->vocab_size - 1);
		}
		q->max_tokens = rint_(&r, 1, 32);
		q->det = runit(&r) < g->det_share;
		if (runit(&r) < 0.4) {
			q->sp = (struct ds_sample_params){.temperature = 0.0f, .top_p = 1.0f};
		} else {
			static const float temps[] = {0.7f, 1.0f, 1.3f};
			static const int topk[] = {0, 0, 8, 50};
			static const float topp[] = {1.0f, 1.0f, 0.9f, 0.5f};
			q->sp.temperature = temps[rint_(&r, 0, 2)];
			q->sp.top_k = topk[rint_(&r, 0, 3)];
			q->sp.top_p = topp[rint_(&r, 0, 3)];
		}
		q->has_seed = runit(&r) < 0.8;
		q->sp.seed = q->has_seed ? rnext(&r) : 0;
		q->early_verify = runit(&r) < 0.7;
		q->ignore_eos = runit(&r) < 0.5;
		if (runit(&r) < 0.25) {
			q->n_stop_ids = rint_(&r, 1, 2);
			for (int k = 0; k < q->n_stop_ids; k++)
				q->stop_ids[k] = rint_(&r, 0, cfg->vocab_size - 1);
		}
		if (runit(&r) < 0.15) {
			q->stop_seq_len = rint_(&r, 1, 2);
			for (int k = 0; k < q->stop_seq_len; k++)
				q->stop_seq[k] = rint_(&r, 0, cfg->vocab_size - 1);
		}
		if (i > 0 && runit(&r) < 0.2) {
			/* a clone of an earlier request (maybe longer): identical prompts hit the
			 * cache whole, and identical outputs share generated blocks */
			const struct scen_req *src = &s->req[rint_(&r, 0, i - 1)];
			int mt = q->max_tokens;
			if (src->follow < 0) {
				*q = *src;
				q->max_tokens = runit(&r) < 0.5 ? src->max_tokens : mt;
			}
		}
		q->arrive_step = rint_(&r, 0, 30);
		q->cancel_step = runit(&r) < 0.1 ? q->arrive_step + rint_(&r, 0, 20) : -1;
		q->follow = -1;
		int src = i > 0 ? rint_(&r, 0, i - 1) : -1;
		if (src >= 0 && runit(&r) < 0.15 && s->req[src].follow < 0) {
			q->follow = src;
			q->follow_min = rint_(&r, 1, 12);
			q->n_extra = rint_(&r, 1, 3);
			for (int k = 0; k < q->n_extra; k++)
				q->extra[k] = rint_(&r, 0, 255);
			q->arrive_step = -1;
			q->cancel_step = -1;
			/* the longest possible prompt */
			q->n_prompt =
			    s->req[q->follow].n_prompt + s->req[q->follow].max_tokens + q->n_extra;
		}
		int bs = o->kv_block_size;
		max_need = DS_MAX(max_need, (q->n_prompt + q->max_tokens + bs - 1) / bs);
	}
	/* small enough that concurrent traffic must be preempted */
	o->kv_blocks = max_need + rint_(&r, 0, 2 * max_need);
}

void scen_free(struct scenario *s)
{
	free(s->req);
	s->req = NULL;
}

static void fill_params(const struct scen_req *q, struct ds_request_params *p,
                        const int32_t *const *seqs)
{
	*p = (struct ds_request_params){
	    .prompt = q->prompt,
	    .n_prompt = q->n_prompt,
	    .max_tokens = q->max_tokens,
	    .sampling = q->sp,
	    .has_seed = q->has_seed,
	    .stop_ids = q->stop_ids,
	    .n_stop_ids = q->n_stop_ids,
	    .stop_seqs = q->stop_seq_len ? seqs : NULL,
	    .stop_seq_lens = q->stop_seq_len ? &q->stop_seq_len : NULL,
	    .n_stop_seqs = q->stop_seq_len ? 1 : 0,
	    .ignore_eos = q->ignore_eos,
	    .deterministic = q->det,
	    .early_verify = q->early_verify,
	    .return_logprobs = true,
	};
}

static void reset_obs(struct scen_req *q)
{
	q->n_out = q->n_final = 0;
	q->submitted = false;
	q->finish = DS_FINISH_NONE;
	q->fp[0] = 0;
	q->id = 0;
	q->first_step = -1;
}

/* Drains events into the requests (found by id); false on a protocol violation. */
static bool drain(struct ds_engine *e, struct scen_req **byid, uint64_t n_ids, char *msg,
                  size_t len)
{
	struct ds_event *ev;
	while ((ev = ds_engine_poll(e)) != NULL) {
		bool ok = true;
		struct scen_req *q =
		    ev->req_id >= 1 && ev->req_id <= n_ids ? byid[ev->req_id - 1] : NULL;
		if (!q)
			ok = failf(msg, len, "event for unknown request %llu",
			           (unsigned long long)ev->req_id);
		else if (q->n_final)
			ok = failf(msg, len, "event after the final one (request %llu)",
			           (unsigned long long)ev->req_id);
		else if (q->n_out + ev->n_tokens > q->max_tokens)
			ok = failf(msg, len, "request %llu: more than max_tokens",
			           (unsigned long long)ev->req_id);
		else if (ev->n_tokens && !ev->logprobs)
			ok = failf(msg, len, "request %llu: logprobs missing",
			           (unsigned long long)ev->req_id);
		if (ok) {
			memcpy(q->out + q->n_out, ev->tokens,
			       (size_t)ev->n_tokens * sizeof(int32_t));
			memcpy(q->lp + q->n_out, ev->logprobs,
			       (size_t)ev->n_tokens * sizeof(float));
			q->n_out += ev->n_tokens;
			if (ev->final) {
				q->n_final++;
				q->finish = ev->finish;
				q->seed = ev->seed;
				q->dvr = ev->dvr;
				memcpy(q->fp, ev->fingerprint, sizeof(q->fp));
				if (ev->finish == DS_FINISH_ERROR)
					ok = failf(msg, len, "request %llu failed: %s",
					           (unsigned long long)ev->req_id, ev->error);
				else if (ev->completion_tokens != q->n_out)
					ok = failf(
					    msg, len,
					    "request %llu: completion_tokens %d != %d streamed",
					    (unsigned long long)ev->req_id, ev->completion_tokens,
					    q->n_out);
				else if (q->det != (ev->fingerprint[0] != 0))
					ok = failf(msg, len,
					           "request %llu: fingerprint presence wrong",
					           (unsigned long long)ev->req_id);
			}
		}
		ds_event_free(ev);
		if (!ok)
			return false;
	}
	return true;
}

static bool kv_ok(struct ds_engine *e, char *msg, size_t len)
{
	struct ds_err err;
	if (ds_engine_kv_check(e, &err) != DS_OK)
		return failf(msg, len, "kv: %s", err.msg);
	return true;
}

bool scen_run(struct scenario *s, scen_backend_fn mk, void *arg, struct ds_engine_stats *stats,
              char *msg, size_t len)
{
	struct ds_backend be;
	struct ds_engine *e = NULL;
	struct ds_err err;
	bool ok = false;
	struct scen_req **byid = calloc((size_t)s->n_req, sizeof(*byid));
	DS_ASSERT(byid);
	if (mk(&be, arg, false, &err) != DS_OK) {
		free(byid);
		return failf(msg, len, "backend: %s", err.msg);
	}
	if (ds_engine_init(&e, &be, &s->opts, &err) != DS_OK) {
		failf(msg, len, "engine: %s", err.msg);
		goto out;
	}
	int n_sub = 0;
	for (int i = 0; i < s->n_req; i++)
		reset_obs(&s->req[i]);
	for (int step = 0;; step++) {
		for (int i = 0; i < s->n_req; i++) {
			struct scen_req *q = &s->req[i];
			if (q->follow >= 0 && !q->submitted) {
				const struct scen_req *src = &s->req[q->follow];
				if (src->submitted &&
				    (src->n_out >= q->follow_min || src->n_final)) {
					int n = src->n_prompt;
					memcpy(q->prompt, src->prompt, (size_t)n * sizeof(int32_t));
					memcpy(q->prompt + n, src->out,
					       (size_t)src->n_out * sizeof(int32_t));
					n += src->n_out;
					memcpy(q->prompt + n, q->extra,
					       (size_t)q->n_extra * sizeof(int32_t));
					q->n_prompt = n + q->n_extra;
					q->arrive_step = step;
				}
			}
			if (q->arrive_step == step && !q->submitted) {
				struct ds_request_params p;
				const int32_t *seqs[1] = {q->stop_seq};
				fill_params(q, &p, seqs);
				if (ds_engine_submit(e, &p, &q->id, &err) != DS_OK) {
					failf(msg, len, "submit %d: %s", i, err.msg);
					goto out;
				}
				q->submitted = true;
				DS_ASSERT(q->id == (uint64_t)n_sub + 1);
				byid[n_sub++] = q;
			}
			if (q->cancel_step == step && q->submitted)
				ds_engine_cancel(e, q->id);
		}
		if (ds_engine_step(e, &err) != DS_OK) {
			failf(msg, len, "step %d: %s", step, err.msg);
			goto out;
		}
		if (!drain(e, byid, (uint64_t)n_sub, msg, len) || !kv_ok(e, msg, len))
			goto out;
		for (int i = 0; i < s->n_req; i++)
			if (s->req[i].first_step < 0 && s->req[i].n_out > 0)
				s->req[i].first_step = step;
		if (n_sub == s->n_req && ds_engine_idle(e))
			break;
		if (step > 100000) {
			failf(msg, len, "no progress after %d steps", step);
			goto out;
		}
	}
	for (int i = 0; i < s->n_req; i++) {
		struct scen_req *q = &s->req[i];
		if (q->n_final != 1) {
			failf(msg, len, "request %d got %d final events", i, q->n_final);
			goto out;
		}
		if (q->cancel_step < 0 && q->finish == DS_FINISH_CANCELLED) {
			failf(msg, len, "request %d cancelled without a cancel", i);
			goto out;
		}
		if (q->finish == DS_FINISH_LENGTH && q->n_out != q->max_tokens) {
			failf(msg, len, "request %d: LENGTH after %d of %d tokens", i, q->n_out,
			      q->max_tokens);
			goto out;
		}
	}
	if (!kv_ok(e, msg, len))
		goto out;
	if (stats)
		ds_engine_get_stats(e, stats);
	ok = true;
out:
	ds_engine_free(e);
	ds_backend_free(&be);
	free(byid);
	return ok;
}

bool scen_run_one(struct ds_engine *e, struct scen_req *q, char *msg, size_t len)
{
	struct ds_request_params p;
	const int32_t *seqs[1] = {q->stop_seq};
	struct ds_err err;
	reset_obs(q);
	fill_params(q, &p, seqs);
	if (ds_engine_submit(e, &p, &q->id, &err) != DS_OK)
		return failf(msg, len, "submit: %s", err.msg);
	for (int step = 0; !ds_engine_idle(e); step++) {
		if (ds_engine_step(e, &err) != DS_OK)
			return failf(msg, len, "step: %s", err.msg);
		struct ds_event *ev;
		while ((ev = ds_engine_poll(e)) != NULL) {
			if (ev->req_id != q->id) {
				ds_event_free(ev);
				return failf(msg, len, "unexpected event id");
			}
			memcpy(q->out + q->n_out, ev->tokens,
			       (size_t)ev->n_tokens * sizeof(int32_t));
			if (ev->logprobs)
				memcpy(q->lp + q->n_out, ev->logprobs,
				       (size_t)ev->n_tokens * sizeof(float));
			q->n_out += ev->n_tokens;
			if (ev->final) {
				q->n_final++;
				q->finish = ev->finish;
				q->seed = ev->seed;
				q->dvr = ev->dvr;
				memcpy(q->fp, ev->fingerprint, sizeof(q->fp));
			}
			ds_event_free(ev);
		}
		if (step > 100000)
			return failf(msg, len, "no progress");
	}
	if (q->n_final != 1 || q->finish == DS_FINISH_ERROR)
		return failf(msg, len, "request ended badly (finish %d)", (int)q->finish);
	return kv_ok(e, msg, len);
}

bool scen_check_oracle(const struct scenario *s, scen_backend_fn mk, void *arg, char *msg,
                       size_t len)
{
	struct ds_backend be;
	struct ds_engine *e = NULL;
	struct ds_err err;
	struct ds_engine_opts o;
	ds_engine_opts_default(&o);
	o.mode = DS_MODE_REF_ONLY;
	o.prefix_cache = false; /* the oracle shares nothing between requests */
	o.kv_blocks = (SCEN_MAX_PROMPT + SCEN_MAX_OUT) / o.kv_block_size + 2;
	if (mk(&be, arg, true, &err) != DS_OK)
		return failf(msg, len, "oracle backend: %s", err.msg);
	bool ok = ds_engine_init(&e, &be, &o, &err) == DS_OK;
	if (!ok)
		failf(msg, len, "oracle engine: %s", err.msg);
	for (int i = 0; ok && i < s->n_req; i++) {
		const struct scen_req *q = &s->req[i];
		if (!q->det)
			continue;
		struct scen_req ref = *q;
		ref.sp.seed = q->seed; /* the seed the engine used (drawn when absent) */
		ref.has_seed = true;
		if (!scen_run_one(e, &ref, msg, len)) {
			ok = false;
			break;
		}
		bool cancelled = q->finish == DS_FINISH_CANCELLED;
		if (cancelled ? q->n_out > ref.n_out : q->n_out != ref.n_out)
			ok = failf(msg, len, "request %d: %d tokens, oracle %d (finish %d vs %d)",
			           i, q->n_out, ref.n_out, (int)q->finish, (int)ref.finish);
		for (int k = 0; ok && k < q->n_out; k++)
			if (q->out[k] != ref.out[k])
				ok = failf(msg, len, "request %d: token %d is %d, oracle %d", i, k,
				           q->out[k], ref.out[k]);
		if (ok && memcmp(q->lp, ref.lp, (size_t)q->n_out * sizeof(float)) != 0)
			ok = failf(msg, len, "request %d: logprobs differ from the oracle", i);
		if (ok && !cancelled && q->finish != ref.finish)
			ok = failf(msg, len, "request %d: finish %d, oracle %d", i, (int)q->finish,
			           (int)ref.finish);
		if (ok && !cancelled && strcmp(q->fp, ref.fp) != 0)
			ok = failf(msg, len, "request %d: fingerprint %s, oracle %s", i, q->fp,
			           ref.fp);
	}
	ds_engine_free(e);
	ds_backend_free(&be);
	return ok;
}
