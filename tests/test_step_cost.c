/* test_step_cost.c - the measured pass-cost table and the DVR step-path choice
 * (scheduler/step_cost.c): first samples dropped, interpolation, unknown sizes, marginal cost,
 * and the choice in the two regimes that matter (compute-bound: REF as cheap as FAST, so a
 * REF step wins once enough deterministic rows would need verifying; memory-bound: REF 1.5x
 * FAST and rows nearly free, so proposing on FAST wins). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "step_cost.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-12 + 1e-9 * fabs(b))

/* Feeds `reps` + 1 samples (the first is dropped) of a pass of `tokens` costing `secs`. */
static void feed(struct ds_step_cost *c, enum ds_path p, int tokens, double secs, int reps)
{
	ds_step_cost_add(c, p, tokens, 1000.0); /* a capture: dropped */
	for (int i = 0; i < reps; i++)
		ds_step_cost_add(c, p, tokens, secs);
}

static void test_table(void **state)
{
	(void)state;
	struct ds_step_cost c;
	double s;
	ds_step_cost_reset(&c);
	assert_false(ds_step_cost_est(&c, DS_PATH_FAST, 64, &s));
	ds_step_cost_add(&c, DS_PATH_FAST, 64, 5.0);
	assert_false(ds_step_cost_est(&c, DS_PATH_FAST, 64, &s)); /* one sample: not yet */
	ds_step_cost_add(&c, DS_PATH_FAST, 64, 0.010);
	assert_true(ds_step_cost_est(&c, DS_PATH_FAST, 64, &s));
	NEAR(s, 0.010);
	/* moving average: 0.010 + 0.25 (0.014 - 0.010) */
	ds_step_cost_add(&c, DS_PATH_FAST, 64, 0.014);
	assert_true(ds_step_cost_est(&c, DS_PATH_FAST, 64, &s));
	NEAR(s, 0.011);
	/* one size stands for sizes within 1.5x, not beyond; the other path is separate */
	assert_true(ds_step_cost_est(&c, DS_PATH_FAST, 90, &s));
	assert_true(ds_step_cost_est(&c, DS_PATH_FAST, 43, &s));
	assert_false(ds_step_cost_est(&c, DS_PATH_FAST, 100, &s));
	assert_false(ds_step_cost_est(&c, DS_PATH_FAST, 40, &s));
	assert_false(ds_step_cost_est(&c, DS_PATH_REF, 64, &s));
	assert_true(ds_step_cost_marginal(&c, DS_PATH_FAST, 64) == 0.0); /* one size */
	/* two sizes: linear in between, slope as the marginal cost, also outside */
	feed(&c, DS_PATH_FAST, 1024, 0.051, 1);
	assert_true(ds_step_cost_est(&c, DS_PATH_FAST, 544, &s));
	NEAR(s, 0.011 + (0.051 - 0.011) * (544.0 - 64.0) / 960.0);
	NEAR(ds_step_cost_marginal(&c, DS_PATH_FAST, 300), 0.040 / 960.0);
	NEAR(ds_step_cost_marginal(&c, DS_PATH_FAST, 4000), 0.040 / 960.0);
	NEAR(ds_step_cost_marginal(&c, DS_PATH_FAST, 2), 0.040 / 960.0);
	/* bad samples are ignored */
	ds_step_cost_add(&c, DS_PATH_FAST, 64, NAN);
	ds_step_cost_add(&c, DS_PATH_FAST, 64, -1.0);
	ds_step_cost_add(&c, DS_PATH_FAST, 0, 1.0);
	assert_true(ds_step_cost_est(&c, DS_PATH_FAST, 64, &s));
	NEAR(s, 0.011);
}

/* Costs of a compute-bound card: a = 4 ms weights, b = 25 us per token on both paths, REF 2%
 * dearer. Memory-bound small batches: REF 1.5x FAST, tokens nearly free. */
static void fill(struct ds_step_cost *c, double ref_scale, double per_token, double fixed)
{
	static const int sizes[] = {1, 8, 64, 256, 1024, 2048, 4096};
	ds_step_cost_reset(c);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		double t = fixed + per_token * sizes[i];
		feed(c, DS_PATH_FAST, sizes[i], t, 3);
		feed(c, DS_PATH_REF, sizes[i], ref_scale * t, 3);
	}
}

static void test_choice(void **state)
{
	(void)state;
	struct ds_step_cost c;
	/* compute-bound, REF 2% dearer: 26 proposals of 32-token windows in a 2048-token step
	 * (10% deterministic) would later cost ~26 x 25 us = 0.65 ms on REF vs 1 ms premium now:
	 * stay on FAST; 128 proposals (50%): 3.2 ms > 1 ms: REF now */
	fill(&c, 1.02, 25e-6, 0.004);
	struct ds_step_shape sh = {.fast_tokens = 2048, .pending = 0, .proposals = 26, .window = 32};
	assert_false(ds_step_cost_ref_now(&c, &sh, 1.0));
	sh.proposals = 128;
	assert_true(ds_step_cost_ref_now(&c, &sh, 1.0));
	/* bias: a large one forbids, 0 always allows */
	assert_false(ds_step_cost_ref_now(&c, &sh, 1.5));
	sh.proposals = 1;
	assert_true(ds_step_cost_ref_now(&c, &sh, 0.0));

	/* memory-bound decode: 8 rows, REF 1.5x, rows nearly free: FAST even when all 8 are
	 * deterministic with pending candidates */
	fill(&c, 1.5, 1e-7, 0.005);
	sh = (struct ds_step_shape){.fast_tokens = 8, .pending = 8 * 16, .proposals = 8, .window = 32};
	assert_false(ds_step_cost_ref_now(&c, &sh, 1.0));
	/* if REF were as cheap as FAST there, REF now (it verifies the pending ones for free) */
	fill(&c, 1.0, 1e-7, 0.005);
	assert_true(ds_step_cost_ref_now(&c, &sh, 1.0));

	/* unknown sizes: never REF (unless bias 0) */
	ds_step_cost_reset(&c);
	feed(&c, DS_PATH_FAST, 8, 0.005, 2);
	assert_false(ds_step_cost_ref_now(&c, &sh, 1.0));
	assert_true(ds_step_cost_ref_now(&c, &sh, 0.0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table),
	    cmocka_unit_test(test_choice),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
