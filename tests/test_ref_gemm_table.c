/* test_ref_gemm_table.c - the reference path's (N, K) -> GEMM variant table
 * (refpath/ref_gemm_table.h): defaults, DS_REF_GEMM_TABLE-style overrides, and clear errors
 * (naming the variable and the entry) for every malformed spec, with the defaults left. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "ref_gemm_table.h"

#define NV 9

static void test_defaults(void **state)
{
	(void)state;
	struct ds_ref_gemm_table t;
	struct ds_err err = {{0}};
	assert_int_equal(ds_ref_gemm_table_init(&t, NULL, NV, &err), DS_OK);
	assert_int_equal(ds_ref_gemm_table_variant(&t, 6144, 4096), 0);
	assert_int_equal(ds_ref_gemm_table_variant(&t, 17, 64), 0); /* unknown shape */
	struct ds_ref_gemm_table e;
	assert_int_equal(ds_ref_gemm_table_init(&e, "  ", NV, &err), DS_OK);
	assert_memory_equal(&t, &e, sizeof(t));
}

static void test_override(void **state)
{
	(void)state;
	struct ds_ref_gemm_table t;
	struct ds_err err = {{0}};
	assert_int_equal(
	    ds_ref_gemm_table_init(&t, "6144x4096:7, 4096X4096:8 ,100x64:3,100x64:5", NV, &err),
	    DS_OK);
	assert_int_equal(ds_ref_gemm_table_variant(&t, 6144, 4096), 7);
	assert_int_equal(ds_ref_gemm_table_variant(&t, 4096, 4096), 8);
	assert_int_equal(ds_ref_gemm_table_variant(&t, 100, 64), 5); /* the later entry wins */
	assert_int_equal(ds_ref_gemm_table_variant(&t, 64, 100), 0); /* (N, K) is ordered */
	assert_int_equal(ds_ref_gemm_table_variant(&t, 4096, 14336), 0);
	assert_int_equal(ds_ref_gemm_table_init(&t, "4096x14336:8", NV, &err), DS_OK);
	assert_int_equal(ds_ref_gemm_table_variant(&t, 4096, 14336), 8);
	assert_int_equal(ds_ref_gemm_table_variant(&t, 6144, 4096), 0); /* fresh from defaults */
}

static void test_bad_specs(void **state)
{
	(void)state;
	static const struct {
		const char *spec, *want;
	} bad[] = {
	    {"6144x4096", "entry 1"},
	    {"6144x4096:", "entry 1"},
	    {"6144:7", "entry 1"},
	    {"x4096:7", "entry 1"},
	    {"6144x4096:7,", "entry 2"},
	    {"6144x4096:7,,1x1:0", "entry 2"},
	    {"6144x4096:9", "out of range"},
	    {"6144x4096:-1", "entry 1"},
	    {"0x4096:1", "entry 1"},
	    {"6144x4096:7x", "entry 1"},
	    {"6144x4096:7;1x1:0", "entry 1"},
	    {"99999999999x1:0", "entry 1"},
	    {"1x1:0,2x2:1,3x3:q", "entry 3"},
	    {"+5x5:1", "entry 1"},
	};
	struct ds_ref_gemm_table def;
	struct ds_err err;
	assert_int_equal(ds_ref_gemm_table_init(&def, NULL, NV, &err), DS_OK);
	for (size_t i = 0; i < DS_ARRAY_LEN(bad); i++) {
		struct ds_ref_gemm_table t;
		memset(&err, 0, sizeof(err));
		assert_int_equal(ds_ref_gemm_table_init(&t, bad[i].spec, NV, &err), DS_ERR_INVALID);
		if (!strstr(err.msg, DS_REF_GEMM_TABLE_ENV) || !strstr(err.msg, bad[i].want))
			fail_msg("spec \"%s\": message \"%s\" lacks \"%s\"", bad[i].spec, err.msg,
			         bad[i].want);
		assert_memory_equal(&t, &def, sizeof(t)); /* the defaults, not half a table */
	}
}

static void test_too_many(void **state)
{
	(void)state;
	char spec[2048] = "";
	size_t len = 0;
	for (int i = 0; i < DS_REF_GEMM_TABLE_MAX + 1; i++)
		len += (size_t)snprintf(spec + len, sizeof(spec) - len, "%s%dx%d:1", i ? "," : "",
		                        i + 1, 64);
	struct ds_ref_gemm_table t;
	struct ds_err err = {{0}};
	assert_int_equal(ds_ref_gemm_table_init(&t, spec, NV, &err), DS_ERR_INVALID);
	assert_non_null(strstr(err.msg, "more than"));
	/* the same shape over and over is one pick */
	len = 0;
	for (int i = 0; i < 100; i++)
		len += (size_t)snprintf(spec + len, sizeof(spec) - len, "%s7x64:%d", i ? "," : "",
		                        i % NV);
	assert_int_equal(ds_ref_gemm_table_init(&t, spec, NV, &err), DS_OK);
	assert_int_equal(ds_ref_gemm_table_variant(&t, 7, 64), 99 % NV);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_override),
	    cmocka_unit_test(test_bad_specs),
	    cmocka_unit_test(test_too_many),
	};
	return cmocka_run_group_tests_name("ref_gemm_table", tests, NULL, NULL);
}
