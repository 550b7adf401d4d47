/* test_bench_workload.c - detserve-bench request streams: the same seed gives the same stream,
 * the deterministic fraction does not move arrivals or prompts, Poisson rate and caps, length
 * distributions, and the JSONL trace reader's fields and errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../bench/loadgen/workload.h"

static void test_len_dist(void **state)
{
	(void)state;
	struct ds_len_dist d;
	struct ds_err err;
	struct ds_bench_rng r = {3};
	char buf[64];
	assert_int_equal(ds_len_dist_parse("x", "17", &d, &err), DS_OK);
	assert_int_equal(ds_len_dist_draw(&d, &r), 17);
	assert_int_equal(ds_len_dist_parse("x", "fixed:5", &d, &err), DS_OK);
	assert_int_equal(d.a, 5);
	assert_int_equal(ds_len_dist_parse("x", "uniform:4:9", &d, &err), DS_OK);
	int seen[10] = {0};
	for (int i = 0; i < 2000; i++) {
		int v = ds_len_dist_draw(&d, &r);
		assert_true(v >= 4 && v <= 9);
		seen[v]++;
	}
	for (int v = 4; v <= 9; v++)
		assert_true(seen[v] > 200); /* each of 6 values ~333 times */
	ds_len_dist_format(&d, buf, sizeof(buf));
	assert_string_equal(buf, "uniform:4:9");
	assert_int_equal(ds_len_dist_parse("--output-len", "uniform:9:4", &d, &err),
	                 DS_ERR_INVALID);
	assert_non_null(strstr(err.msg, "--output-len"));
	assert_int_equal(ds_len_dist_parse("x", "0", &d, &err), DS_ERR_INVALID);
	assert_int_equal(ds_len_dist_parse("x", "abc", &d, &err), DS_ERR_INVALID);
}

static void test_poisson_reproducible(void **state)
{
	(void)state;
	struct ds_workload_opts o;
	struct ds_bench_req *a, *b, *c;
	int na, nb, nc;
	ds_workload_opts_default(&o);
	o.n_requests = 2000;
	o.rate = 50;
	o.det_fraction = 0.25;
	o.output_len = (struct ds_len_dist){DS_LEN_UNIFORM, 1, 64};
	assert_int_equal(ds_workload_poisson(&o, &a, &na, NULL), DS_OK);
	assert_int_equal(ds_workload_poisson(&o, &b, &nb, NULL), DS_OK);
	o.det_fraction = 0.5;
	assert_int_equal(ds_workload_poisson(&o, &c, &nc, NULL), DS_OK);
	assert_int_equal(na, 2000);
	int det_a = 0, det_c = 0;
	for (int i = 0; i < na; i++) {
		assert_true(a[i].arrival_s == b[i].arrival_s && a[i].seed == b[i].seed);
		assert_int_equal(a[i].deterministic, b[i].deterministic);
		assert_int_equal(a[i].n_prompt, 32);
		assert_memory_equal(a[i].prompt, b[i].prompt, 32 * sizeof(int32_t));
		for (int k = 0; k < 32; k++)
			assert_true(a[i].prompt[k] >= 0 && a[i].prompt[k] < 256);
		/* only the mix changed: arrivals, prompts and lengths stay */
		assert_true(a[i].arrival_s == c[i].arrival_s && a[i].max_tokens == c[i].max_tokens);
		assert_memory_equal(a[i].prompt, c[i].prompt, 32 * sizeof(int32_t));
		det_a += a[i].deterministic;
		det_c += c[i].deterministic;
		if (a[i].deterministic)
			assert_true(c[i].deterministic); /* a superset at a higher fraction */
		assert_true(a[i].seed < (1ull << 53));
	}
	assert_true(det_a > 400 && det_a < 600);  /* 25% of 2000 */
	assert_true(det_c > 900 && det_c < 1100); /* 50% */
	/* mean gap 1/rate: 2000 arrivals in about 40 s */
	assert_true(a[na - 1].arrival_s > 36 && a[na - 1].arrival_s < 44);
	ds_workload_free(a, na);
	ds_workload_free(b, nb);
	ds_workload_free(c, nc);

	o.seed = 2;
	o.duration_s = 5;
	assert_int_equal(ds_workload_poisson(&o, &a, &na, NULL), DS_OK);
	assert_true(na > 200 && na < 300); /* ~250 arrivals in 5 s */
	assert_true(a[na - 1].arrival_s <= 5);
	ds_workload_free(a, na);

	o.rate = 0;
	o.duration_s = 0;
	o.n_requests = 10;
	assert_int_equal(ds_workload_poisson(&o, &a, &na, NULL), DS_OK);
	for (int i = 0; i < na; i++)
		assert_true(a[i].arrival_s == 0);
	ds_workload_free(a, na);
}

static char *write_tmp(const char *text)
{
	char *path = strdup("/tmp/ds-trace-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_trace(void **state)
{
	(void)state;
	struct ds_workload_opts o;
	struct ds_bench_req *q;
	struct ds_err err;
	int n;
	ds_workload_opts_default(&o);
	o.vocab = 10;
	char *p = write_tmp(
	    "{\"arrival_s\": 0.5, \"prompt_ids\": [1, 2, 3], \"max_tokens\": 7, \"deterministic\": "
	    "true,"
	    " \"seed\": 99, \"tag\": \"probe\"}\n"
	    "\n"
	    "{\"arrival_s\": 0.1, \"prompt\": \"hello\", \"temperature\": 0.7, \"top_p\": 0.9}\n"
	    "{\"arrival_s\": 0.2, \"prompt_len\": 5}\n");
	assert_int_equal(ds_workload_trace(p, &o, &q, &n, &err), DS_OK);
	assert_int_equal(n, 3);
	/* sorted by arrival */
	assert_true(q[0].arrival_s == 0.1 && q[1].arrival_s == 0.2 && q[2].arrival_s == 0.5);
	assert_string_equal(q[0].prompt_text, "hello");
	assert_true(fabsf(q[0].temperature - 0.7f) < 1e-6 && fabsf(q[0].top_p - 0.9f) < 1e-6);
	assert_false(q[0].deterministic);
	assert_int_equal(q[0].max_tokens, 32); /* default output length */
	assert_int_equal(q[1].n_prompt, 5);
	for (int i = 0; i < 5; i++)
		assert_true(q[1].prompt[i] >= 0 && q[1].prompt[i] < 10);
	assert_int_equal(q[2].n_prompt, 3);
	assert_int_equal(q[2].prompt[2], 3);
	assert_int_equal(q[2].max_tokens, 7);
	assert_true(q[2].deterministic);
	assert_int_equal(q[2].seed, 99);
	assert_string_equal(q[2].tag, "probe");
	ds_workload_free(q, n);
	unlink(p);
	free(p);

	static const char *const bad[] = {
	    "{\"arrival_s\": 0, \"prompt_len\": 2}\n{\"prompt_len\": 3}\n", /* line 2: no arrival */
	    "{\"arrival_s\": 0, \"prompt_len\": 2}\n{\"arrival_s\": 1}\n",  /* no prompt */
	    "{\"arrival_s\": 0, \"prompt_len\": 2}\nnot json\n",            /* bad JSON */
	    "{\"arrival_s\": 0, \"prompt_len\": 2}\n{\"arrival_s\": 1, \"prompt_ids\": [1, "
	    "\"x\"]}\n",
	    "{\"arrival_s\": 0, \"prompt_len\": 2}\n{\"arrival_s\": 1, \"prompt_len\": 2, "
	    "\"max_tokens\": 0}\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = write_tmp(bad[i]);
		assert_int_equal(ds_workload_trace(p, &o, &q, &n, &err), DS_ERR_FORMAT);
		assert_non_null(strstr(err.msg, p));
		assert_non_null(strstr(err.msg, ":2:"));
		assert_null(q);
		unlink(p);
		free(p);
	}
	assert_int_equal(ds_workload_trace("/nonexistent/trace.jsonl", &o, &q, &n, &err),
	                 DS_ERR_IO);
	assert_non_null(strstr(err.msg, "/nonexistent/trace.jsonl"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_len_dist),
	    cmocka_unit_test(test_poisson_reproducible),
	    cmocka_unit_test(test_trace),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
