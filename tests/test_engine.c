/* test_engine.c - the scheduler against the oracle (DESIGN.md section 2): randomized
 * scenarios on the tiny model with the real CPU backend (and on a strict mock backend that
 * detects wrong block tables and reference reads of fast-written KV), rollbacks with the
 * batch-variant fast path and with injection, zero reference calls without deterministic
 * traffic, rejections, cancellation, the threaded mode and window independence. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "fingerprint.h"
#include "engine_test_util.h"
#include "test_engine_harness.h"
#include "test_engine_mockbe.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#ifdef UNDER_ASAN
#define SCALE_N(n) ((n) / 6)
#else
#define SCALE_N(n) (n)
#endif

static const int all_windows[] = {1, 4, 16, 32, 64};

/* the strict mock's fast path differs from REF by a batch-keyed perturbation of +-0.05 */
static int setup(void **state)
{
	return etu_setup(state, 0.05f);
}

static enum ds_status mk_cpu(struct ds_backend *be, void *arg, bool oracle, struct ds_err *err)
{
	struct etu_fixture *f = arg;
	/* the oracle runs on one thread, the engine under test on two: the reference path must
	 * not care */
	return ds_backend_cpu_init(be, f->tiny, oracle ? 1 : 2, err);
}

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : dflt;
}

struct totals {
	uint64_t windows, rollbacks, preemptions, prefix_hits, cancelled, det, scenarios;
	uint64_t ref_calls;
	uint64_t ref_steps, ref_decoded;
};

static void add_totals(struct totals *t, const struct scenario *s, const struct ds_engine_stats *st)
{
	t->windows += st->windows;
	t->rollbacks += st->rollbacks;
	t->preemptions += st->preemptions;
	t->prefix_hits += st->prefix_hit_tokens;
	t->ref_calls += st->ref_forward_calls;
	t->ref_steps += st->ref_steps;
	t->ref_decoded += st->ref_decoded;
	t->scenarios++;
	for (int i = 0; i < s->n_req; i++) {
		t->cancelled += s->req[i].finish == DS_FINISH_CANCELLED;
		t->det += s->req[i].det;
	}
}

/* Fails the test with the scenario's seed and options, the stage and the harness's reason. */
static void fail_scenario(const struct scenario *s, uint64_t seed, const char *stage,
                          const char *msg)
{
	fail_msg("scenario seed %llu (W=%d G=%d inject=%.1f mode=%s step=%s bias=%g): %s: %s",
	         (unsigned long long)seed, s->opts.window, s->opts.group, s->opts.inject_mismatch,
	         ds_mode_name(s->opts.mode), ds_step_policy_name(s->opts.step_policy),
	         s->opts.ref_step_bias, stage, msg);
}

static void run_scenarios(struct etu_fixture *f, scen_backend_fn mk, uint64_t seed0, int n,
                          const struct scen_gen_opts *g, struct totals *t)
{
	char msg[512];
	for (int i = 0; i < n; i++) {
		struct scenario s;
		uint64_t seed = seed0 + (uint64_t)i;
		scen_generate(&s, seed, &f->tiny->cfg, g);
		struct ds_engine_stats st;
		if (!scen_run(&s, mk, f, &st, msg, sizeof(msg)))
			fail_scenario(&s, seed, "run", msg);
		if (!scen_check_oracle(&s, mk, f, msg, sizeof(msg)))
			fail_scenario(&s, seed, "oracle", msg);
		add_totals(t, &s, &st);
		scen_free(&s);
	}
}

/* ---- 1. oracle equality ---- */

static void test_oracle_cpu(void **state)
{
	struct etu_fixture *f = *state;
#ifdef UNDER_ASAN
	int n = env_int("DS_ORACLE_SCENARIOS", 24);
#else
	int n = DS_MAX(200, env_int("DS_ORACLE_SCENARIOS", 200));
#endif
	struct scen_gen_opts g = {.n_req_max = 64,
	                          .windows = all_windows,
	                          .n_windows = 5,
	                          .invariant_share = 0.1,
	                          .det_share = 0.5,
	                          .inject = -1};
	struct totals t = {0};
	/* one CPU thread for both (etu_mk_cpu1): the many-scenario loop stays fast on a loaded
	 * 2-core box (fork-join waits dominate tiny passes); the fast path still picks its splits
	 * from the batch shape */
	run_scenarios(f, etu_mk_cpu1, 1000, n, &g, &t);
	printf("oracle/cpu: %llu scenarios, %llu det requests, %llu windows, %llu rollbacks, "
	       "%llu preemptions, %llu prefix-hit tokens, %llu cancelled, %llu REF steps, "
	       "%llu tokens decoded on REF\n",
	       (unsigned long long)t.scenarios, (unsigned long long)t.det,
	       (unsigned long long)t.windows, (unsigned long long)t.rollbacks,
	       (unsigned long long)t.preemptions, (unsigned long long)t.prefix_hits,
	       (unsigned long long)t.cancelled, (unsigned long long)t.ref_steps,
	       (unsigned long long)t.ref_decoded);
	/* the mix really exercised what it claims to */
	assert_true(t.rollbacks > 0);
	assert_true(t.ref_steps > 0 && t.ref_decoded > 0);
	assert_true(t.preemptions > 0);
	assert_true(t.prefix_hits > 0);
	assert_true(t.cancelled > 0);
}

static void test_oracle_mock(void **state)
{
	struct etu_fixture *f = *state;
	struct scen_gen_opts g = {.n_req_max = 64,
	                          .windows = all_windows,
	                          .n_windows = 5,
	                          .invariant_share = 0.1,
	                          .det_share = 0.6,
	                          .inject = -1};
	struct totals t = {0};
	f->bad_reads = 0;
	run_scenarios(f, etu_mk_mock, 50000, SCALE_N(100), &g, &t);
	assert_int_equal(f->bad_reads, 0); /* no wrong / fast-written KV reads */
	assert_true(t.rollbacks > 0 && t.preemptions > 0 && t.prefix_hits > 0);
	assert_true(t.ref_steps > 0 && t.ref_decoded > 0);
}

/* ---- 2. rollbacks happen, and the output still equals the oracle ---- */

static void one_config(struct etu_fixture *f, scen_backend_fn mk, uint64_t seed, double inject,
                       int window, struct totals *t)
{
	static int w[1];
	w[0] = window;
	struct scen_gen_opts g = {.n_req_max = 48,
	                          .windows = w,
	                          .n_windows = 1,
	                          .invariant_share = 0.0,
	                          .det_share = 1.0,
	                          .inject = inject,
	                          .windowed = true};
	run_scenarios(f, mk, seed, 1, &g, t);
}

static void test_rollbacks_inject(void **state)
{
	struct etu_fixture *f = *state;
	struct totals t = {0};
	for (int i = 0; i < SCALE_N(6) + 1; i++)
		one_config(f, mk_cpu, 7000 + (uint64_t)i, 0.5, 16, &t);
	printf("inject 0.5: %llu windows, %llu rollbacks\n", (unsigned long long)t.windows,
	       (unsigned long long)t.rollbacks);
	assert_true(t.rollbacks > 0);
	assert_true(t.rollbacks < t.windows); /* some windows are untouched */
}

static void test_rollbacks_fast_path(void **state)
{
	struct etu_fixture *f = *state;
	/* the real batch-variant CPU fast path, no injection */
	struct totals t = {0};
	for (int i = 0; i < SCALE_N(8) + 1; i++)
		one_config(f, mk_cpu, 8000 + (uint64_t)i, 0.0, 32, &t);
	printf("cpu fast path, no injection: %llu windows, %llu rollbacks\n",
	       (unsigned long long)t.windows, (unsigned long long)t.rollbacks);
	/* the strict mock's fast path differs by a batch-keyed perturbation */
	struct totals m = {0};
	f->bad_reads = 0;
	for (int i = 0; i < SCALE_N(8) + 1; i++)
		one_config(f, etu_mk_mock, 9000 + (uint64_t)i, 0.0, 32, &m);
	printf("mock fast path, no injection: %llu windows, %llu rollbacks\n",
	       (unsigned long long)m.windows, (unsigned long long)m.rollbacks);
	assert_true(m.rollbacks > 0);
	assert_int_equal(f->bad_reads, 0);
}

/* ---- 3. the flag costs nothing when unused ---- */

static struct scen_req simple_req(int n_prompt, int max_tokens, bool det, float temp, uint64_t seed)
{
	struct scen_req q;
	memset(&q, 0, sizeof(q));
	q.n_prompt = n_prompt;
	for (int i = 0; i < n_prompt; i++)
		q.prompt[i] = (int32_t)((i * 37 + 11) % 256);
	q.max_tokens = max_tokens;
	q.det = det;
	q.sp = (struct ds_sample_params){.temperature = temp, .top_p = 1.0f, .seed = seed};
	q.has_seed = true;
	q.early_verify = true;
	q.ignore_eos = true;
	q.cancel_step = -1;
	q.follow = -1; /* a request of its own, not a follow-up turn (0 would follow request 0) */
	return q;
}

/* q's submission for tests that drive an engine by hand: no stop conditions, no logprobs
 * unless the caller sets them. */
static struct ds_request_params req_params(const struct scen_req *q)
{
	return (struct ds_request_params){.prompt = q->prompt,
	                                  .n_prompt = q->n_prompt,
	                                  .max_tokens = q->max_tokens,
	                                  .sampling = q->sp,
	                                  .has_seed = q->has_seed,
	                                  .deterministic = q->det,
	                                  .early_verify = q->early_verify,
	                                  .ignore_eos = q->ignore_eos};
}

static void test_no_ref_calls_without_det(void **state)
{
	struct etu_fixture *f = *state;
	struct scenario s = {0};
	ds_engine_opts_default(&s.opts);
	s.n_req = 12;
	s.req = calloc((size_t)s.n_req, sizeof(*s.req));
	for (int i = 0; i < s.n_req; i++) {
		s.req[i] = simple_req(5 + i, 10, false, i % 2 ? 0.8f : 0.0f, (uint64_t)i);
		s.req[i].arrive_step = i;
	}
	struct ds_engine_stats st;
	char msg[512];
	assert_true(scen_run(&s, mk_cpu, f, &st, msg, sizeof(msg)));
	assert_int_equal(st.ref_forward_calls, 0);
	assert_true(st.fast_forward_calls > 0);
	assert_int_equal(st.tokens[0], 120);
	/* one deterministic request among them does call the reference path */
	s.req[3].det = true;
	assert_true(scen_run(&s, mk_cpu, f, &st, msg, sizeof(msg)));
	assert_true(st.ref_forward_calls > 0);
	scen_free(&s);
}

/* ---- rejections, cancellation, threads, window independence ---- */

static void test_submit_rejections(void **state)
{
	struct etu_rig r;
	etu_rig_init(&r, *state);
	r.o.mode = DS_MODE_FAST;
	r.o.kv_blocks = 8;
	r.o.kv_block_size = 16;
	r.o.max_queue = 2;
	etu_rig_start(&r, etu_mk_mock);
	int32_t prompt[4] = {1, 2, 3, 4};
	struct ds_request_params p = {
	    .prompt = prompt, .n_prompt = 4, .max_tokens = 4, .sampling = {.top_p = 1.0f}};
	uint64_t id;
	p.deterministic = true;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_ERR_PRECONDITION);
	p.deterministic = false;
	p.max_tokens = 8 * 16; /* 4 + 128 positions > 8 blocks of 16 */
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_ERR_TOO_LONG);
	assert_non_null(strstr(r.err.msg, "KV blocks"));
	p.max_tokens = 0;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_ERR_INVALID);
	p.max_tokens = 4;
	prompt[2] = 100000;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_ERR_INVALID);
	prompt[2] = 3;
	p.sampling.top_p = 0.0f;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_ERR_INVALID);
	p.sampling.top_p = 1.0f;
	p.sampling.temperature = -1.0f;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_ERR_INVALID);
	p.sampling.temperature = 0.0f;
	p.n_prompt = 0;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_ERR_INVALID);
	p.n_prompt = 4;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_OK);
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_OK);
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_ERR_FULL);
	etu_rig_stop(&r); /* outstanding requests are dropped without leaks */
	assert_int_equal(ds_mode_parse("ref-only", &r.o.mode), DS_OK);
	assert_int_equal(r.o.mode, DS_MODE_REF_ONLY);
	assert_int_equal(ds_mode_parse("bogus", &r.o.mode), DS_ERR_INVALID);
}

static void test_cancel_frees_within_one_step(void **state)
{
	struct etu_rig r;
	etu_rig_init(&r, *state);
	r.o.kv_blocks = 64;
	r.o.kv_block_size = 4;
	r.o.prefix_cache = false;
	etu_rig_start(&r, mk_cpu);
	struct scen_req q = simple_req(20, 60, true, 0.0f, 1);
	q.early_verify = false;
	struct ds_request_params p = req_params(&q);
	uint64_t id;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_OK);
	for (int i = 0; i < 5; i++)
		assert_int_equal(ds_engine_step(r.e, &r.err), DS_OK);
	struct ds_engine_stats st;
	ds_engine_get_stats(r.e, &st);
	assert_true(st.kv_blocks_used >= 5);
	ds_engine_cancel(r.e, id);
	assert_int_equal(ds_engine_step(r.e, &r.err), DS_OK);
	ds_engine_get_stats(r.e, &st);
	assert_int_equal(st.kv_blocks_used, 0);
	assert_true(ds_engine_idle(r.e));
	struct ds_event *ev, *last = NULL;
	while ((ev = ds_engine_poll(r.e)) != NULL) {
		if (last)
			ds_event_free(last);
		last = ev;
	}
	assert_non_null(last);
	assert_true(last->final);
	assert_int_equal(last->finish, DS_FINISH_CANCELLED);
	ds_event_free(last);
	etu_rig_check_stop(&r);
}

static void test_threaded_mode(void **state)
{
	struct etu_rig r;
	etu_rig_init(&r, *state);
	r.o.window = 8;
	r.o.group = 4;
	r.o.inject_mismatch = 0.3;
	etu_rig_start(&r, mk_cpu);
	struct scenario s = {0};
	s.n_req = 16;
	s.req = calloc((size_t)s.n_req, sizeof(*s.req));
	for (int i = 0; i < s.n_req; i++) {
		s.req[i] =
		    simple_req(3 + i, 12 + i, i % 2 == 0, i % 4 < 2 ? 0.0f : 1.0f, (uint64_t)i * 7);
		s.req[i].seed = s.req[i].sp.seed;
		struct ds_request_params p = req_params(&s.req[i]);
		p.return_logprobs = true;
		p.user_tag = (uint64_t)i;
		assert_int_equal(ds_engine_submit(r.e, &p, &s.req[i].id, &r.err), DS_OK);
		if (i == 0) {
			/* held from the start until cancelled below; the rest arrive while it runs
			 */
			ds_engine_pause(r.e, s.req[0].id, true);
			assert_int_equal(ds_engine_start(r.e, &r.err), DS_OK);
			assert_int_equal(ds_engine_step(r.e, &r.err), DS_ERR_PRECONDITION);
		}
	}
	int done = 0, events = 0;
	struct pollfd pfd = {.fd = ds_engine_event_fd(r.e), .events = POLLIN};
	while (done < s.n_req) {
		assert_true(poll(&pfd, 1, 30000) == 1);
		struct ds_event *ev;
		while ((ev = ds_engine_poll(r.e)) != NULL) {
			if (++events == 3) {
				/* cancel from this thread while the engine thread steps */
				ds_engine_cancel(r.e, s.req[0].id);
				ds_engine_cancel(r.e, s.req[5].id);
			}
			struct scen_req *q = &s.req[ev->user_tag];
			assert_int_equal(ev->req_id, q->id);
			assert_false(q->n_final);
			memcpy(q->out + q->n_out, ev->tokens,
			       (size_t)ev->n_tokens * sizeof(int32_t));
			memcpy(q->lp + q->n_out, ev->logprobs,
			       (size_t)ev->n_tokens * sizeof(float));
			q->n_out += ev->n_tokens;
			if (ev->final) {
				q->n_final = 1;
				q->finish = ev->finish;
				memcpy(q->fp, ev->fingerprint, sizeof(q->fp));
				done++;
			}
			ds_event_free(ev);
		}
	}
	ds_engine_stop(r.e);
	assert_true(ds_engine_idle(r.e));
	assert_int_equal(s.req[0].finish, DS_FINISH_CANCELLED); /* paused, then cancelled */
	assert_int_equal(s.req[0].n_out, 0);
	/* request 5 was running: cancelled, or finished first (its tokens are checked below) */
	assert_true(s.req[5].finish == DS_FINISH_CANCELLED || s.req[5].finish == DS_FINISH_LENGTH);
	assert_int_equal(ds_engine_kv_check(r.e, &r.err), DS_OK);
	char msg[512];
	if (!scen_check_oracle(&s, mk_cpu, r.f, msg, sizeof(msg)))
		fail_msg("threaded: %s", msg);
	etu_rig_stop(&r);
	scen_free(&s);
}

static void test_window_independence_and_fingerprint(void **state)
{
	static const int ws[] = {1, 4, 64};
	char fps[3][33];
	int32_t toks[3][SCEN_MAX_OUT];
	char msg[512];
	for (int i = 0; i < 3; i++) {
		struct etu_rig r;
		etu_rig_init(&r, *state);
		r.o.window = ws[i];
		r.o.inject_mismatch = 0.3;
		etu_rig_start(&r, mk_cpu);
		struct scen_req q = simple_req(9, 40, true, 1.0f, 99);
		assert_true(scen_run_one(r.e, &q, msg, sizeof(msg)));
		assert_int_equal(q.n_out, 40);
		memcpy(fps[i], q.fp, 33);
		memcpy(toks[i], q.out, sizeof(toks[i]));
		assert_int_equal(strlen(q.fp), 32);
		etu_rig_stop(&r);
	}
	assert_string_equal(fps[0], fps[1]);
	assert_string_equal(fps[0], fps[2]);
	assert_memory_equal(toks[0], toks[2], sizeof(toks[0]));
}

/* ---- fingerprint, stop conditions, pause ---- */

static void fp_of(const struct ds_fp_params *p, const int32_t *out, int n, int split, char hex[33])
{
	static const uint8_t id[16] = {1, 2, 3};
	int32_t prompt[3] = {7, 8, 9};
	struct ds_fp fp;
	assert_int_equal(ds_fp_init(&fp, id, prompt, 3, p, 259), DS_OK);
	ds_fp_update(&fp, out, split);
	ds_fp_update(&fp, out + split, n - split);
	ds_fp_hex(&fp, hex);
	ds_fp_free(&fp);
}

static void test_fingerprint_unit(void **state)
{
	(void)state;
	int32_t out[6] = {1, 2, 3, 4, 5, 6};
	int32_t stops[2] = {9, 4}, stops_sorted[2] = {4, 9};
	struct ds_fp_params p = {
	    .sampling = {.temperature = 0.7f, .top_k = 5, .top_p = 0.9f, .seed = 3},
	    .max_tokens = 6,
	    .stop_ids = stops,
	    .n_stop_ids = 2};
	char a[33], b[33];
	fp_of(&p, out, 6, 2, a);
	fp_of(&p, out, 6, 5, b);
	assert_string_equal(a, b); /* independent of where commits fell */
	assert_int_equal(strlen(a), 32);
	struct ds_fp_params q = p;
	q.stop_ids = stops_sorted; /* stop ids are a set */
	fp_of(&q, out, 6, 0, b);
	assert_string_equal(a, b);
	q = p;
	q.sampling.seed = 4;
	fp_of(&q, out, 6, 0, b);
	assert_string_not_equal(a, b);
	q = p;
	q.max_tokens = 7;
	fp_of(&q, out, 6, 0, b);
	assert_string_not_equal(a, b);
	q = p;
	q.ignore_eos = true;
	fp_of(&q, out, 6, 0, b);
	assert_string_not_equal(a, b);
	fp_of(&p, out, 5, 0, b);
	assert_string_not_equal(a, b);
	/* greedy ignores seed, top-k and top-p: they can't change the output */
	q = p;
	q.sampling =
	    (struct ds_sample_params){.temperature = 0.0f, .top_k = 3, .top_p = 0.5f, .seed = 1};
	fp_of(&q, out, 6, 0, a);
	q.sampling =
	    (struct ds_sample_params){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 2};
	fp_of(&q, out, 6, 0, b);
	assert_string_equal(a, b);
}

static void test_stop_conditions(void **state)
{
	char msg[512];
	for (int mode = 0; mode < 2; mode++) {
		/* a reference output, then stops placed inside it */
		struct etu_rig r;
		etu_rig_init(&r, *state);
		r.o.window = 16;
		etu_rig_start(&r, etu_mk_mock);
		struct scen_req q = simple_req(6, 20, mode == 1, 0.0f, 3);
		assert_true(scen_run_one(r.e, &q, msg, sizeof(msg)));
		assert_int_equal(q.n_out, 20);
		assert_int_equal(q.finish, DS_FINISH_LENGTH);
		int32_t full[20];
		memcpy(full, q.out, sizeof(full));
		int first = 0; /* first position of a token not seen before it */
		for (int i = 3; i < 20 && !first; i++) {
			bool seen = false;
			for (int j = 0; j < i; j++)
				seen |= full[j] == full[i];
			if (!seen)
				first = i;
		}
		assert_true(first > 0);
		struct scen_req s1 = simple_req(6, 20, mode == 1, 0.0f, 3);
		s1.stop_ids[0] = full[first];
		s1.n_stop_ids = 1;
		assert_true(scen_run_one(r.e, &s1, msg, sizeof(msg)));
		assert_int_equal(s1.finish, DS_FINISH_EOS);
		assert_int_equal(s1.n_out, first + 1); /* the stop token is included */
		assert_memory_equal(s1.out, full, (size_t)(first + 1) * sizeof(int32_t));
		struct scen_req s2 = simple_req(6, 20, mode == 1, 0.0f, 3);
		s2.stop_seq[0] = full[first - 1];
		s2.stop_seq[1] = full[first];
		s2.stop_seq_len = 2;
		assert_true(scen_run_one(r.e, &s2, msg, sizeof(msg)));
		assert_int_equal(s2.finish, DS_FINISH_STOP_SEQ);
		assert_true(s2.n_out <= first + 1);
		struct scen_req s3 = simple_req(6, 5, mode == 1, 0.0f, 3);
		assert_true(scen_run_one(r.e, &s3, msg, sizeof(msg)));
		assert_int_equal(s3.finish, DS_FINISH_LENGTH);
		assert_memory_equal(s3.out, full, 5 * sizeof(int32_t));
		etu_rig_stop(&r);
	}
}

/* Polls every pending event; returns the number of tokens they carried. */
static int drain_tokens(struct ds_engine *e)
{
	int n = 0;
	struct ds_event *ev;
	while ((ev = ds_engine_poll(e)) != NULL) {
		n += ev->n_tokens;
		ds_event_free(ev);
	}
	return n;
}

static void test_pause_resume(void **state)
{
	struct etu_rig r;
	etu_rig_init(&r, *state);
	etu_rig_start(&r, etu_mk_mock);
	struct scen_req q = simple_req(4, 10, false, 0.0f, 1);
	q.early_verify = false;
	struct ds_request_params p = req_params(&q);
	uint64_t id;
	assert_int_equal(ds_engine_submit(r.e, &p, &id, &r.err), DS_OK);
	assert_int_equal(ds_engine_step(r.e, &r.err), DS_OK);
	ds_engine_pause(r.e, id, true);
	int before = drain_tokens(r.e), after = 0;
	for (int i = 0; i < 5; i++)
		assert_int_equal(ds_engine_step(r.e, &r.err), DS_OK);
	after += drain_tokens(r.e);
	assert_int_equal(after, 0); /* paused: nothing decoded */
	assert_false(ds_engine_idle(r.e));
	ds_engine_pause(r.e, id, false);
	while (!ds_engine_idle(r.e))
		assert_int_equal(ds_engine_step(r.e, &r.err), DS_OK);
	after += drain_tokens(r.e);
	assert_int_equal(before + after, 10);
	etu_rig_stop(&r);
}

/* The strict mock without noise whose every 5th REF call fails. */
static enum ds_status mk_mock_ref_fails(struct ds_backend *be, void *arg, bool oracle,
                                        struct ds_err *err)
{
	struct etu_fixture *f = arg;
	(void)oracle;
	struct mockbe_opts mo = {
	    .fast_noise = 0.0f, .logit_scale = 4.0f, .fail_path = DS_PATH_REF, .fail_every = 5};
	return mockbe_init(be, f->tiny, &mo, err);
}

static void test_backend_failure_costs_only_its_requests(void **state)
{
	struct etu_rig r;
	etu_rig_init(&r, *state);
	r.o.window = 4;
	/* split: REF passes hold only deterministic work, so "REF fails" must spare the others
	 * (under merge or auto a failed REF step fails everyone in it, which is the same rule) */
	r.o.step_policy = DS_STEP_SPLIT;
	etu_rig_start(&r, mk_mock_ref_fails);
	enum { N = 12 };
	struct scen_req q[N];
	for (int i = 0; i < N; i++) {
		q[i] = simple_req(4 + i, 16, i % 2 == 0, 0.0f, (uint64_t)i);
		struct ds_request_params p = req_params(&q[i]);
		p.user_tag = (uint64_t)i;
		assert_int_equal(ds_engine_submit(r.e, &p, &q[i].id, &r.err), DS_OK);
	}
	int failed_steps = 0, errors[2] = {0}, finals = 0;
	for (int step = 0; !ds_engine_idle(r.e) && step < 10000; step++) {
		if (ds_engine_step(r.e, &r.err) != DS_OK)
			failed_steps++;
		struct ds_event *ev;
		while ((ev = ds_engine_poll(r.e)) != NULL) {
			if (ev->final) {
				finals++;
				if (ev->finish == DS_FINISH_ERROR) {
					assert_int_equal(ev->status, DS_ERR_DEVICE);
					assert_non_null(strstr(ev->error, "injected failure"));
					errors[q[ev->user_tag].det]++;
				} else {
					assert_int_equal(ev->finish, DS_FINISH_LENGTH);
				}
			}
			ds_event_free(ev);
		}
	}
	assert_true(ds_engine_idle(r.e));
	assert_int_equal(finals, N);
	assert_true(failed_steps > 0);
	assert_true(errors[1] > 0);     /* deterministic requests in the failed REF passes */
	assert_int_equal(errors[0], 0); /* the fast path never failed: the others finished */
	etu_rig_check_stop(&r);
}

static void test_preempts_newest_first(void **state)
{
	struct etu_rig r;
	etu_rig_init(&r, *state);
	r.o.kv_block_size = 4;
	r.o.kv_blocks = 10; /* each request alone needs 8; both prompts fit at admission */
	r.o.prefix_cache = false;
	etu_rig_start(&r, etu_mk_mock);
	uint64_t ids[2];
	for (int i = 0; i < 2; i++) {
		struct scen_req q = simple_req(8, 24, i == 1, 0.0f, (uint64_t)i);
		q.prompt[0] = (int32_t)i;
		struct ds_request_params p = req_params(&q);
		assert_int_equal(ds_engine_submit(r.e, &p, &ids[i], &r.err), DS_OK);
	}
	uint64_t order[2];
	int n_final = 0;
	bool a_done = false;
	while (!ds_engine_idle(r.e)) {
		assert_int_equal(ds_engine_step(r.e, &r.err), DS_OK);
		struct ds_event *ev;
		int a_tokens = 0;
		while ((ev = ds_engine_poll(r.e)) != NULL) {
			if (ev->req_id == ids[0])
				a_tokens += ev->n_tokens;
			if (ev->final) {
				assert_int_equal(ev->finish, DS_FINISH_LENGTH);
				order[n_final++] = ev->req_id;
			}
			if (ev->final && ev->req_id == ids[0])
				a_done = true;
			ds_event_free(ev);
		}
		/* the oldest (non-deterministic: one token a step) never stalls */
		if (!a_done || a_tokens)
			assert_int_equal(a_tokens, 1);
	}
	struct ds_engine_stats st;
	ds_engine_get_stats(r.e, &st);
	assert_true(st.preemptions > 0);
	assert_int_equal(n_final, 2);
	assert_int_equal(order[0], ids[0]); /* the oldest was never the victim */
	etu_rig_check_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fingerprint_unit),
	    cmocka_unit_test(test_stop_conditions),
	    cmocka_unit_test(test_pause_resume),
	    cmocka_unit_test(test_submit_rejections),
	    cmocka_unit_test(test_backend_failure_costs_only_its_requests),
	    cmocka_unit_test(test_cancel_frees_within_one_step),
	    cmocka_unit_test(test_preempts_newest_first),
	    cmocka_unit_test(test_no_ref_calls_without_det),
	    cmocka_unit_test(test_window_independence_and_fingerprint),
	    cmocka_unit_test(test_threaded_mode),
	    cmocka_unit_test(test_rollbacks_inject),
	    cmocka_unit_test(test_rollbacks_fast_path),
	    cmocka_unit_test(test_oracle_mock),
	    cmocka_unit_test(test_oracle_cpu),
	};
	return cmocka_run_group_tests(tests, setup, etu_teardown);
}
