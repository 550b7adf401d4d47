/* test_bench_report.c - detserve-bench's per-request timing (TTFT, TPOT, gaps within chunks) and
 * its summary JSON: counts, errors by status, throughput, the det / non-det split and the DVR
 * rates, all against hand-computed values; records round-trip through JSON. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "report.h"
#include "grpc_wire.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-6)

static double jnum(const json_t *j, const char *a, const char *b, const char *c)
{
	const json_t *v = json_object_get(j, a);
	if (b)
		v = json_object_get(v, b);
	if (c)
		v = json_object_get(v, c);
	assert_non_null(v);
	return json_number_value(v);
}

static void test_rec_timing(void **state)
{
	(void)state;
	struct ds_bench_req q = {.max_tokens = 5};
	struct ds_bench_rec r = {.req = &q, .t_sched = 1.0};
	const int32_t a[2] = {7, 8}, b[3] = {9, 10, 11};
	assert_true(isnan(ds_bench_rec_ttft_ms(&r)));
	assert_int_equal(ds_bench_rec_add_tokens(&r, a, 2, 1.5), DS_OK); /* chunk of 2 at 1.5 s */
	assert_int_equal(ds_bench_rec_add_tokens(&r, b, 3, 2.5), DS_OK); /* chunk of 3 at 2.5 s */
	r.done = true;
	r.t_end = 3.0;
	assert_int_equal(r.n_tokens, 5);
	NEAR(ds_bench_rec_ttft_ms(&r), 500);
	NEAR(ds_bench_rec_tpot_ms(&r), 1000.0 / 4); /* (2.5 - 1.5) s over 4 gaps */
	NEAR(ds_bench_rec_e2e_ms(&r), 2000);
	/* gaps: token 2 came with token 1; token 3 after 1 s; 4 and 5 with it */
	NEAR(r.itl_ms[0], 0);
	NEAR(r.itl_ms[1], 1000);
	NEAR(r.itl_ms[2], 0);
	NEAR(r.itl_ms[3], 0);
	assert_int_equal(r.tokens[4], 11);
	ds_bench_rec_free(&r);
}

/* four requests: det OK, non-det OK, DEADLINE_EXCEEDED, INVALID_ARGUMENT */
static void make_run(struct ds_bench_req q[4], struct ds_bench_rec r[4])
{
	static const int32_t toks[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	memset(q, 0, 4 * sizeof(*q));
	memset(r, 0, 4 * sizeof(*r));
	q[0].deterministic = true;
	q[0].max_tokens = 10;
	q[1].max_tokens = 4;
	q[2].max_tokens = 4;
	q[3].max_tokens = 4;
	q[3].deterministic = true;
	for (int i = 0; i < 4; i++) {
		r[i].req = &q[i];
		r[i].done = true;
		r[i].t_sched = 0.1 * i;
	}
	/* det: 10 tokens, first at 0.2 s, last at 1.1 s; ends 1.2 s */
	ds_bench_rec_add_tokens(&r[0], toks, 1, 0.2);
	ds_bench_rec_add_tokens(&r[0], toks + 1, 9, 1.1);
	r[0].t_end = 1.2;
	r[0].dvr = (struct ds_bench_dvr){.verify_passes = 3,
	                                 .windows = 4,
	                                 .rollbacks = 1,
	                                 .rolled_back_tokens = 2,
	                                 .recomputed_tokens = 12};
	/* non-det: 4 tokens at 0.15, 0.25, 0.35, 0.45 (sched 0.1); ends 0.5 */
	for (int k = 0; k < 4; k++)
		ds_bench_rec_add_tokens(&r[1], toks + k, 1, 0.15 + 0.1 * k);
	r[1].t_end = 0.5;
	/* deadline after 1 token */
	ds_bench_rec_add_tokens(&r[2], toks, 1, 0.3);
	r[2].t_end = 0.9;
	r[2].code = DS_GRPC_DEADLINE_EXCEEDED;
	r[3].t_end = 0.31;
	r[3].code = DS_GRPC_INVALID_ARGUMENT;
	snprintf(r[3].message, sizeof(r[3].message), "bad \"token\"");
}

static void test_summary(void **state)
{
	(void)state;
	struct ds_bench_req q[4];
	struct ds_bench_rec r[4];
	make_run(q, r);
	json_t *s = ds_report_summary(r, 4, 2.0, json_pack("{s:s}", "label", "t"), NULL);
	assert_non_null(s);
	assert_string_equal(json_string_value(json_object_get(s, "schema")),
	                    "detserve-bench-summary/1");
	NEAR(jnum(s, "requests", "total", NULL), 4);
	NEAR(jnum(s, "requests", "deterministic", NULL), 2);
	NEAR(jnum(s, "requests", "ok", NULL), 2);
	NEAR(jnum(s, "requests", "errors", NULL), 2);
	NEAR(jnum(s, "requests", "tokens", NULL), 14); /* OK requests only */
	NEAR(jnum(s, "errors_by_status", "DEADLINE_EXCEEDED", NULL), 1);
	NEAR(jnum(s, "errors_by_status", "INVALID_ARGUMENT", NULL), 1);
	assert_int_equal(json_object_size(json_object_get(s, "errors_by_status")), 2);
	NEAR(jnum(s, "throughput", "req_per_s", NULL), 1.0);
	NEAR(jnum(s, "throughput", "tok_per_s", NULL), 7.0);
	NEAR(jnum(s, "throughput", "det_tok_per_s", NULL), 5.0);
	NEAR(jnum(s, "throughput", "nondet_tok_per_s", NULL), 2.0);
	/* det TTFT 200 ms, TPOT (1.1 - 0.2) / 9 s = 100 ms, E2E 1200 ms */
	const json_t *det = json_object_get(json_object_get(s, "latency"), "det");
	NEAR(jnum(det, "requests", NULL, NULL), 1);
	NEAR(jnum(det, "ttft_ms", "p50", NULL), 200);
	NEAR(jnum(det, "tpot_ms", "p99", NULL), 100);
	NEAR(jnum(det, "e2e_ms", "max", NULL), 1200);
	/* its gaps: 900 ms once, then 8 zeros: p50 0, max 900 */
	NEAR(jnum(det, "itl_ms", "n", NULL), 9);
	NEAR(jnum(det, "itl_ms", "p50", NULL), 0);
	NEAR(jnum(det, "itl_ms", "max", NULL), 900);
	/* non-det: TTFT 50 ms, TPOT 100 ms, E2E 400 ms */
	const json_t *nd = json_object_get(json_object_get(s, "latency"), "nondet");
	NEAR(jnum(nd, "ttft_ms", "p50", NULL), 50);
	NEAR(jnum(nd, "tpot_ms", "p50", NULL), 100);
	NEAR(jnum(nd, "e2e_ms", "p50", NULL), 400);
	/* all: TTFT {50, 200}: p50 125, p90 185 */
	const json_t *all = json_object_get(json_object_get(s, "latency"), "all");
	NEAR(jnum(all, "requests", NULL, NULL), 2);
	NEAR(jnum(all, "ttft_ms", "p50", NULL), 125);
	NEAR(jnum(all, "ttft_ms", "p90", NULL), 185);
	/* DVR over OK det requests: 10 tokens, 4 windows, 1 rollback */
	const json_t *d = json_object_get(s, "dvr");
	NEAR(jnum(d, "requests", NULL, NULL), 1);
	NEAR(jnum(d, "rollback_rate_per_window", NULL, NULL), 0.25);
	NEAR(jnum(d, "rollbacks_per_1k_tokens", NULL, NULL), 100);
	NEAR(jnum(d, "recompute_ratio", NULL, NULL), 1.2);
	NEAR(jnum(d, "rolled_back_ratio", NULL, NULL), 0.2);
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(s, "config"), "label")), "t");
	assert_true(json_is_null(json_object_get(s, "server")));

	/* the table prints without crashing and names the errors */
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ds_report_table(f, s);
	fclose(f);
	assert_non_null(strstr(buf, "DEADLINE_EXCEEDED=1"));
	assert_non_null(strstr(buf, "requests 4 (det 2)"));
	free(buf);
	json_decref(s);

	/* no samples: values are null, not NaN (JSON has no NaN) */
	s = ds_report_summary(r + 3, 1, 0.0, NULL, NULL);
	assert_true(json_is_null(json_object_get(
	    json_object_get(json_object_get(json_object_get(s, "latency"), "det"), "ttft_ms"),
	    "p50")));
	assert_true(json_is_null(json_object_get(json_object_get(s, "throughput"), "tok_per_s")));
	json_decref(s);
	for (int i = 0; i < 4; i++)
		ds_bench_rec_free(&r[i]);
}

static void test_records_roundtrip(void **state)
{
	(void)state;
	struct ds_bench_req q[4];
	struct ds_bench_rec r[4];
	char *buf = NULL;
	size_t len = 0;
	make_run(q, r);
	FILE *f = open_memstream(&buf, &len);
	assert_int_equal(ds_report_records(f, r, 4, true, NULL), DS_OK);
	fclose(f);
	int lines = 0;
	for (char *p = buf, *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++) {
		*nl = '\0';
		json_error_t je;
		json_t *j = json_loads(p, 0, &je);
		assert_non_null(j);
		assert_int_equal(json_integer_value(json_object_get(j, "i")), lines);
		if (lines == 0) {
			assert_true(json_is_true(json_object_get(j, "deterministic")));
			assert_int_equal(json_integer_value(json_object_get(j, "tokens")), 10);
			assert_int_equal(json_array_size(json_object_get(j, "itl_ms")), 9);
			assert_int_equal(json_array_size(json_object_get(j, "token_ids")), 10);
			NEAR(json_number_value(json_object_get(j, "ttft_ms")), 200);
			assert_int_equal(json_integer_value(json_object_get(
			                     json_object_get(j, "dvr"), "rollbacks")),
			                 1);
		}
		if (lines == 3) {
			assert_string_equal(json_string_value(json_object_get(j, "status")),
			                    "INVALID_ARGUMENT");
			assert_string_equal(json_string_value(json_object_get(j, "message")),
			                    "bad \"token\"");
			assert_true(json_is_null(json_object_get(j, "ttft_ms")));
		}
		json_decref(j);
	}
	assert_int_equal(lines, 4);
	free(buf);
	for (int i = 0; i < 4; i++)
		ds_bench_rec_free(&r[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rec_timing),
	    cmocka_unit_test(test_summary),
	    cmocka_unit_test(test_records_roundtrip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
