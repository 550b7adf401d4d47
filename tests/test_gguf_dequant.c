/* test_gguf_dequant.c - model/dequant.c against the `gguf` PyPI package's numpy dequantizer.
 *
 * tests/fixtures/gguf_dequant.json (made by tests/gguf/make_dequant_fixture.py) holds raw blocks
 * of every supported type and the f32 values numpy computes; we must match them bit for bit, and
 * the bf16 path must equal round-to-nearest-even of those values. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "dequant.h"
#include "gguf.h"

#ifndef DS_SOURCE_ROOT
#define DS_SOURCE_ROOT "."
#endif

static json_t *load_fixture(void)
{
	json_error_t jerr;
	json_t *root = json_load_file(DS_SOURCE_ROOT "/tests/fixtures/gguf_dequant.json", 0, &jerr);
	if (!root)
		fail_msg("fixture: %s (line %d)", jerr.text, jerr.line);
	return root;
}

static uint8_t *hex_decode(const char *hex, size_t *len)
{
	size_t n = strlen(hex) / 2;
	uint8_t *b = malloc(n ? n : 1);
	assert_non_null(b);
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
		b[i] = (uint8_t)v;
	}
	*len = n;
	return b;
}

static void check_case(json_t *c, int *types_seen)
{
	const char *name = json_string_value(json_object_get(c, "name"));
	uint32_t type = (uint32_t)json_integer_value(json_object_get(c, "ggml_type"));
	size_t n = (size_t)json_integer_value(json_object_get(c, "n"));
	size_t raw_len;
	uint8_t *raw = hex_decode(json_string_value(json_object_get(c, "raw_hex")), &raw_len);
	json_t *bits = json_object_get(c, "f32_bits");
	assert_int_equal(json_array_size(bits), n);

	uint32_t blck, bytes;
	assert_int_equal(ds_gguf_type_size(type, &blck, &bytes), DS_OK);
	assert_int_equal(raw_len, n / blck * bytes);
	assert_true(ds_dequant_supported(type));

	float *f = malloc(n * sizeof(float));
	uint16_t *h = malloc((n + 1) * sizeof(uint16_t));
	assert_non_null(f);
	assert_non_null(h);
	h[n] = 0xbeef; /* guard */
	assert_int_equal(ds_dequant_f32(type, raw, n, f), DS_OK);
	assert_int_equal(ds_dequant_bf16(type, raw, n, h), DS_OK);
	assert_int_equal(h[n], 0xbeef);
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t want =
		    (uint32_t)strtoul(json_string_value(json_array_get(bits, i)), NULL, 16);
		uint32_t got;
		memcpy(&got, &f[i], 4);
		float wf;
		memcpy(&wf, &want, 4);
		if (got != want || h[i] != ds_f32_to_bf16(wf)) {
			if (bad++ < 5)
				print_error("%s[%zu]: got %08x (bf16 %04x), numpy %08x (%g)\n",
				            name, i, got, h[i], want, (double)wf);
		}
	}
	assert_int_equal(bad, 0);
	if (type < 64)
		types_seen[type] = 1;
	free(f);
	free(h);
	free(raw);
}

static void test_matches_numpy(void **state)
{
	(void)state;
	json_t *root = load_fixture();
	json_t *cases = json_object_get(root, "cases");
	int seen[64] = {0};
	for (size_t i = 0; i < json_array_size(cases); i++)
		check_case(json_array_get(cases, i), seen);
	/* every format the issue requires is covered (plus the optional K-quants) */
	const uint32_t need[] = {DS_GGML_F32,  DS_GGML_F16,  DS_GGML_BF16, DS_GGML_Q8_0,
	                         DS_GGML_Q4_0, DS_GGML_Q4_1, DS_GGML_Q5_0, DS_GGML_Q5_1,
	                         DS_GGML_Q2_K, DS_GGML_Q3_K, DS_GGML_Q4_K, DS_GGML_Q5_K,
	                         DS_GGML_Q6_K};
	for (size_t i = 0; i < DS_ARRAY_LEN(need); i++)
		assert_true(seen[need[i]]);
	json_decref(root);
}

static void test_rejects(void **state)
{
	(void)state;
	uint8_t raw[64] = {0};
	float f[64];
	uint16_t h[64];
	/* IQ4_NL (20) has a size but no dequantizer; 99 is no type at all */
	assert_false(ds_dequant_supported(20));
	assert_int_equal(ds_dequant_f32(20, raw, 32, f), DS_ERR_UNSUPPORTED);
	assert_int_equal(ds_dequant_bf16(99, raw, 32, h), DS_ERR_UNSUPPORTED);
	/* n not a multiple of the block */
	assert_int_equal(ds_dequant_f32(DS_GGML_Q8_0, raw, 31, f), DS_ERR_INVALID);
	assert_int_equal(ds_dequant_bf16(DS_GGML_Q4_1, raw, 33, h), DS_ERR_INVALID);
}

/* Hand-made blocks with known answers, independent of the fixture. */
static void test_known_blocks(void **state)
{
	(void)state;
	uint8_t b[20];
	float y[32];
	/* Q4_1: d = 0.5 (0x3800), m = -1 (0xbc00); byte j = (j & 15) | ((15 - (j & 15)) << 4) */
	b[0] = 0x00, b[1] = 0x38, b[2] = 0x00, b[3] = 0xbc;
	for (int j = 0; j < 16; j++)
		b[4 + j] = (uint8_t)(j | (15 - j) << 4);
	assert_int_equal(ds_dequant_f32(DS_GGML_Q4_1, b, 32, y), DS_OK);
	for (int j = 0; j < 16; j++) {
		assert_true(y[j] == 0.5f * (float)j - 1.0f);
		assert_true(y[j + 16] == 0.5f * (float)(15 - j) - 1.0f);
	}
	/* Q4_0: d = 2 (0x4000), nibble q -> (q - 8) * 2 */
	b[0] = 0x00, b[1] = 0x40;
	for (int j = 0; j < 16; j++)
		b[2 + j] = (uint8_t)(j | (15 - j) << 4);
	assert_int_equal(ds_dequant_f32(DS_GGML_Q4_0, b, 32, y), DS_OK);
	for (int j = 0; j < 16; j++) {
		assert_true(y[j] == 2.0f * (float)(j - 8));
		assert_true(y[j + 16] == 2.0f * (float)(7 - j));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_matches_numpy),
	    cmocka_unit_test(test_rejects),
	    cmocka_unit_test(test_known_blocks),
	};
	return cmocka_run_group_tests_name("gguf_dequant", tests, NULL, NULL);
}
