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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_greedy_ties_lowest_id),
	    cmocka_unit_test(test_pure_function_of_seed_and_pos),
	    cmocka_unit_test(test_top_k_one_is_greedy),
	    cmocka_unit_test(test_row_key_split),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
