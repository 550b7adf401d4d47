/* test_sampler_stats.c - sampling is not only reproducible but correct: over many seeds the
 * sampled frequencies match softmax(logits / T) (restricted and renormalised by top-k / top-p)
 * in a chi-square test, both for the sampler alone and end to end for non-deterministic
 * requests through the engine on the tiny model. Each test also checks that a wrong
 * distribution (another temperature) is rejected, so the test has the power to fail. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "engine.h"
#include "sample.h"

/* Expected probabilities: softmax(logits/T) over the top-k / top-p set (ties to low ids). */
static void expected_probs(const float *logits, int V, float T, int top_k, float top_p, double *p)
{
	int *order = malloc((size_t)V * sizeof(int));
	assert_non_null(order);
	for (int i = 0; i < V; i++)
		order[i] = i;
	for (int i = 1; i < V; i++) /* insertion sort, logit desc then id asc */
		for (int j = i; j > 0 && (logits[order[j]] > logits[order[j - 1]] ||
		                          (logits[order[j]] == logits[order[j - 1]] &&
		                           order[j] < order[j - 1]));
		     j--) {
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	int keep = top_k > 0 && top_k < V ? top_k : V;
	double m = logits[order[0]], z = 0;
	for (int i = 0; i < keep; i++)
		z += exp((logits[order[i]] - m) / T);
	if (top_p < 1.0f) {
		double acc = 0;
		int n = 0;
		while (n < keep) {
			acc += exp((logits[order[n]] - m) / T) / z;
			n++;
			if (acc >= top_p)
				break;
		}
		keep = n;
		z = 0;
		for (int i = 0; i < keep; i++)
			z += exp((logits[order[i]] - m) / T);
	}
	for (int i = 0; i < V; i++)
		p[i] = 0;
	for (int i = 0; i < keep; i++)
		p[order[i]] = exp((logits[order[i]] - m) / T) / z;
	free(order);
}

/* Chi-square of counts against probabilities, bins with expected < 5 pooled; returns the
 * statistic and the p = 0.001 critical value (Wilson-Hilferty). Tokens with p = 0 must not
 * appear at all. */
static void chi_square(const int *counts, const double *p, int V, int N, double *stat, double *crit)
{
	double s = 0, pool_e = 0, pool_o = 0;
	int bins = 0;
	for (int i = 0; i < V; i++) {
		if (p[i] == 0) {
			assert_int_equal(counts[i], 0);
			continue;
		}
		double e = p[i] * N;
		if (e < 5) {
			pool_e += e;
			pool_o += counts[i];
			continue;
		}
		s += (counts[i] - e) * (counts[i] - e) / e;
		bins++;
	}
	if (pool_e > 0) {
		s += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
		bins++;
	}
	double df = bins - 1, z = 3.090;
	double a = 2.0 / (9.0 * df);
	*stat = s;
	*crit = df * pow(1 - a + z * sqrt(a), 3);
}

static void test_sampler_matches_softmax(void **state)
{
	(void)state;
	enum { V = 40, N = 20000 };
	float logits[V];
	for (int i = 0; i < V; i++)
		logits[i] = 3.0f * ds_hash_unit_pm1(ds_hash3(5, (uint64_t)i, 0));
	void *scratch = malloc(ds_sample_scratch_size(V));
	struct {
		float T;
		int k;
		float p;
	} cases[] = {
	    {1.0f, 0, 1.0f}, {0.5f, 0, 1.0f}, {2.0f, 0, 1.0f},
	    {1.0f, 7, 1.0f}, {0.8f, 0, 0.8f}, {1.2f, 12, 0.9f},
	};
	for (size_t c = 0; c < DS_ARRAY_LEN(cases); c++) {
		int counts[V] = {0};
		struct ds_sample_params sp = {
		    .temperature = cases[c].T, .top_k = cases[c].k, .top_p = cases[c].p};
		for (int n = 0; n < N; n++) {
			struct ds_sample_result r;
			sp.seed = ds_mix64((uint64_t)n * 31 + c);
			ds_sample(logits, V, &sp, 17 + n % 5, scratch, &r);
			counts[r.token]++;
		}
		double p[V], stat, crit;
		expected_probs(logits, V, cases[c].T, cases[c].k, cases[c].p, p);
		chi_square(counts, p, V, N, &stat, &crit);
		if (!(stat < crit))
			fail_msg("case %zu: chi2 %.1f >= %.1f", c, stat, crit);
		/* power: a temperature 30% off is rejected */
		expected_probs(logits, V, cases[c].T * 1.3f, cases[c].k, cases[c].p, p);
		double s2 = 0, c2 = 0;
		for (int i = 0; i < V;
		     i++) /* tokens the wrong model forbids would trip the assert */
			if (p[i] == 0 && counts[i])
				p[i] = 1e-12;
		chi_square(counts, p, V, N, &s2, &c2);
		assert_true(s2 > c2);
	}
	free(scratch);
}

static void test_engine_nondet_matches_softmax(void **state)
{
	(void)state;
	enum { N = 3000 };
	struct ds_model_config cfg;
	struct ds_model *m;
	struct ds_backend be;
	struct ds_err err;
	assert_int_equal(ds_model_preset("tiny", &cfg), DS_OK);
	assert_int_equal(ds_model_synth(&cfg, 77, &m, &err), DS_OK);
	int V = cfg.vocab_size;
	int32_t prompt[3] = {72, 105, 33};

	/* the logits of the next token, from a direct forward */
	assert_int_equal(ds_backend_cpu_init(&be, m, 2, &err), DS_OK);
	assert_int_equal(ds_backend_kv_init(&be, 4, 16, &err), DS_OK);
	int32_t blocks[1] = {0};
	struct ds_fwd_seq s = {.tokens = prompt,
	                       .n_tokens = 3,
	                       .pos0 = 0,
	                       .blocks = blocks,
	                       .n_blocks = 1,
	                       .sp = {.top_p = 1.0f}};
	struct ds_fwd_row row;
	float *logits = malloc((size_t)V * sizeof(float));
	struct ds_fwd_batch b = {
	    .path = DS_PATH_REF, .seqs = &s, .n_seqs = 1, .rows = &row, .logits = logits};
	assert_int_equal(ds_backend_forward(&be, &b, &err), DS_OK);
	ds_backend_free(&be);
	const float T = 1.0f;

	struct ds_engine *e;
	struct ds_engine_opts o;
	ds_engine_opts_default(&o);
	o.mode = DS_MODE_DVR;
	o.max_queue = N;
	assert_int_equal(ds_backend_cpu_init(&be, m, 2, &err), DS_OK);
	assert_int_equal(ds_engine_init(&e, &be, &o, &err), DS_OK);
	for (int i = 0; i < N; i++) {
		struct ds_request_params p = {.prompt = prompt,
		                              .n_prompt = 3,
		                              .max_tokens = 1,
		                              .sampling = {.temperature = T,
		                                           .top_p = 1.0f,
		                                           .seed = ds_mix64((uint64_t)i + 1000)},
		                              .has_seed = true,
		                              .ignore_eos = true};
		uint64_t id;
		assert_int_equal(ds_engine_submit(e, &p, &id, &err), DS_OK);
	}
	int *counts = calloc((size_t)V, sizeof(int));
	int got = 0;
	while (!ds_engine_idle(e)) {
		assert_int_equal(ds_engine_step(e, &err), DS_OK);
		struct ds_event *ev;
		while ((ev = ds_engine_poll(e)) != NULL) {
			if (ev->n_tokens == 1) {
				counts[ev->tokens[0]]++;
				got++;
			}
			ds_event_free(ev);
		}
	}
	assert_int_equal(got, N);
	struct ds_engine_stats st;
	ds_engine_get_stats(e, &st);
	assert_int_equal(st.ref_forward_calls, 0); /* non-deterministic: fast path only */
	double *p = malloc((size_t)V * sizeof(double)), stat, crit;
	expected_probs(logits, V, T, 0, 1.0f, p);
	chi_square(counts, p, V, N, &stat, &crit);
	if (!(stat < crit))
		fail_msg("engine: chi2 %.1f >= %.1f", stat, crit);
	expected_probs(logits, V, T * 1.5f, 0, 1.0f, p);
	double s2, c2;
	chi_square(counts, p, V, N, &s2, &c2);
	float lo = logits[0], hi = logits[0];
	for (int i = 0; i < V; i++) {
		lo = fminf(lo, logits[i]);
		hi = fmaxf(hi, logits[i]);
	}
	print_message("logits in [%g, %g]; chi2 %.1f (crit %.1f), wrong T: %.1f (crit %.1f)\n", lo,
	              hi, stat, crit, s2, c2);
	assert_true(s2 > c2);
	free(p);
	free(counts);
	free(logits);
	ds_engine_free(e);
	ds_backend_free(&be);
	ds_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sampler_matches_softmax),
	    cmocka_unit_test(test_engine_nondet_matches_softmax),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
