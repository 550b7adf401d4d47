/* test_engine_cadence.c - the cost side of DVR: deterministic requests share one verification
 * cadence (about one REF pass per W+1 steps, not one per step, also when they arrive at
 * different steps), more than G ready windows run as several REF passes in the same step
 * without stalling anyone, an early-verify window takes the others along, and the "auto"
 * early-verify threshold is calibrated from the measured fast-vs-reference logit difference (an
 * explicit value overrides it). Every scenario's outputs are also checked bit for bit against the
 * ref-only oracle: the cadence changes only when windows are verified, never what is committed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "engine_test_util.h"
#include "test_engine_mockbe.h"
#include "test_engine_harness.h"

/* the mock's noise starts at 0; each test sets the noise it needs */
static int setup(void **state)
{
	return etu_setup(state, 0.0f);
}

/* n deterministic requests of max_tokens each, arriving `stagger` steps apart, prompts of
 * different lengths, no early verification (the cadence alone is under test). */
static void make_scenario(struct scenario *s, int n, int max_tokens, int stagger, int W, int G)
{
	memset(s, 0, sizeof(*s));
	ds_engine_opts_default(&s->opts);
	s->opts.window = W;
	s->opts.group = G;
	s->opts.step_policy = DS_STEP_SPLIT; /* the cadence of separate REF passes is under test */
	s->opts.margin_threshold = 0.0f;
	s->opts.kv_blocks = 256;
	s->n_req = n;
	s->req = calloc((size_t)n, sizeof(*s->req));
	assert_non_null(s->req);
	for (int i = 0; i < n; i++) {
		struct scen_req *q = &s->req[i];
		q->n_prompt = 6 + (i * 5) % 17;
		for (int k = 0; k < q->n_prompt; k++)
			q->prompt[k] = (int32_t)((k * 37 + i * 11 + 3) % 200);
		q->max_tokens = max_tokens;
		q->det = true;
		q->sp = (struct ds_sample_params){
		    .temperature = i % 2 ? 0.8f : 0.0f, .top_p = 1.0f, .seed = 100 + (uint64_t)i};
		q->has_seed = true;
		q->early_verify = false;
		q->ignore_eos = true;
		q->cancel_step = -1;
		q->follow = -1;
		q->arrive_step = i * stagger;
	}
}

static void run_and_check(struct etu_fixture *f, struct scenario *s, scen_backend_fn mk,
                          struct ds_engine_stats *st)
{
	char msg[512];
	if (!scen_run(s, mk, f, st, msg, sizeof(msg)))
		fail_msg("run: %s", msg);
	if (!scen_check_oracle(s, mk, f, msg, sizeof(msg)))
		fail_msg("oracle: %s", msg);
	assert_int_equal(f->bad_reads, 0);
}

/* Lock-step requests: REF passes ~ steps / (W+1), not ~ steps. */
static void test_cadence_lockstep(void **state)
{
	struct etu_fixture *f = *state;
	f->noise = 0.0f;
	struct scenario s;
	const int N = 8, T = 48, W = 4;
	make_scenario(&s, N, T, 0, W, 16);
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_mock, &st);
	print_message("lock-step: %d det x %d tokens, W=%d: %llu steps, %llu REF calls, "
	              "%llu verify passes, %llu windows\n",
	              N, T, W, (unsigned long long)st.steps,
	              (unsigned long long)st.ref_forward_calls,
	              (unsigned long long)st.verify_passes, (unsigned long long)st.windows);
	assert_int_equal(st.tokens[1], (uint64_t)(N * T));
	/* the prompts prefill on REF in the first step; after that one pass per window */
	assert_true(st.verify_passes <= st.steps / (uint64_t)(W + 1) + 2);
	assert_true(st.ref_forward_calls <= st.verify_passes + 1);
	/* and every pass carries (nearly) every request's window */
	assert_true(st.windows >= (uint64_t)N * (st.verify_passes - 1));
	scen_free(&s);
}

/* Staggered arrivals: without a shared cadence each request's windows would fall ready at its
 * own steps and a REF pass would run almost every step. */
static void test_cadence_staggered(void **state)
{
	struct etu_fixture *f = *state;
	struct scenario s;
	const int N = 8, T = 48, W = 4;
	for (int noisy = 0; noisy < 2; noisy++) {
		f->noise = noisy ? 0.05f : 0.0f; /* with rollbacks too */
		make_scenario(&s, N, T, 1, W, 16);
		struct ds_engine_stats st;
		run_and_check(f, &s, etu_mk_mock, &st);
		print_message("staggered (noise %.2f): %llu steps, %llu REF calls, %llu verify "
		              "passes, %llu windows, %llu rollbacks\n",
		              (double)f->noise, (unsigned long long)st.steps,
		              (unsigned long long)st.ref_forward_calls,
		              (unsigned long long)st.verify_passes, (unsigned long long)st.windows,
		              (unsigned long long)st.rollbacks);
		assert_int_equal(st.tokens[1], (uint64_t)(N * T));
		if (noisy)
			assert_true(st.rollbacks > 0);
		/* one pass per W+1 steps, plus the joins of late arrivals and the tails */
		uint64_t bound = st.steps / (uint64_t)(W + 1) + (uint64_t)N;
		assert_true(st.verify_passes <= bound);
		/* REF calls: the verify passes plus at most one prefill per arrival */
		assert_true(st.ref_forward_calls <= st.verify_passes + (uint64_t)N);
		scen_free(&s);
	}
}

/* More ready windows than G: several REF passes in the same step, nobody stalls. */
static void test_cadence_multi_pass(void **state)
{
	struct etu_fixture *f = *state;
	f->noise = 0.0f;
	struct scenario s;
	const int N = 12, T = 40, W = 4, G = 4;
	make_scenario(&s, N, T, 0, W, G);
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_mock, &st);
	print_message("multi-pass: %d det, G=%d: %llu steps, %llu verify passes, %llu windows\n", N,
	              G, (unsigned long long)st.steps, (unsigned long long)st.verify_passes,
	              (unsigned long long)st.windows);
	uint64_t per = (uint64_t)((N + G - 1) / G);
	/* every verify step runs ceil(N/G) passes of G windows */
	assert_int_equal(st.verify_passes % per, 0);
	assert_true(st.windows >= (uint64_t)G * (st.verify_passes - per));
	/* no stall: one committed token per request per step (prefill step + T) plus the passes */
	assert_true(st.steps <= (uint64_t)T + 2);
	scen_free(&s);
}

/* An early-verify window is verified at once and the others join it: one request that
 * verifies every token must not add passes of its own to the cadence (the joiners' bonus
 * tokens come from the REF rows, so joining costs no extra rows). */
static void test_early_verify_joins(void **state)
{
	struct etu_fixture *f = *state;
	f->noise = 0.0f;
	struct scenario s;
	const int N = 6, T = 40, W = 8;
	make_scenario(&s, N, T, 0, W, 16);
	s.opts.margin_threshold = 1e9f; /* every candidate is "low margin" */
	s.req[0].early_verify = true;
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_mock, &st);
	print_message("early joins: %llu steps, %llu verify passes; req 0: %llu windows, req 1: "
	              "%llu\n",
	              (unsigned long long)st.steps, (unsigned long long)st.verify_passes,
	              (unsigned long long)s.req[0].dvr.windows,
	              (unsigned long long)s.req[1].dvr.windows);
	assert_true(s.req[0].dvr.windows >= (uint64_t)T / 2 - 1); /* 1 candidate + bonus */
	assert_true(st.verify_passes <= st.steps / 2 + 1);
	/* REF rows: one per committed token (plus the prompts), whatever the windows */
	uint64_t prompts = 0;
	for (int i = 0; i < N; i++)
		prompts += (uint64_t)s.req[i].n_prompt;
	assert_true(st.recomputed <= st.tokens[1] + prompts);
	scen_free(&s);
}

/* Ready windows that overflow the step's token budget: the ones left over wait a step, and
 * joiners must not take their budget or churn through tiny windows; the cadence re-forms. */
static void test_cadence_budget(void **state)
{
	struct etu_fixture *f = *state;
	f->noise = 0.0f;
	struct scenario s;
	const int N = 12, T = 40, W = 4;
	make_scenario(&s, N, T, 0, W, 16);
	s.opts.max_step_tokens = 24; /* 4 full windows of W+1 rows, plus decode tokens */
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_mock, &st);
	print_message("budget 24: %d det: %llu steps, %llu verify passes, %llu windows\n", N,
	              (unsigned long long)st.steps, (unsigned long long)st.verify_passes,
	              (unsigned long long)st.windows);
	/* windows stay (nearly) full: about T/W per request, not one per step */
	assert_true(st.windows <= (uint64_t)(N * (T / W + 2)));
	scen_free(&s);
}

/* The REF-step breakdown adds up: every REF step has exactly one reason. */
static void assert_ref_why_sums(const struct ds_engine_stats *st)
{
	assert_int_equal(st->ref_steps_window + st->ref_steps_early + st->ref_steps_catchup +
	                     st->ref_steps_cost,
	                 st->ref_steps);
}

/* Merge policy: a step with a verification due (or a deterministic prefill) runs as ONE REF
 * pass with everybody in it (no second, FAST pass that would read every weight again); other
 * steps run one FAST pass. Half the requests are not deterministic; noise makes rollbacks. */
static void test_merge_one_pass(void **state)
{
	struct etu_fixture *f = *state;
	f->noise = 0.05f;
	struct scenario s;
	const int N = 8, T = 40, W = 4;
	make_scenario(&s, N, T, 1, W, 2);
	s.opts.step_policy = DS_STEP_MERGE;
	for (int i = 0; i < N; i++)
		s.req[i].det = i % 2 == 0;
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_mock, &st);
	print_message("merge: %llu steps, %llu REF steps, %llu REF calls, %llu FAST calls, %llu "
	              "windows, %llu rollbacks, %llu decoded on REF\n",
	              (unsigned long long)st.steps, (unsigned long long)st.ref_steps,
	              (unsigned long long)st.ref_forward_calls,
	              (unsigned long long)st.fast_forward_calls, (unsigned long long)st.windows,
	              (unsigned long long)st.rollbacks, (unsigned long long)st.ref_decoded);
	/* one forward call per step, on one path (G = 2 would split 4 windows into 2 passes) */
	assert_int_equal(st.ref_forward_calls + st.fast_forward_calls, st.steps);
	assert_int_equal(st.ref_forward_calls, st.ref_steps);
	assert_true(st.ref_steps > 0 && st.fast_forward_calls > 0);
	assert_true(st.windows > 0 && st.rollbacks > 0);
	assert_int_equal(st.tokens[0] + st.tokens[1], (uint64_t)(N * T));
	/* full windows and the first deterministic prefill (step 0: nothing else due) made REF
	 * steps; merge never runs one for cost */
	assert_ref_why_sums(&st);
	assert_true(st.ref_steps_window > 0 && st.ref_steps_catchup > 0);
	assert_int_equal(st.ref_steps_cost, 0);
	scen_free(&s);
}

/* Auto with bias 0 (REF counts as free): every step that holds a deterministic request runs on
 * REF, so those requests never propose on FAST: no windows, no rollbacks even with a noisy fast
 * path, every output token after the prefill's decoded on REF directly. */
static void test_auto_ref_when_cheap(void **state)
{
	struct etu_fixture *f = *state;
	f->noise = 0.05f;
	struct scenario s;
	const int N = 6, T = 30, W = 8;
	make_scenario(&s, N, T, 2, W, 16);
	s.opts.step_policy = DS_STEP_AUTO;
	s.opts.ref_step_bias = 0.0;
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_mock, &st);
	print_message("auto, bias 0: %llu steps, %llu REF steps, %llu decoded on REF\n",
	              (unsigned long long)st.steps, (unsigned long long)st.ref_steps,
	              (unsigned long long)st.ref_decoded);
	assert_int_equal(st.windows, 0);
	assert_int_equal(st.rollbacks, 0);
	assert_int_equal(st.fast_forward_calls, 0);
	assert_int_equal(st.ref_steps, st.steps);
	assert_int_equal(st.ref_decoded, (uint64_t)(N * (T - 1))); /* token 1 comes from prefill */
	/* no candidate is ever proposed: past the prefills the costs chose REF, except where a
	 * request's last token leaves it a window cap of 0 (due with no candidates: at most one
	 * step per request) */
	assert_ref_why_sums(&st);
	assert_int_equal(st.ref_steps_early, 0);
	assert_true(st.ref_steps_window <= (uint64_t)N);
	assert_true(st.ref_steps_cost > 0 && st.ref_steps_catchup > 0);
	scen_free(&s);
}

/* The order in which the requests of s got their first token (their admission order, with one
 * running at a time), as a string of request indices. */
static void first_order(const struct scenario *s, char *out)
{
	for (int k = 0; k < s->n_req; k++) {
		int best = -1;
		for (int i = 0; i < s->n_req; i++) {
			bool used = false;
			for (int j = 0; j < k; j++)
				used |= out[j] == (char)('0' + i);
			if (!used && (best < 0 || s->req[i].first_step < s->req[best].first_step))
				best = i;
		}
		assert_true(best >= 0 && s->req[best].first_step >= 0);
		out[k] = (char)('0' + best);
	}
	out[s->n_req] = '\0';
}

/* Runs `pattern` ('d' deterministic, 'n' not; all arriving at once, one running at a time, auto
 * with REF whenever a deterministic request runs) under an admission policy; checks the
 * oracle and returns the admission order in `order`. */
static void run_admit(struct etu_fixture *f, const char *pattern, enum ds_admit_policy pol, int cap,
                      int max_running, int budget, char *order)
{
	struct scenario s;
	int n = (int)strlen(pattern);
	make_scenario(&s, n, 6, 0, 4, 16);
	s.opts.step_policy = DS_STEP_AUTO;
	s.opts.ref_step_bias = 0.0;
	s.opts.max_running = max_running;
	s.opts.max_step_tokens = budget;
	s.opts.admit_policy = pol;
	s.opts.admit_max_overtake = cap;
	for (int i = 0; i < n; i++)
		s.req[i].det = pattern[i] == 'd';
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_mock, &st);
	first_order(&s, order);
	scen_free(&s);
}

/* Det-first admission takes the deterministic requests ahead of the others, each waiting
 * request overtaken at most admit_max_overtake times (0: max_running), and gives the running
 * ones the step's budget first, so they run in the same steps: fewer REF steps for the same
 * outputs (the oracle check in run_admit). FCFS keeps arrival order. */
static void test_admit_det_first(void **state)
{
	struct etu_fixture *f = *state;
	f->noise = 0.05f;
	char order[16];
	run_admit(f, "ndddn", DS_ADMIT_FCFS, 0, 1, 512, order);
	assert_string_equal(order, "01234");
	run_admit(f, "ndddn", DS_ADMIT_DET_FIRST, 100, 1, 512, order);
	assert_string_equal(order, "12304");
	run_admit(f, "ndddn", DS_ADMIT_DET_FIRST, 2, 1, 512, order);
	assert_string_equal(order, "12034");
	run_admit(f, "ndddn", DS_ADMIT_DET_FIRST, 0, 1, 512, order); /* the cap: max_running */
	assert_string_equal(order, "10234");
	/* all four running at once on a budget of 8 tokens a step (prompts of 6, 11, 16, 21):
	 * the running deterministic requests' prefill chunks go first */
	run_admit(f, "nndd", DS_ADMIT_FCFS, 0, 4, 8, order);
	print_message("budget 8, fcfs: %s\n", order);
	assert_string_equal(order, "0123");
	run_admit(f, "nndd", DS_ADMIT_DET_FIRST, 0, 4, 8, order);
	print_message("budget 8, det-first: %s\n", order);
	assert_string_equal(order, "2301");

	/* two at a time, a deterministic request in each pair under FCFS: every step is REF;
	 * det-first pairs the deterministic requests and halves the REF steps */
	struct scenario s;
	uint64_t ref[2];
	for (int k = 0; k < 2; k++) {
		make_scenario(&s, 4, 12, 0, 4, 16);
		s.opts.step_policy = DS_STEP_AUTO;
		s.opts.ref_step_bias = 0.0;
		s.opts.max_running = 2;
		s.opts.admit_policy = k ? DS_ADMIT_DET_FIRST : DS_ADMIT_FCFS;
		for (int i = 0; i < 4; i++)
			s.req[i].det = i == 0 || i == 2;
		struct ds_engine_stats st;
		run_and_check(f, &s, etu_mk_mock, &st);
		ref[k] = st.ref_steps;
		print_message("%s: %llu steps, %llu REF steps\n", k ? "det-first" : "fcfs",
		              (unsigned long long)st.steps, (unsigned long long)st.ref_steps);
		scen_free(&s);
	}
	assert_true(ref[1] * 3 <= ref[0] * 2);
}

/* Merge/auto verify early only when the engine has room: with requests waiting (or the batch
 * full) a low-margin candidate waits for its window to fill. 7 requests, 4 slots, every
 * candidate "low margin": the first 4 run saturated (3 waiting): windows of W; the last 3 run
 * with a free slot and nobody waiting: a window per candidate. */
static void test_early_verify_gate(void **state)
{
	struct etu_fixture *f = *state;
	f->noise = 0.0f;
	struct scenario s;
	const int N = 7, T = 40, W = 8;
	make_scenario(&s, N, T, 0, W, 16);
	s.opts.step_policy = DS_STEP_MERGE;
	s.opts.max_running = 4;
	s.opts.margin_threshold = 1e9f;
	for (int i = 0; i < N; i++)
		s.req[i].early_verify = true;
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_mock, &st);
	print_message("early-verify gate: windows per request %llu %llu %llu %llu | %llu %llu %llu\n",
	              (unsigned long long)s.req[0].dvr.windows,
	              (unsigned long long)s.req[1].dvr.windows,
	              (unsigned long long)s.req[2].dvr.windows,
	              (unsigned long long)s.req[3].dvr.windows,
	              (unsigned long long)s.req[4].dvr.windows,
	              (unsigned long long)s.req[5].dvr.windows,
	              (unsigned long long)s.req[6].dvr.windows);
	for (int i = 0; i < 4; i++)
		assert_true(s.req[i].dvr.windows <= (uint64_t)(T / W + 2));
	for (int i = 4; i < N; i++)
		assert_true(s.req[i].dvr.windows >= (uint64_t)(T / 2 - 2));
	/* the last three's windows of one candidate were early verifications */
	assert_ref_why_sums(&st);
	assert_true(st.ref_steps_early > 0 && st.ref_steps_window > 0);
	scen_free(&s);
}

/* The real (batch-variant) CPU fast path, staggered, with injection: oracle-equal. */
static void test_cadence_cpu_oracle(void **state)
{
	struct etu_fixture *f = *state;
	struct scenario s;
	make_scenario(&s, 6, 24, 2, 8, 4);
	s.opts.inject_mismatch = 0.2;
	s.opts.inject_seed = 7;
	for (int i = 0; i < s.n_req; i++)
		s.req[i].early_verify = true;
	s.opts.margin_threshold = -1.0f; /* auto */
	struct ds_engine_stats st;
	run_and_check(f, &s, etu_mk_cpu1, &st);
	assert_true(st.rollbacks > 0);
	assert_true(st.margin_threshold >= 1e-3f && st.margin_threshold <= 0.5f);
	scen_free(&s);
}

static void test_margin_calibration(void **state)
{
	struct etu_fixture *f = *state;
	struct etu_rig r;
	etu_rig_init(&r, f);
	struct ds_engine_stats st;
	assert_true(r.o.margin_threshold < 0.0f); /* auto is the default */

	/* CPU backend: a tiny but real discrepancy, threshold = clamp(1.5 delta) where delta is
	 * the largest error of a fast top-1 vs top-2..8 gap (scheduler/calibrate.c) */
	etu_rig_start(&r, etu_mk_cpu1);
	ds_engine_get_stats(r.e, &st);
	print_message("cpu tiny: delta %.3g -> threshold %.3g\n", (double)st.margin_delta,
	              (double)st.margin_threshold);
	assert_true(st.margin_delta >= 0.0f && st.margin_delta < 0.1f);
	assert_true(st.margin_threshold == fminf(fmaxf(1.5f * st.margin_delta, 1e-3f), 0.5f));
	assert_true(r.be.counters.calls[DS_PATH_REF] == 1 &&
	            r.be.counters.calls[DS_PATH_FAST] == 1);
	assert_int_equal(st.ref_forward_calls, 0); /* not counted as request work */
	etu_rig_stop(&r);

	/* mock with a known fast-path perturbation, uniform in +-0.05 per logit: a gap error is a
	 * difference of two such, so at most 0.1, and 224 samples come close to it */
	f->noise = 0.05f;
	etu_rig_start(&r, etu_mk_mock);
	ds_engine_get_stats(r.e, &st);
	print_message("mock noise 0.05: delta %.3g -> threshold %.3g\n", (double)st.margin_delta,
	              (double)st.margin_threshold);
	assert_true(st.margin_delta > 0.05f && st.margin_delta <= 0.1f * 1.01f);
	assert_true(fabsf(st.margin_threshold - 1.5f * st.margin_delta) < 1e-6f);
	etu_rig_stop(&r);

	/* identical paths: the floor */
	f->noise = 0.0f;
	etu_rig_start(&r, etu_mk_mock);
	ds_engine_get_stats(r.e, &st);
	assert_true(st.margin_delta == 0.0f && st.margin_threshold == 1e-3f);
	etu_rig_stop(&r);

	/* explicit overrides; no calibration */
	r.o.margin_threshold = 0.3f;
	etu_rig_start(&r, etu_mk_mock);
	ds_engine_get_stats(r.e, &st);
	assert_true(st.margin_threshold == 0.3f && st.margin_delta == -1.0f);
	assert_true(r.be.counters.calls[DS_PATH_REF] == 0);
	etu_rig_stop(&r);

	/* fast mode never calibrates (the threshold is unused there) */
	r.o.margin_threshold = -1.0f;
	r.o.mode = DS_MODE_FAST;
	etu_rig_start(&r, etu_mk_mock);
	assert_true(r.be.counters.calls[DS_PATH_REF] == 0 &&
	            r.be.counters.calls[DS_PATH_FAST] == 0);
	etu_rig_stop(&r);

	/* NaN is an error */
	r.o.margin_threshold = NAN;
	r.o.mode = DS_MODE_DVR;
	r.err = (struct ds_err){0}; /* the message checked below is this init's */
	assert_int_equal(etu_mk_mock(&r.be, f, false, &r.err), DS_OK);
	assert_int_equal(ds_engine_init(&r.e, &r.be, &r.o, &r.err), DS_ERR_INVALID);
	assert_non_null(strstr(r.err.msg, "margin_threshold"));
	ds_backend_free(&r.be);
}

/* window_auto: with a noisy fast path (rollbacks on a large share of candidates) the engine
 * shrinks the window from its cap toward sqrt(2 p / r); with identical paths (no rollbacks) it
 * keeps the cap; with window_auto off it keeps W whatever happens. Oracle-equal throughout. */
static void test_window_auto(void **state)
{
	struct etu_fixture *f = *state;
	struct scenario s;
	struct ds_engine_stats st;
	const int N = 8, T = SCEN_MAX_OUT, W = 32;
	for (int noisy = 0; noisy < 2; noisy++)
		for (int on = 0; on < 2; on++) {
			f->noise = noisy ? 0.05f : 0.0f;
			make_scenario(&s, N, T, 0, W, 16);
			s.opts.step_policy = DS_STEP_MERGE;
			s.opts.window_auto = on;
			run_and_check(f, &s, etu_mk_mock, &st);
			print_message("window_auto=%d noise=%d: window %d, %llu windows, %llu "
			              "rollbacks, %llu steps\n",
			              on, noisy, st.window, (unsigned long long)st.windows,
			              (unsigned long long)st.rollbacks, (unsigned long long)st.steps);
			if (on && noisy)
				assert_true(st.window >= 4 && st.window < 16);
			else
				assert_int_equal(st.window, W);
			scen_free(&s);
		}
}

/* The strict mock naming extra REF warm-up sizes: one below the powers of two, one between
 * them, one that is a power of two already, one above the warm-up's top. */
static enum ds_status mk_mock_sizes(struct ds_backend *be, void *arg, bool oracle,
                                    struct ds_err *err)
{
	static const int sizes[] = {3, 320, 512, 4000};
	struct etu_fixture *f = arg;
	(void)oracle;
	struct mockbe_opts o = {.fast_noise = f->noise,
	                        .logit_scale = 4.0f,
	                        .bad_reads = &f->bad_reads,
	                        .ref_warm_sizes = sizes,
	                        .n_ref_warm_sizes = 4};
	return mockbe_init(be, f->tiny, &o, err);
}

/* Warm-up at init: passes of every bucket size on both paths (DVR), not counted in the stats,
 * every KV block back in the pool, and requests afterwards still equal the oracle. */
static void test_warmup(void **state)
{
	struct etu_fixture *f = *state;
	struct etu_rig r;
	etu_rig_init(&r, f);
	struct ds_engine_stats st;
	r.o.margin_threshold = 0.3f; /* no calibration passes in the counts below */
	r.o.warmup = true;
	r.o.max_running = 16;
	r.o.max_step_tokens = 1024; /* tiny's context */
	r.o.kv_blocks = 1024;
	etu_rig_start(&r, etu_mk_cpu1);
	ds_engine_get_stats(r.e, &st);
	/* T = 1, 2, ..., 512 twice, then 1024 once, on each path */
	assert_true(f->tiny->cfg.max_pos >= 1024);
	assert_int_equal(r.be.counters.calls[DS_PATH_FAST], 2 * 10 + 1);
	assert_int_equal(r.be.counters.calls[DS_PATH_REF], 2 * 10 + 1);
	assert_int_equal(st.ref_forward_calls + st.fast_forward_calls, 0);
	assert_int_equal(st.kv_blocks_used, 0);
	etu_rig_check_stop(&r);
	/* the backend's own sizes join the powers of two on their path, once each, up to the
	 * top (512 here): 3 and 320 more on REF, exactly as many tokens as named */
	etu_rig_start(&r, mk_mock_sizes);
	assert_int_equal(r.be.counters.calls[DS_PATH_FAST], 2 * 10 + 1);
	assert_int_equal(r.be.counters.calls[DS_PATH_REF], 2 * 12 + 1);
	assert_int_equal(r.be.counters.rows[DS_PATH_FAST], 2 * 1023 + 1024);
	assert_int_equal(r.be.counters.rows[DS_PATH_REF], 2 * (1023 + 3 + 320) + 1024);
	etu_rig_stop(&r);
	/* fast mode warms only FAST */
	r.o.mode = DS_MODE_FAST;
	etu_rig_start(&r, etu_mk_mock);
	assert_int_equal(r.be.counters.calls[DS_PATH_REF], 0);
	assert_true(r.be.counters.calls[DS_PATH_FAST] > 0);
	etu_rig_stop(&r);
	/* a pool too small for the big passes skips them */
	r.o.mode = DS_MODE_DVR;
	r.o.kv_blocks = 8;
	r.o.kv_block_size = 16;
	etu_rig_start(&r, etu_mk_mock);
	assert_true(r.be.counters.calls[DS_PATH_REF] < 2 * 10 + 1);
	etu_rig_stop(&r);
	/* scenarios with warm-up stay oracle-equal */
	struct scenario s;
	make_scenario(&s, 5, 20, 1, 4, 16);
	s.opts.warmup = true;
	s.opts.step_policy = DS_STEP_AUTO;
	run_and_check(f, &s, etu_mk_cpu1, &st);
	scen_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_margin_calibration),  cmocka_unit_test(test_cadence_lockstep),
	    cmocka_unit_test(test_cadence_staggered),   cmocka_unit_test(test_cadence_multi_pass),
	    cmocka_unit_test(test_cadence_budget),      cmocka_unit_test(test_early_verify_joins),
	    cmocka_unit_test(test_cadence_cpu_oracle),  cmocka_unit_test(test_merge_one_pass),
	    cmocka_unit_test(test_auto_ref_when_cheap), cmocka_unit_test(test_admit_det_first),
	    cmocka_unit_test(test_early_verify_gate),   cmocka_unit_test(test_warmup),
	    cmocka_unit_test(test_window_auto),
	};
	return cmocka_run_group_tests(tests, setup, etu_teardown);
}
