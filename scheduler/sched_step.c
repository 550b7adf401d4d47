/* sched_step.c - one scheduler iteration: drain the inbox, admit, plan the REF pass(es) and one
 * FAST pass under a token budget (preempting the newest requests when KV runs out), run them,
 * then commit / roll back (DESIGN.md section 4) and emit events.
 *
 * Verification cadence: a REF pass at small M costs a full read of the weights, about one decode
 * step, so it must not run every step. When any DVR window is ready (full, early-verify or a
 * stop token) every other DVR request with at least one candidate joins the same pass (oldest
 * first, up to G windows per pass); all deterministic requests then restart their windows
 * together and fall into one shared cadence of about one REF pass per W+1 steps (see
 * select_verify for why joining costs no extra REF rows). Nobody waits for a full group.
 * When more than G windows are ready, ceil(ready/G) REF passes run in the same step rather than
 * leaving ready windows (and their requests) stalled for a step, which would split the cohort
 * into cadences out of phase.
 *
 * Step policy (engine.h): under the default (auto) and merge, a step with any REF work runs as
 * ONE REF pass for everyone instead of REF pass(es) plus a FAST pass: the second pass would
 * stream every weight again, and at large batches the reference kernels cost about what the
 * fast ones do. Auto also runs a step on REF when the measured pass costs (step_cost.c) say it
 * is no dearer than FAST plus the verification FAST would commit to; DVR requests then decode
 * on REF directly. Only the schedule changes: every committed deterministic token is still a
 * REF row's, on REF-written KV.
 *
 * Key decision: one uniform bookkeeping for every request: tokens[0, C) are committed,
 * tokens[C, L) are unverified fast candidates (DVR only), KV is written for [0, n_kv). A
 * "compute" runs tokens[n_kv, L) (chunked) and its last row produces the token at L; a
 * "verify" replays tokens[C-1, L) on REF with every row, so prefill, decode, resume after
 * preemption and verification all reduce to the same commit rule: a REF row for position C
 * either confirms the candidate there or replaces it, and everything after is dropped. */
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#define WINDOW_DECAY 0.9995 /* per verified window, for the rollback rate */

/* ---- lists ---- */

/* Whether a belongs before b: by arrival, or with det_ahead deterministic first. */
static bool goes_before(const struct ds_req *a, const struct ds_req *b, bool det_ahead)
{
	if (det_ahead && a->det != b->det)
		return a->det;
	return a->arrival < b->arrival;
}

/* Inserts r by arrival; with det_ahead (the running list under det-first admission) the
 * deterministic requests come before the others, each group by arrival. */
static void list_insert_sorted(struct ds_req ***arr, int *n, int *cap, struct ds_req *r,
                               bool det_ahead)
{
	if (*n == *cap) {
		int nc = *cap ? *cap * 2 : 16;
		struct ds_req **na = realloc(*arr, (size_t)nc * sizeof(**arr));
		if (!na)
			DS_ABORT("engine: out of memory for the request list");
		*arr = na;
		*cap = nc;
	}
	int i = *n;
	while (i > 0 && goes_before(r, (*arr)[i - 1], det_ahead)) {
		(*arr)[i] = (*arr)[i - 1];
		i--;
	}
	(*arr)[i] = r;
	(*n)++;
}

static void list_remove_at(struct ds_req **arr, int *n, int i)
{
	memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof(*arr));
	(*n)--;
}

static int list_find(struct ds_req **arr, int n, uint64_t id)
{
	for (int i = 0; i < n; i++)
		if (arr[i]->id == id)
			return i;
	return -1;
}

/* ---- inbox ---- */

static void drain_inbox(struct ds_engine *e)
{
	pthread_mutex_lock(&e->mu);
	struct ds_cmd *c = e->inbox_head;
	e->inbox_head = e->inbox_tail = NULL;
	pthread_mutex_unlock(&e->mu);
	while (c) {
		struct ds_cmd *next = c->next;
		if (c->kind == CMD_SUBMIT) {
			list_insert_sorted(&e->waiting, &e->n_waiting, &e->cap_waiting, c->req,
			                   false);
		} else {
			int wi = list_find(e->waiting, e->n_waiting, c->id);
			int ri = wi < 0 ? list_find(e->running, e->n_running, c->id) : -1;
			struct ds_req *r = wi >= 0   ? e->waiting[wi]
			                   : ri >= 0 ? e->running[ri]
			                             : NULL;
			if (r && c->kind == CMD_PAUSE) {
				r->paused = c->flag;
			} else if (r && c->kind == CMD_CANCEL) {
				if (wi >= 0) {
					list_remove_at(e->waiting, &e->n_waiting, wi);
					pthread_mutex_lock(&e->mu);
					e->n_queued--;
					pthread_mutex_unlock(&e->mu);
				} else {
					list_remove_at(e->running, &e->n_running, ri);
				}
				r->finish = DS_FINISH_CANCELLED;
				r->status = DS_ERR_CANCELLED;
				r->L = r->C;
				ds_engine_retire(e, r);
			}
		}
		free(c);
		c = next;
	}
}

/* ---- admission and preemption ---- */

static int req_prefix_limit(const struct ds_engine *e, const struct ds_req *r)
{
	/* leave at least the last known token to compute: its row yields the next token, and
	 * it keeps writes out of shared blocks */
	return (r->C - 1) / e->o.kv_block_size;
}

/* Det-first admission in force: DVR mode (elsewhere every request runs on one path). */
static bool det_first(const struct ds_engine *e)
{
	return e->o.admit_policy == DS_ADMIT_DET_FIRST && e->o.mode == DS_MODE_DVR;
}

/* The waiting request a free slot takes: the first in arrival order, or under det-first
 * admission (DVR mode) the first deterministic one, unless the first in line is not to be
 * overtaken again. */
static int admit_pick(const struct ds_engine *e)
{
	if (!det_first(e))
		return 0;
	int cap = e->o.admit_max_overtake > 0 ? e->o.admit_max_overtake : e->o.max_running;
	if (e->waiting[0]->det || e->waiting[0]->overtaken >= cap)
		return 0;
	for (int i = 1; i < e->n_waiting; i++)
		if (e->waiting[i]->det)
			return i;
	return 0;
}

static void admit(struct ds_engine *e)
{
	int bs = e->o.kv_block_size;
	while (e->n_waiting > 0 && e->n_running < e->o.max_running) {
		int wi = admit_pick(e);
		struct ds_req *r = e->waiting[wi];
		DS_ASSERT(r->kv.n == 0 && r->L == r->C);
		int hit = 0;
		if (e->o.prefix_cache)
			hit = ds_kv_seq_match(e->pool, &r->kv, r->tokens, r->C,
			                      req_prefix_limit(e, r), r->det);
		int need = (r->C + bs - 1) / bs - r->kv.n;
		if (need > ds_kv_pool_n_free(e->pool)) {
			ds_kv_seq_release(e->pool, &r->kv);
			break; /* the pick waits for room: nobody overtakes it */
		}
		r->n_kv = hit;
		e->st.prefix_hit_tokens += (uint64_t)hit;
		for (int i = 0; i < wi; i++) /* all of them non-deterministic (admit_pick) */
			e->waiting[i]->overtaken++;
		list_remove_at(e->waiting, &e->n_waiting, wi);
		pthread_mutex_lock(&e->mu);
		e->n_queued--;
		pthread_mutex_unlock(&e->mu);
		list_insert_sorted(&e->running, &e->n_running, &e->cap_running, r, det_first(e));
	}
}

static void preempt(struct ds_engine *e, int ri)
{
	struct ds_req *r = e->running[ri];
	list_remove_at(e->running, &e->n_running, ri);
	ds_kv_seq_release(e->pool, &r->kv);
	r->L = r->C; /* unverified candidates are dropped; committed tokens are recomputed */
	r->n_kv = 0;
	r->verify_now = false;
	r->low_margin = false;
	e->st.preemptions++;
	list_insert_sorted(&e->waiting, &e->n_waiting, &e->cap_waiting, r, false);
	pthread_mutex_lock(&e->mu);
	e->n_queued++;
	pthread_mutex_unlock(&e->mu);
}

/* ---- stop conditions ---- */

static enum ds_finish stop_check(const struct ds_engine *e, const struct ds_req *r, int p)
{
	int32_t t = r->tokens[p];
	const struct ds_model_config *c = &e->model->cfg;
	if (!r->ignore_eos)
		for (int i = 0; i < c->n_eos; i++)
			if (t == c->eos_ids[i])
				return DS_FINISH_EOS;
	for (int i = 0; i < r->n_stop_ids; i++)
		if (t == r->stop_ids[i])
			return DS_FINISH_EOS;
	int n_out = p + 1 - r->n_prompt;
	for (int i = 0; i < r->n_stop_seqs; i++) {
		int m = r->stop_seq_lens[i];
		if (m <= n_out && memcmp(r->tokens + p + 1 - m, r->stop_seqs[i],
		                         (size_t)m * sizeof(int32_t)) == 0)
			return DS_FINISH_STOP_SEQ;
	}
	if (n_out >= r->max_tokens)
		return DS_FINISH_LENGTH;
	return DS_FINISH_NONE;
}

static bool is_stop_token(const struct ds_engine *e, const struct ds_req *r, int32_t t)
{
	const struct ds_model_config *c = &e->model->cfg;
	for (int i = 0; !r->ignore_eos && i < c->n_eos; i++)
		if (t == c->eos_ids[i])
			return true;
	for (int i = 0; i < r->n_stop_ids; i++)
		if (t == r->stop_ids[i])
			return true;
	return false;
}

/* Commits token t with logprob lp at position C; returns true when the request finished. */
static bool commit_token(struct ds_engine *e, struct ds_req *r, int32_t t, float lp)
{
	DS_ASSERT(r->C < r->cap && r->C - r->n_prompt < r->max_tokens);
	r->tokens[r->C] = t;
	r->logprobs[r->C - r->n_prompt] = lp;
	if (r->det)
		ds_fp_update(&r->fp, &t, 1);
	r->C++;
	r->st.committed++;
	enum ds_finish f = stop_check(e, r, r->C - 1);
	if (f != DS_FINISH_NONE)
		r->finish = f;
	return f != DS_FINISH_NONE;
}

/* ---- planning ---- */

/* Candidates a DVR window may hold: W, but never so many that a full match plus the bonus
 * would pass max_tokens, nor more than a step's budget can verify. */
static int window_cap(const struct ds_engine *e, const struct ds_req *r)
{
	int remaining = r->max_tokens - (r->C - r->n_prompt);
	/* a window's verify pass (candidates + 1 rows) must fit one step's token budget */
	int w = DS_MIN(e->window, e->o.max_step_tokens - 1);
	return DS_MAX(0, DS_MIN(w, remaining - 1));
}

static bool window_ready(const struct ds_engine *e, const struct ds_req *r)
{
	return r->L - r->C >= window_cap(e, r) || r->verify_now || (r->low_margin && e->ev_on);
}

static uint64_t inject_hash(const struct ds_engine *e, const struct ds_req *r, uint64_t salt)
{
	return ds_hash3(e->o.inject_seed, r->id, r->st.windows * 4 + salt);
}

/* Study mode: corrupt one candidate of a fraction P of windows, decided by a hash of
 * (inject_seed, request id, window index), so a rollback happens at a random position. */
static void maybe_inject(struct ds_engine *e, struct ds_req *r)
{
	int k = r->L - r->C;
	if (e->o.inject_mismatch <= 0.0 || k < 1)
		return;
	double u = ds_hash_unit_open(inject_hash(e, r, 0));
	if (u >= e->o.inject_mismatch)
		return;
	int j = (int)(inject_hash(e, r, 1) % (uint64_t)k);
	int vocab = e->model->cfg.vocab_size;
	int32_t *t = &r->tokens[r->C + j];
	*t = (int32_t)(((int64_t)*t + 1 + (int64_t)(inject_hash(e, r, 2) % (uint64_t)(vocab - 1))) %
	               vocab);
}

static bool verify_eligible(const struct ds_req *r)
{
	return r->dvr && !r->paused && r->n_kv >= r->C - 1;
}

/* The window for this step (opts.window_auto): a REF step costs a premium p over a FAST step
 * (as a fraction of the step, measured: step_cost.c) once per window, a rollback wastes about
 * half a window of a request's steps, at a rate r per candidate (measured, decayed), so the
 * cost per token p / W + r W / 2 is least at W = sqrt(2 p / r), clamped to [4, W]. The prior
 * (r = 1/2000, p = 0.25 until measured) starts at W. The window decides only when candidates
 * are verified, never what is committed. */
static int pick_window(const struct ds_engine *e, int fast_tokens)
{
	int cap = e->o.window;
	if (!e->o.window_auto || e->o.step_policy == DS_STEP_SPLIT || e->o.mode != DS_MODE_DVR)
		return cap;
	int R = DS_MAX(1, fast_tokens);
	double cf, cr, p = 0.25;
	if (ds_step_cost_est(&e->cost, DS_PATH_FAST, R, &cf) &&
	    ds_step_cost_est(&e->cost, DS_PATH_REF, R, &cr) && cf > 0.0)
		p = DS_MIN(1.0, DS_MAX(0.02, cr / cf - 1.0));
	double r = (e->cand_rolled + 0.5) / (e->cand_seen + 1000.0);
	double w = sqrt(2.0 * p / r);
	int lo = DS_MIN(4, cap);
	return w >= cap ? cap : w <= lo ? lo : (int)lround(w);
}

/* The step's shape as FAST would run it (tokens capped by the budget; pending candidates and
 * proposals of the DVR requests that would verify); true when a DVR request must catch up on
 * REF (prefill, resume). */
static bool step_shape(const struct ds_engine *e, struct ds_step_shape *sh)
{
	bool catch_up = false;
	*sh = (struct ds_step_shape){0};
	for (int i = 0; i < e->n_running; i++) {
		const struct ds_req *r = e->running[i];
		if (r->paused)
			continue;
		catch_up |= r->dvr && r->n_kv < r->C - 1;
		sh->fast_tokens += r->L - r->n_kv;
		if (verify_eligible(r)) {
			sh->pending += r->L - r->C;
			sh->proposals++;
		}
	}
	sh->fast_tokens = DS_MIN(sh->fast_tokens, e->o.max_step_tokens);
	return catch_up;
}

/* Why a step runs on REF (stats: ref_steps_window, _early, _catchup, _cost). */
enum ds_ref_why { REF_WHY_WINDOW, REF_WHY_EARLY, REF_WHY_CATCHUP, REF_WHY_COST };

/* Does this DVR step run as one REF pass (step policy, engine.h)? Under merge and auto: when a
 * verification is due or a deterministic request must catch up on REF (prefill, resume), since
 * a separate REF pass would read every weight once more; under auto also when the measured
 * costs say the REF pass is no dearer than FAST plus the verification FAST would commit to.
 * *why: the first reason that held (n_full of the n_ready windows were full). */
static bool step_on_ref(const struct ds_engine *e, int n_ready, int n_full, bool catch_up,
                        const struct ds_step_shape *sh, int *why)
{
	if (e->o.mode != DS_MODE_DVR || e->o.step_policy == DS_STEP_SPLIT)
		return false;
	*why = n_full > 0 ? REF_WHY_WINDOW
	       : n_ready  ? REF_WHY_EARLY
	       : catch_up ? REF_WHY_CATCHUP
	                  : REF_WHY_COST;
	if (n_ready > 0 || catch_up)
		return true;
	if (e->o.step_policy != DS_STEP_AUTO || sh->proposals == 0)
		return false;
	return ds_step_cost_ref_now(&e->cost, sh, e->o.ref_step_bias);
}

/* Marks (r->vsel) the windows to verify this step: every ready one (full, early-verify or stop
 * token), then, oldest first, windows with at least one candidate until the passes the ready
 * ones need (ceil(ready/G)) are full, as far as the step's token budget has room left after
 * the ready windows and one token for every other running request (joining must never push a
 * ready window to the next step). Joining is free in REF rows: every candidate is verified
 * exactly once whatever the window size, and a joiner's step yields its bonus token from the
 * REF row instead of a FAST candidate; what it saves is passes, which cost a weight read each.
 * A step that runs on REF (step_on_ref) selects every DVR request: one with candidates verifies
 * them, one without decodes its next token on REF (a window of none: the bonus row). */
static void select_verify(struct ds_engine *e)
{
	/* Early verification buys latency and rollback waste with REF steps. When the engine is
	 * saturated (requests waiting, or the batch full) what costs is rows, not steps: a
	 * rolled-back candidate wastes one row, a REF step's premium over FAST is paid by every
	 * row of the step, so merge and auto verify at window boundaries only (split keeps early
	 * verification always: its REF passes leave the FAST rows alone). */
	e->ev_on = e->o.step_policy == DS_STEP_SPLIT ||
	           (e->n_waiting == 0 && e->n_running < e->o.max_running);
	struct ds_step_shape sh = {0};
	bool catch_up = e->o.mode == DS_MODE_DVR && step_shape(e, &sh);
	e->window = pick_window(e, sh.fast_tokens);
	sh.window = e->window;
	int n_ready = 0, n_full = 0, ready_rows = 0;
	for (int i = 0; i < e->n_running; i++) {
		struct ds_req *r = e->running[i];
		r->vsel = verify_eligible(r) && window_ready(e, r);
		n_ready += r->vsel;
		n_full += r->vsel && r->L - r->C >= window_cap(e, r);
		ready_rows += r->vsel ? r->L - r->C + 1 : 0;
	}
	e->ready_rows_left = ready_rows;
	e->step_ref = step_on_ref(e, n_ready, n_full, catch_up, &sh, &e->step_ref_why);
	if (e->step_ref) {
		for (int i = 0; i < e->n_running; i++)
			e->running[i]->vsel = verify_eligible(e->running[i]);
		return;
	}
	if (n_ready == 0)
		return;
	int room = (n_ready + e->o.group - 1) / e->o.group * e->o.group - n_ready;
	int spare = e->o.max_step_tokens - ready_rows - (e->n_running - n_ready);
	for (int i = 0; i < e->n_running && room > 0 && spare > 0; i++) {
		struct ds_req *r = e->running[i];
		int n = r->L - r->C + 1;
		if (!r->vsel && verify_eligible(r) && n >= 2 && n - 1 <= spare) {
			r->vsel = true;
			room--;
			spare -= n - 1; /* it would have taken one token to decode anyway */
		}
	}
}

/* Plans one request: which path, which tokens. Returns false when nothing is to be done. */
static bool plan_one(struct ds_engine *e, struct ds_req *r, int budget, int *n_verify,
                     enum ds_path *path, struct ds_plan_item *it)
{
	bool ref_all = e->o.mode == DS_MODE_INVARIANT || e->o.mode == DS_MODE_REF_ONLY;
	it->r = r;
	if (r->paused || budget <= 0)
		return false;
	if (r->vsel) {
		int n = r->L - r->C + 1;
		bool ready = window_ready(e, r);
		if (ready)
			e->ready_rows_left -= n;
		/* a joining window leaves the budget of the ready ones behind it alone */
		bool fits = ready ? n <= budget || budget >= e->o.max_step_tokens
		                  : n <= budget - e->ready_rows_left;
		if (fits) {
			it->kind = PLAN_VERIFY;
			it->pos0 = r->C - 1;
			it->n = n;
			it->pass = e->step_ref ? 0 : *n_verify / e->o.group;
			*path = DS_PATH_REF;
			return true;
		}
		/* a ready window waits for the next step rather than grow; so does one in a REF
		 * step (its candidates' KV is the fast path's: no REF decode on top of it) */
		if (ready || e->step_ref)
			return false;
		/* a window that only joined the cadence keeps decoding instead */
	}
	it->kind = PLAN_COMPUTE;
	it->pass = 0;
	it->pos0 = r->n_kv;
	it->n = DS_MIN(r->L - r->n_kv, budget);
	DS_ASSERT(it->n >= 1);
	/* DVR requests catch up (prefill, resume) on REF and propose on FAST; in a REF step
	 * everyone computes there (a DVR request gets here only to catch up) */
	DS_ASSERT(!(e->step_ref && r->dvr && r->L > r->C));
	*path = ref_all || e->step_ref || (r->dvr && r->n_kv < r->C - 1) ? DS_PATH_REF
	                                                                 : DS_PATH_FAST;
	return true;
}

static void plan(struct ds_engine *e)
{
	int budget = e->o.max_step_tokens;
	int n_verify = 0;
	e->n_plan[0] = e->n_plan[1] = 0;
	select_verify(e);
	for (int i = 0; i < e->n_running; i++) {
		struct ds_req *r = e->running[i];
		struct ds_plan_item it;
		enum ds_path path;
		if (!plan_one(e, r, budget, &n_verify, &path, &it))
			continue;
		if (it.kind == PLAN_VERIFY)
			maybe_inject(e, r);
		/* make room: preempt the unplanned requests from the running list's end (the newest;
		 * under det-first the non-deterministic ones first), this one last */
		bool self = false;
		while (!ds_kv_seq_reserve(e->pool, &r->kv, it.pos0 + it.n)) {
			int victim = e->n_running - 1;
			DS_ASSERT(victim >= i);
			if (victim == i) {
				self = true;
				break;
			}
			preempt(e, victim);
		}
		if (self) {
			preempt(e, i);
			break; /* everything after it was preempted already */
		}
		if (it.kind == PLAN_VERIFY)
			n_verify++;
		budget -= it.n;
		e->plan[path][e->n_plan[path]++] = it;
	}
	/* group the REF items by pass, keeping arrival order within a pass (insertion sort:
	 * stable, and the list is nearly sorted) */
	struct ds_plan_item *ref = e->plan[DS_PATH_REF];
	for (int i = 1; i < e->n_plan[DS_PATH_REF]; i++) {
		struct ds_plan_item x = ref[i];
		int j = i;
		while (j > 0 && ref[j - 1].pass > x.pass) {
			ref[j] = ref[j - 1];
			j--;
		}
		ref[j] = x;
	}
}

/* ---- forward ---- */

/* Runs plan items [i0, i1) of a path as one backend forward call, and records its wall time in
 * the pass-cost table (the call is synchronous: it returns sampled tokens). */
static enum ds_status run_pass(struct ds_engine *e, enum ds_path path, int i0, int i1,
                               struct ds_err *err)
{
	int n = i1 - i0;
	int rows = 0, tokens = 0;
	for (int i = 0; i < n; i++) {
		struct ds_plan_item *it = &e->plan[path][i0 + i];
		struct ds_req *r = it->r;
		bool all = it->kind == PLAN_VERIFY;
		e->seqs[i] = (struct ds_fwd_seq){
		    .tokens = r->tokens + it->pos0,
		    .n_tokens = it->n,
		    .pos0 = it->pos0,
		    .blocks = r->kv.blocks,
		    .n_blocks = r->kv.n,
		    .all_rows = all,
		    .sp = r->sp,
		    .mixed_kv = !r->det,
		};
		it->row0 = rows;
		rows += all ? it->n : 1;
		tokens += it->n;
	}
	if (rows > e->cap_rows) {
		struct ds_fwd_row *nr = realloc(e->rows, (size_t)rows * sizeof(*nr));
		if (!nr)
			return ds_errf(err, DS_ERR_NOMEM,
			               "engine: out of memory for %d output rows", rows);
		e->rows = nr;
		e->cap_rows = rows;
	}
	struct ds_fwd_batch b = {
	    .path = path, .seqs = e->seqs, .n_seqs = n, .rows = e->rows, .logits = NULL};
	uint64_t t0 = ds_engine_now_ns();
	enum ds_status rv = ds_backend_forward(e->be, &b, err);
	if (rv == DS_OK)
		ds_step_cost_add(&e->cost, path, tokens, (double)(ds_engine_now_ns() - t0) * 1e-9);
	return rv;
}

/* ---- commit / rollback ---- */

static void after_verify(struct ds_engine *e, struct ds_plan_item *it)
{
	struct ds_req *r = it->r;
	const struct ds_fwd_row *rows = e->rows + it->row0;
	int k = r->L - r->C; /* candidates; 0: a REF decode in a REF step */
	r->st.windows += k > 0;
	r->st.verify_passes++;
	r->st.recomputed += (uint64_t)it->n;
	r->verify_now = false;
	r->low_margin = false;
	/* compare by hash first; find the first mismatch only when they differ */
	int j = 0;
	int32_t ref[64], *refbuf = k <= 64 ? ref : malloc((size_t)k * sizeof(int32_t));
	if (!refbuf)
		DS_ABORT("engine: out of memory for a verify window");
	for (int i = 0; i < k; i++)
		refbuf[i] = rows[i].token;
	size_t bytes = (size_t)k * sizeof(int32_t);
	if (XXH3_64bits(refbuf, bytes) == XXH3_64bits(r->tokens + r->C, bytes) &&
	    memcmp(refbuf, r->tokens + r->C, bytes) == 0)
		j = k;
	else
		while (j < k && refbuf[j] == r->tokens[r->C + j])
			j++;
	if (refbuf != ref)
		free(refbuf);
	r->L = r->C; /* candidates become committed one by one below */
	bool done = false;
	int kept = 0;
	for (int i = 0; i < j && !done; i++, kept++)
		done = commit_token(e, r, rows[i].token, rows[i].logprob);
	if (!done)
		commit_token(e, r, rows[j].token, rows[j].logprob); /* r_j or the bonus */
	uint64_t dropped = (uint64_t)(k - kept);
	bool rollback = !done && j < k;
	r->st.rollbacks += rollback;
	r->st.rolled_back += dropped;
	e->st.windows += k > 0;
	e->st.ref_decoded += k == 0;
	/* the rollback rate per candidate for pick_window, decayed (~2000 windows of memory) */
	if (k > 0) {
		e->cand_seen = e->cand_seen * WINDOW_DECAY + (double)k;
		e->cand_rolled = e->cand_rolled * WINDOW_DECAY + (rollback ? 1.0 : 0.0);
	}
	e->st.rollbacks += rollback;
	e->st.rolled_back += dropped;
	e->st.recomputed += (uint64_t)it->n;
	r->L = r->C;
	/* REF rewrote the window's KV; only what the commits kept is valid */
	r->n_kv = r->C - 1;
	ds_kv_seq_truncate(e->pool, &r->kv, (r->C + e->o.kv_block_size - 1) / e->o.kv_block_size);
}

static void after_compute(struct ds_engine *e, enum ds_path path, struct ds_plan_item *it)
{
	struct ds_req *r = it->r;
	const struct ds_fwd_row *row = &e->rows[it->row0];
	int end = it->pos0 + it->n;
	if (path == DS_PATH_REF && r->det) {
		r->st.verify_passes++;
		if (it->pos0 < r->kv_hi) {
			uint64_t n = (uint64_t)(DS_MIN(end, r->kv_hi) - it->pos0);
			r->st.recomputed += n;
			e->st.recomputed += n;
		}
	}
	r->n_kv = end;
	r->kv_hi = DS_MAX(r->kv_hi, end);
	if (end < r->L)
		return; /* a prefill chunk: no output yet */
	if (r->dvr && path == DS_PATH_FAST) {
		/* a candidate: not committed, not streamed */
		r->tokens[r->L++] = row->token;
		if (r->early_verify && row->margin < e->margin_thr)
			r->low_margin = true;
		if (is_stop_token(e, r, row->token))
			r->verify_now = true; /* nothing after a stop can be kept */
		return;
	}
	commit_token(e, r, row->token, row->logprob);
	r->L = r->C;
}

static void fail_pass(struct ds_engine *e, enum ds_path path, int i0, int i1, enum ds_status rv,
                      const struct ds_err *err)
{
	for (int i = i0; i < i1; i++) {
		struct ds_req *r = e->plan[path][i].r;
		r->finish = DS_FINISH_ERROR;
		r->status = rv;
		snprintf(r->error, sizeof(r->error), "%.*s", (int)sizeof(r->error) - 1, err->msg);
	}
}

/* ---- the step ---- */

static void update_snapshot(struct ds_engine *e)
{
	e->st.ref_forward_calls = e->be->counters.calls[DS_PATH_REF] - e->calls0[DS_PATH_REF];
	e->st.fast_forward_calls = e->be->counters.calls[DS_PATH_FAST] - e->calls0[DS_PATH_FAST];
	e->st.running = e->n_running;
	e->st.window = e->window;
	e->st.kv_blocks_used = ds_kv_pool_n_used(e->pool);
	pthread_mutex_lock(&e->mu);
	e->st.waiting = e->n_queued; /* including those still in the inbox */
	e->snap = e->st;
	pthread_mutex_unlock(&e->mu);
}

enum ds_status ds_sched_step(struct ds_engine *e, struct ds_err *err)
{
	enum ds_status status = DS_OK;
	drain_inbox(e);
	admit(e);
	plan(e);
	e->did_work = e->n_plan[0] + e->n_plan[1] > 0;
	if (e->did_work) {
		e->st.steps++;
		e->st.ref_steps += e->step_ref;
		if (e->step_ref) {
			uint64_t *by[] = {&e->st.ref_steps_window, &e->st.ref_steps_early,
			                  &e->st.ref_steps_catchup, &e->st.ref_steps_cost};
			(*by[e->step_ref_why])++;
		}
	}
	/* REF first: verification and deterministic prefill */
	static const enum ds_path order[2] = {DS_PATH_REF, DS_PATH_FAST};
	for (int o = 0; o < 2; o++) {
		enum ds_path path = order[o];
		/* one forward call per pass: REF items are grouped by pass, FAST has one */
		for (int i0 = 0, i1; i0 < e->n_plan[path]; i0 = i1) {
			for (i1 = i0 + 1; i1 < e->n_plan[path] &&
			                  e->plan[path][i1].pass == e->plan[path][i0].pass;
			     i1++)
				;
			struct ds_err perr = {{0}};
			enum ds_status rv = run_pass(e, path, i0, i1, &perr);
			if (rv != DS_OK) {
				fail_pass(e, path, i0, i1, rv, &perr);
				if (status == DS_OK) {
					status = rv;
					if (err)
						*err = perr;
				}
				continue;
			}
			int n_verify = 0;
			for (int i = i0; i < i1; i++) {
				struct ds_plan_item *it = &e->plan[path][i];
				if (it->kind == PLAN_VERIFY) {
					after_verify(e, it);
					n_verify++;
				} else {
					after_compute(e, path, it);
				}
			}
			if (n_verify > 0)
				e->st.verify_passes++;
		}
	}
	/* publish stable full blocks, stream, retire */
	for (int i = 0; i < e->n_running;) {
		struct ds_req *r = e->running[i];
		if (r->finish == DS_FINISH_NONE && e->o.prefix_cache) {
			bool ref = r->dvr || e->o.mode == DS_MODE_INVARIANT ||
			           e->o.mode == DS_MODE_REF_ONLY;
			/* DVR: KV is reference-written for every committed position but the last */
			int stable = r->dvr ? DS_MIN(r->n_kv, r->C - 1) : r->n_kv;
			ds_kv_seq_publish(e->pool, &r->kv, r->tokens, stable, ref);
		}
		if (r->finish != DS_FINISH_NONE) {
			list_remove_at(e->running, &e->n_running, i);
			ds_engine_retire(e, r);
			continue;
		}
		ds_engine_emit(e, r);
		i++;
	}
	update_snapshot(e);
	return status;
}

void ds_sched_drop_all(struct ds_engine *e)
{
	drain_inbox(e);
	while (e->n_running > 0) {
		struct ds_req *r = e->running[--e->n_running];
		r->finish = DS_FINISH_ERROR;
		r->status = DS_ERR_CANCELLED;
		snprintf(r->error, sizeof(r->error), "engine shut down");
		ds_engine_retire(e, r);
	}
	while (e->n_waiting > 0) {
		struct ds_req *r = e->waiting[--e->n_waiting];
		r->finish = DS_FINISH_ERROR;
		r->status = DS_ERR_CANCELLED;
		snprintf(r->error, sizeof(r->error), "engine shut down");
		ds_engine_retire(e, r);
	}
}
