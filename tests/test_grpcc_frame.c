/* test_grpcc_frame.c - the client's gRPC framing: reassembly across arbitrary slice boundaries,
 * several messages per slice, limits and flags, grpc-timeout and grpc-message codecs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>

#include "../client/grpcc_frame.h"

struct got {
	int n;
	size_t lens[16];
	uint8_t first[16];
	uint8_t last[16];
	int stop_after; /* 0 = never */
};

static int on_msg(void *ud, const uint8_t *msg, size_t len)
{
	struct got *g = ud;
	g->lens[g->n] = len;
	g->first[g->n] = len ? msg[0] : 0;
	g->last[g->n] = len ? msg[len - 1] : 0;
	g->n++;
	return g->stop_after && g->n >= g->stop_after;
}

/* three messages of 0, 3 and 70000 bytes back to back */
static size_t build_stream(uint8_t *buf)
{
	size_t o = 0;
	ds_grpcc_frame_header(buf + o, 0);
	o += 5;
	ds_grpcc_frame_header(buf + o, 3);
	o += 5;
	buf[o++] = 1;
	buf[o++] = 2;
	buf[o++] = 3;
	ds_grpcc_frame_header(buf + o, 70000);
	o += 5;
	for (int i = 0; i < 70000; i++)
		buf[o++] = (uint8_t)(i * 7 + 1);
	return o;
}

static void check_got(const struct got *g)
{
	assert_int_equal(g->n, 3);
	assert_int_equal(g->lens[0], 0);
	assert_int_equal(g->lens[1], 3);
	assert_int_equal(g->first[1], 1);
	assert_int_equal(g->last[1], 3);
	assert_int_equal(g->lens[2], 70000);
	assert_int_equal(g->first[2], 1);
	assert_int_equal(g->last[2], (uint8_t)(69999 * 7 + 1));
}

static void test_deframer_any_split(void **state)
{
	(void)state;
	uint8_t *buf = malloc(80000);
	size_t n = build_stream(buf);
	/* whole, byte by byte, and a spread of chunk sizes that cut headers and bodies */
	static const size_t chunks[] = {80000, 1, 2, 3, 4, 5, 6, 7, 13, 4096, 16384};
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		struct ds_grpcc_deframer d;
		struct got g = {0};
		ds_grpcc_deframer_init(&d, 1 << 20);
		for (size_t off = 0; off < n; off += chunks[c]) {
			size_t k = n - off < chunks[c] ? n - off : chunks[c];
			assert_int_equal(ds_grpcc_deframer_feed(&d, buf + off, k, on_msg, &g, NULL),
			                 DS_OK);
		}
		assert_true(ds_grpcc_deframer_idle(&d));
		check_got(&g);
		ds_grpcc_deframer_free(&d);
	}
	free(buf);
}

static void test_deframer_partial_is_not_idle(void **state)
{
	(void)state;
	uint8_t hdr[7];
	struct ds_grpcc_deframer d;
	struct got g = {0};
	ds_grpcc_frame_header(hdr, 2);
	hdr[5] = 9;
	ds_grpcc_deframer_init(&d, 100);
	assert_int_equal(ds_grpcc_deframer_feed(&d, hdr, 3, on_msg, &g, NULL), DS_OK);
	assert_false(ds_grpcc_deframer_idle(&d));
	assert_int_equal(ds_grpcc_deframer_feed(&d, hdr + 3, 3, on_msg, &g, NULL), DS_OK);
	assert_false(ds_grpcc_deframer_idle(&d));
	assert_int_equal(g.n, 0);
	ds_grpcc_deframer_free(&d);
}

static void test_deframer_errors(void **state)
{
	(void)state;
	struct ds_grpcc_deframer d;
	struct ds_err err;
	struct got g = {0};
	uint8_t hdr[5];

	ds_grpcc_frame_header(hdr, 101);
	ds_grpcc_deframer_init(&d, 100);
	assert_int_equal(ds_grpcc_deframer_feed(&d, hdr, 5, on_msg, &g, &err), DS_ERR_TOO_LONG);
	assert_non_null(strstr(err.msg, "101"));
	ds_grpcc_deframer_free(&d);

	ds_grpcc_frame_header(hdr, 1);
	hdr[0] = 1; /* compressed */
	ds_grpcc_deframer_init(&d, 100);
	assert_int_equal(ds_grpcc_deframer_feed(&d, hdr, 5, on_msg, &g, &err), DS_ERR_UNSUPPORTED);
	ds_grpcc_deframer_free(&d);

	hdr[0] = 7;
	ds_grpcc_deframer_init(&d, 100);
	assert_int_equal(ds_grpcc_deframer_feed(&d, hdr, 5, on_msg, &g, &err), DS_ERR_FORMAT);
	ds_grpcc_deframer_free(&d);

	/* the receiver can stop delivery */
	uint8_t two[10];
	ds_grpcc_frame_header(two, 0);
	ds_grpcc_frame_header(two + 5, 0);
	g.stop_after = 1;
	ds_grpcc_deframer_init(&d, 100);
	assert_int_equal(ds_grpcc_deframer_feed(&d, two, 10, on_msg, &g, &err), DS_ERR_CANCELLED);
	assert_int_equal(g.n, 1);
	ds_grpcc_deframer_free(&d);
}

static void test_timeout_codec(void **state)
{
	(void)state;
	char b[10];
	uint64_t us;
	ds_grpcc_timeout_format(b, 1);
	assert_string_equal(b, "1u");
	ds_grpcc_timeout_format(b, 1500000);
	assert_string_equal(b, "1500000u");
	ds_grpcc_timeout_format(b, 99999999);
	assert_string_equal(b, "99999999u");
	ds_grpcc_timeout_format(b, 100000001); /* does not fit in u: ms, rounded up */
	assert_string_equal(b, "100001m");
	ds_grpcc_timeout_format(b, 200000ull * 1000000ull); /* 200000 s */
	assert_string_equal(b, "200000S");
	assert_true(strlen(b) <= 9);
	ds_grpcc_timeout_format(b, 3600ull * 1000000ull * 100000000ull); /* huge: capped in H */
	assert_int_equal(b[strlen(b) - 1], 'H');

	assert_int_equal(ds_grpcc_timeout_parse("250m", 4, &us), DS_OK);
	assert_int_equal(us, 250000);
	assert_int_equal(ds_grpcc_timeout_parse("2S", 2, &us), DS_OK);
	assert_int_equal(us, 2000000);
	assert_int_equal(ds_grpcc_timeout_parse("1500n", 5, &us), DS_OK);
	assert_int_equal(us, 2);
	assert_int_equal(ds_grpcc_timeout_parse("1H", 2, &us), DS_OK);
	assert_int_equal(us, 3600000000ull);
	assert_int_equal(ds_grpcc_timeout_parse("12", 2, &us), DS_ERR_INVALID);
	assert_int_equal(ds_grpcc_timeout_parse("m", 1, &us), DS_ERR_INVALID);
	assert_int_equal(ds_grpcc_timeout_parse("1x0m", 4, &us), DS_ERR_INVALID);
	assert_int_equal(ds_grpcc_timeout_parse("123456789m", 10, &us),
	                 DS_ERR_INVALID); /* > 8 digits */
}

static void test_percent_decode_and_names(void **state)
{
	(void)state;
	char out[32];
	const char *in = "bad %E2%89%A5 vocab 100%25";
	assert_int_equal(ds_grpcc_percent_decode(out, sizeof(out), in, strlen(in)),
	                 strlen("bad \xe2\x89\xa5 vocab 100%"));
	assert_string_equal(out, "bad \xe2\x89\xa5 vocab 100%");
	/* malformed escapes are kept verbatim */
	assert_int_equal(ds_grpcc_percent_decode(out, sizeof(out), "a%zz%4", 6), 6);
	assert_string_equal(out, "a%zz%4");
	/* truncation keeps the terminator */
	assert_int_equal(ds_grpcc_percent_decode(out, 4, "abcdef", 6), 3);
	assert_string_equal(out, "abc");

	assert_string_equal(ds_grpcc_code_name(0), "OK");
	assert_string_equal(ds_grpcc_code_name(8), "RESOURCE_EXHAUSTED");
	assert_string_equal(ds_grpcc_code_name(16), "UNAUTHENTICATED");
	assert_string_equal(ds_grpcc_code_name(17), "UNKNOWN");
	assert_string_equal(ds_grpcc_code_name(-1), "UNKNOWN");
	assert_int_equal(ds_grpcc_code_from_http(404), DS_GRPCC_UNIMPLEMENTED);
	assert_int_equal(ds_grpcc_code_from_http(503), DS_GRPCC_UNAVAILABLE);
	assert_int_equal(ds_grpcc_code_from_http(500), DS_GRPCC_UNKNOWN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_deframer_any_split),
	    cmocka_unit_test(test_deframer_partial_is_not_idle),
	    cmocka_unit_test(test_deframer_errors),
	    cmocka_unit_test(test_timeout_codec),
	    cmocka_unit_test(test_percent_decode_and_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
