/* test_sample.c - the host sampler: greedy ties, purity in (logits, seed, position), filters. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "sample.h"

static void test_greedy_ties_lowest_id(void **state)
{
	(void)state;
	float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f};
	struct ds_sample_params sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 7};
	struct ds_sample_result r;
	ds_sample(logits, 6, &sp, 10, NULL, &r);
	assert_int_equal(r.token, 1);
	assert_true(r.margin == 0.0f); /* top-2 is also 2.0 */
	double z = 0;
	for (int i = 0; i < 6; i++)
		z += exp(logits[i]);
	assert_true(fabs(r.logprob - (2.0 - log(z))) < 1e-5);
}

static void test_pure_function_of_seed_and_pos(void **state)
{
	(void)state;
	enum { V = 97 };
	float logits[V];
	for (int i = 0; i < V; i++)
		logits[i] = (float)((i * 37) % 11) * 0.3f;
	void *scratch = malloc(ds_sample_scratch_size(V));
	struct ds_sample_params sp = {.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 42};
	struct ds_sample_result a, b;
	int differ = 0;
	for (int pos = 0; pos < 200; pos++) {
		ds_sample(logits, V, &sp, pos, scratch, &a);
		ds_sample(logits, V, &sp, pos, scratch, &b);
		assert_int_equal(a.token, b.token);
		struct ds_sample_result c;
		ds_sample(logits, V, &sp, pos + 1, scratch, &c);
		differ += c.token != a.token;
	}
	assert_true(differ > 20); /* the position really is part of the key */
	free(scratch);
}

static void test_top_k_one_is_greedy(void **state)
{
	(void)state;
	float logits[5] = {0.1f, 0.3f, 3.0f, 0.2f, 2.9f};
	void *scratch = malloc(ds_sample_scratch_size(5));
	struct ds_sample_params sp = {.temperature = 5.0f, .top_k = 1, .top_p = 1.0f, .seed = 3};
	for (int pos = 0; pos < 100; pos++) {
		struct ds_sample_result r;
		ds_sample(logits, 5, &sp, pos, scratch, &r);
		assert_int_equal(r.token, 2);
	}
	free(scratch);
}

/* The two-step key (a row's part once, then each id) is the one-step key's bits. */
static void test_row_key_split(void **state)
{
	(void)state;
	const uint64_t seeds[] = {0, 1, 0x9e3779b97f4a7c15ull, ~0ull};
	const int64_t poss[] = {0, 1, 4095, -3, (int64_t)1 << 40};
	const int32_t ids[] = {0, 1, 128255, 0x7fffffff, -1};
	for (size_t a = 0; a < DS_ARRAY_LEN(seeds); a++)
		for (size_t b = 0; b < DS_ARRAY_LEN(poss); b++) {
			uint64_t rk = ds_sample_row_key(seeds[a], poss[b]);
			for (size_t c = 0; c < DS_ARRAY_LEN(ids); c++)
				assert_true(ds_sample_id_key(rk, ids[c]) ==
				            ds_sample_key(seeds[a], poss[b], ids[c]));
		}
	/* and the key still moves with each argument */
	assert_true(ds_sample_key(1, 2, 3) != ds_sample_key(1, 2, 4));
	assert_true(ds_sample_key(1, 2, 3) != ds_sample_key(1, 3, 3));
	assert_true(ds_sample_key(1, 2, 3) != ds_sample_key(2, 2, 3));
}

/* The reference sampler's fp32 bracket (ds_gumbel_bracket) holds the fp64 perturbed logit
 * ds_sample computes, with a wide margin: the midpoint's error stays under a quarter of the
 * half-width (the half-width is built as eight times an error bound), over random keys, keys at
 * u's extremes (u rounded to 1 included: no bracket there, fp64 g is +inf) and around u = 1/2,
 * logits from 0 to 1e4 and temperatures from 0.01 to 8. Infinite logits and x / T overflowing
 * give no bracket either. */
static uint64_t bracket_key(int k, uint64_t h)
{
	uint64_t m;
	if (k < 64)
		m = ((uint64_t)1 << 53) - 1 - (uint64_t)k; /* u at or next to 1 */
	else if (k < 96)
		m = ((uint64_t)1 << 52) - 16 + (uint64_t)(k - 64); /* around 1/2 */
	else if (k < 112)
		m = (uint64_t)(k - 96); /* u next to 0 */
	else
		return h;
	return m << 11 | (h & 0x7ff);
}

static void test_gumbel_bracket(void **state)
{
	(void)state;
	const float temps[] = {0.01f, 0.3f, 0.7f, 1.0f, 1.5f, 8.0f};
	uint64_t h = 0x243f6a8885a308d3ull;
	double worst = 0.0;
	long n = 0, refused = 0;
	for (size_t ti = 0; ti < DS_ARRAY_LEN(temps); ti++) {
		double inv_t = 1.0 / (double)temps[ti];
		float inv_tf = (float)inv_t;
		for (int k = 0; k < 60000; k++) {
			h = ds_mix64(h + (uint64_t)k);
			uint64_t key = bracket_key(k, h);
			float x;
			switch (k % 4) {
			case 0:
				x = (float)((double)(h >> 40) / 16777216.0 * 60.0 - 30.0);
				break;
			case 1:
				x = (float)((double)(h >> 40) / 16777216.0 * 2e4 - 1e4);
				break;
			case 2:
				x = (float)((double)(h >> 40) / 16777216.0 * 1e-3);
				break;
			default:
				x = 0.0f;
			}
			double u = ds_hash_unit_open(key);
			double g = ds_gumbel64(x, key, inv_t); /* ds_sample's value */
			float lo, hi;
			if (!ds_gumbel_bracket(x, key, inv_tf, &lo, &hi)) {
				if (isfinite(g))
					fail_msg(
					    "no bracket for finite %.17g (x %g, T %g, u %.17g)", g,
					    x, temps[ti], u);
				refused++;
				continue;
			}
			if (!((double)lo <= g && g <= (double)hi))
				fail_msg("bracket [%.9g, %.9g] misses %.17g (x %g, T %g, u %.17g)",
				         lo, hi, g, x, temps[ti], u);
			double w = ((double)hi - (double)lo) / 2.0;
			double r = fabs(((double)lo + (double)hi) / 2.0 - g) / w;
			worst = r > worst ? r : worst;
			n++;
		}
	}
	assert_true(worst < 0.25);
	/* the key whose u rounds to 1, once a temperature */
	assert_int_equal(refused, (long)DS_ARRAY_LEN(temps));
	print_message("gumbel bracket: %ld cases, worst midpoint error %.4f of the half-width\n", n,
	              worst);
	float lo, hi;
	assert_false(ds_gumbel_bracket(INFINITY, 7, 1.0f, &lo, &hi));
	assert_false(ds_gumbel_bracket(-INFINITY, 7, 1.0f, &lo, &hi));
	assert_false(ds_gumbel_bracket(3e38f, 7, 100.0f, &lo, &hi));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_greedy_ties_lowest_id),
	    cmocka_unit_test(test_pure_function_of_seed_and_pos),
	    cmocka_unit_test(test_top_k_one_is_greedy),
	    cmocka_unit_test(test_row_key_split),
	    cmocka_unit_test(test_gumbel_bracket),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
