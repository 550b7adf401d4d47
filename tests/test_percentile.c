/* test_percentile.c - detserve-bench statistics: type-7 percentiles against hand-computed values,
 * sample summaries, and the per-request latency definitions (TTFT, TPOT, inter-token gaps). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "../bench/loadgen/stats.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-9)

static void test_percentile_hand_values(void **state)
{
	(void)state;
	/* x = 10 20 30 40 50: h = 4p/100 */
	const double x[] = {10, 20, 30, 40, 50};
	NEAR(ds_percentile(x, 5, 0), 10);
	NEAR(ds_percentile(x, 5, 50), 30);   /* h = 2 */
	NEAR(ds_percentile(x, 5, 90), 46);   /* h = 3.6: 40 + 0.6 * 10 */
	NEAR(ds_percentile(x, 5, 99), 49.6); /* h = 3.96 */
	NEAR(ds_percentile(x, 5, 99.9), 49.96);
	NEAR(ds_percentile(x, 5, 25), 20); /* h = 1 */
	NEAR(ds_percentile(x, 5, 10), 14); /* h = 0.4 */
	NEAR(ds_percentile(x, 5, 100), 50);
	NEAR(ds_percentile(x, 5, 150), 50); /* clamped */
	NEAR(ds_percentile(x, 5, -3), 10);
	/* even count: x = 1 2 3 4, median = 2.5; p90: h = 2.7 -> 3.7 */
	const double y[] = {1, 2, 3, 4};
	NEAR(ds_percentile(y, 4, 50), 2.5);
	NEAR(ds_percentile(y, 4, 90), 3.7);
	/* one sample: every percentile is that sample */
	const double z[] = {7.5};
	NEAR(ds_percentile(z, 1, 0), 7.5);
	NEAR(ds_percentile(z, 1, 99.9), 7.5);
	assert_true(isnan(ds_percentile(x, 0, 50)));
}

static void test_percentile_1_to_1000(void **state)
{
	(void)state;
	/* 1..1000: h = 999p/100, value = 1 + h */
	double v[1000];
	for (int i = 0; i < 1000; i++)
		v[i] = i + 1;
	NEAR(ds_percentile(v, 1000, 50), 500.5);
	NEAR(ds_percentile(v, 1000, 90), 900.1);
	NEAR(ds_percentile(v, 1000, 99), 990.01);
	NEAR(ds_percentile(v, 1000, 99.9), 999.001);
}

static void test_samples_dist_sorts(void **state)
{
	(void)state;
	struct ds_samples s;
	struct ds_dist d;
	ds_samples_init(&s);
	ds_samples_dist(&s, &d);
	assert_int_equal(d.n, 0);
	assert_true(isnan(d.p50) && isnan(d.mean));
	const double in[] = {50, 10, 40, 20, 30}; /* unsorted on purpose */
	for (int i = 0; i < 5; i++)
		assert_int_equal(ds_samples_add(&s, in[i]), DS_OK);
	ds_samples_dist(&s, &d);
	assert_int_equal(d.n, 5);
	NEAR(d.mean, 30);
	NEAR(d.min, 10);
	NEAR(d.max, 50);
	NEAR(d.p50, 30);
	NEAR(d.p90, 46);
	NEAR(d.p99, 49.6);
	NEAR(d.p999, 49.96);
	/* adding after a sort keeps it correct */
	assert_int_equal(ds_samples_add(&s, 0), DS_OK);
	ds_samples_dist(&s, &d);
	NEAR(d.min, 0);
	NEAR(d.p50, 25); /* 0 10 20 30 40 50: h = 2.5 */
	ds_samples_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_percentile_hand_values),
	    cmocka_unit_test(test_percentile_1_to_1000),
	    cmocka_unit_test(test_samples_dist_sorts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
