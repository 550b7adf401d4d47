/* test_grpc_wire.c - the shared gRPC wire module (grpc/grpc_wire.c) used by the server and the
 * client: reassembly across arbitrary slice boundaries (every split size, several messages per
 * slice, zero-length messages), limits and flag bytes, sticky errors, the receiver stopping
 * delivery, grpc-timeout format/parse (units, rounding up, saturation, round trips),
 * grpc-message percent-encoding/decoding (escapes, truncation at whole escapes, round trips),
 * status names and the HTTP-status fallback. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "grpc_wire.h"

struct got {
	int n;
	size_t lens[16];
	uint8_t first[16];
	uint8_t last[16];
	int stop_after; /* 0 = never */
};

static enum ds_status on_msg(void *ud, const uint8_t *msg, size_t len, struct ds_err *err)
{
	struct got *g = ud;
	assert_true(g->n < 16);
	g->lens[g->n] = len;
	g->first[g->n] = len ? msg[0] : 0;
	g->last[g->n] = len ? msg[len - 1] : 0;
	g->n++;
	if (g->stop_after && g->n >= g->stop_after)
		return ds_errf(err, DS_ERR_CANCELLED, "stopped by the receiver");
	return DS_OK;
}

/* three messages of 0, 3 and 70000 bytes back to back */
static size_t build_stream(uint8_t *buf)
{
	size_t o = 0;
	ds_grpc_frame_prefix(buf + o, 0);
	o += 5;
	ds_grpc_frame_prefix(buf + o, 3);
	o += 5;
	buf[o++] = 1;
	buf[o++] = 2;
	buf[o++] = 3;
	ds_grpc_frame_prefix(buf + o, 70000);
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

static void feed_in_chunks(const uint8_t *buf, size_t n, size_t chunk)
{
	struct ds_grpc_deframer d;
	struct got g = {0};
	ds_grpc_deframer_init(&d, 1 << 20);
	for (size_t off = 0; off < n; off += chunk) {
		size_t k = n - off < chunk ? n - off : chunk;
		assert_int_equal(ds_grpc_deframer_feed(&d, buf + off, k, on_msg, &g, NULL), DS_OK);
	}
	assert_true(ds_grpc_deframer_idle(&d));
	check_got(&g);
	ds_grpc_deframer_free(&d);
}

static void test_deframer_any_split(void **state)
{
	(void)state;
	uint8_t *buf = malloc(80000);
	assert_non_null(buf);
	size_t n = build_stream(buf);
	/* whole, every split size that cuts the prefixes and the small body differently, and a
	 * spread of larger chunk sizes that cut the big body */
	for (size_t c = 1; c <= 24; c++)
		feed_in_chunks(buf, n, c);
	static const size_t chunks[] = {80000, 4096, 16384, 69999, 70000, 70001, 70018};
	for (size_t c = 0; c < DS_ARRAY_LEN(chunks); c++)
		feed_in_chunks(buf, n, chunks[c]);
	/* every single cut point of the stream into two slices */
	for (size_t cut = 0; cut <= 40; cut++) {
		struct ds_grpc_deframer d;
		struct got g = {0};
		ds_grpc_deframer_init(&d, 1 << 20);
		assert_int_equal(ds_grpc_deframer_feed(&d, buf, cut, on_msg, &g, NULL), DS_OK);
		assert_int_equal(ds_grpc_deframer_feed(&d, buf + cut, n - cut, on_msg, &g, NULL),
		                 DS_OK);
		check_got(&g);
		ds_grpc_deframer_free(&d);
	}
	free(buf);
}

static void test_deframer_partial_is_not_idle(void **state)
{
	(void)state;
	uint8_t hdr[7];
	struct ds_grpc_deframer d;
	struct got g = {0};
	ds_grpc_frame_prefix(hdr, 2);
	hdr[5] = 9;
	hdr[6] = 8;
	ds_grpc_deframer_init(&d, 100);
	assert_true(ds_grpc_deframer_idle(&d));
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr, 0, on_msg, &g, NULL), DS_OK);
	assert_true(ds_grpc_deframer_idle(&d));
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr, 3, on_msg, &g, NULL), DS_OK);
	assert_false(ds_grpc_deframer_idle(&d)); /* inside the prefix */
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr + 3, 3, on_msg, &g, NULL), DS_OK);
	assert_false(ds_grpc_deframer_idle(&d)); /* inside the body */
	assert_int_equal(g.n, 0);
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr + 6, 1, on_msg, &g, NULL), DS_OK);
	assert_true(ds_grpc_deframer_idle(&d));
	assert_int_equal(g.n, 1);
	assert_int_equal(g.lens[0], 2);
	assert_int_equal(g.first[0], 9);
	assert_int_equal(g.last[0], 8);
	ds_grpc_deframer_free(&d);
}

static void test_deframer_errors(void **state)
{
	(void)state;
	struct ds_grpc_deframer d;
	struct ds_err err;
	struct got g = {0};
	uint8_t hdr[5];

	/* over the limit: refused at the prefix, before any body byte arrives or is buffered */
	ds_grpc_frame_prefix(hdr, 101);
	ds_grpc_deframer_init(&d, 100);
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr, 5, on_msg, &g, &err), DS_ERR_TOO_LONG);
	assert_non_null(strstr(err.msg, "101"));
	assert_non_null(strstr(err.msg, "100"));
	assert_null(d.buf);
	/* sticky: further input is refused with the same status */
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr, 5, on_msg, &g, &err), DS_ERR_TOO_LONG);
	assert_int_equal(g.n, 0);
	ds_grpc_deframer_free(&d);
	/* exactly the limit is accepted */
	uint8_t at_limit[105] = {0};
	ds_grpc_frame_prefix(at_limit, 100);
	ds_grpc_deframer_init(&d, 100);
	assert_int_equal(ds_grpc_deframer_feed(&d, at_limit, 105, on_msg, &g, &err), DS_OK);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.lens[0], 100);
	ds_grpc_deframer_free(&d);
	g.n = 0;

	ds_grpc_frame_prefix(hdr, 1);
	hdr[0] = 1; /* compressed */
	ds_grpc_deframer_init(&d, 100);
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr, 5, on_msg, &g, &err), DS_ERR_UNSUPPORTED);
	assert_non_null(strstr(err.msg, "compress"));
	ds_grpc_deframer_free(&d);
	/* the compressed flag is refused before the length is looked at */
	ds_grpc_frame_prefix(hdr, 1000);
	hdr[0] = 1;
	ds_grpc_deframer_init(&d, 100);
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr, 5, on_msg, &g, &err), DS_ERR_UNSUPPORTED);
	ds_grpc_deframer_free(&d);

	hdr[0] = 7;
	ds_grpc_deframer_init(&d, 100);
	assert_int_equal(ds_grpc_deframer_feed(&d, hdr, 5, on_msg, &g, &err), DS_ERR_FORMAT);
	assert_non_null(strstr(err.msg, "0x07"));
	ds_grpc_deframer_free(&d);
	assert_int_equal(g.n, 0);

	/* the receiver can stop delivery: its status comes back as is, and sticks */
	uint8_t two[10];
	ds_grpc_frame_prefix(two, 0);
	ds_grpc_frame_prefix(two + 5, 0);
	g.stop_after = 1;
	ds_grpc_deframer_init(&d, 100);
	assert_int_equal(ds_grpc_deframer_feed(&d, two, 10, on_msg, &g, &err), DS_ERR_CANCELLED);
	assert_string_equal(err.msg, "stopped by the receiver");
	assert_int_equal(g.n, 1);
	assert_int_equal(ds_grpc_deframer_feed(&d, two, 10, on_msg, &g, &err), DS_ERR_CANCELLED);
	assert_int_equal(g.n, 1);
	ds_grpc_deframer_free(&d);
}

static void test_timeout_format(void **state)
{
	(void)state;
	char b[10];
	uint64_t ns;
	ds_grpc_timeout_format(b, 1000); /* 1 us */
	assert_string_equal(b, "1u");
	ds_grpc_timeout_format(b, 0); /* never "0": that would be an expired deadline */
	assert_string_equal(b, "1u");
	ds_grpc_timeout_format(b, 1500); /* 1.5 us: rounded up, never shortened */
	assert_string_equal(b, "2u");
	ds_grpc_timeout_format(b, 1500000ull * 1000);
	assert_string_equal(b, "1500000u");
	ds_grpc_timeout_format(b, 99999999ull * 1000);
	assert_string_equal(b, "99999999u");
	ds_grpc_timeout_format(b, 100000001ull * 1000); /* does not fit in u: ms, rounded up */
	assert_string_equal(b, "100001m");
	ds_grpc_timeout_format(b, 200000ull * 1000000000ull); /* 200000 s */
	assert_string_equal(b, "200000S");
	assert_true(strlen(b) <= 9);
	ds_grpc_timeout_format(b, UINT64_MAX); /* huge: in H, within 8 digits */
	assert_int_equal(b[strlen(b) - 1], 'H');
	assert_true(strlen(b) <= 9);

	/* round trip: the parsed deadline is never shorter than the one formatted */
	static const uint64_t vals[] = {1,           999,           1000,
	                                1001,        123456789,     1000000000,
	                                99999999999, 3600000000000, 86400000000000ull,
	                                1ull << 50,  1ull << 62};
	for (size_t i = 0; i < DS_ARRAY_LEN(vals); i++) {
		ds_grpc_timeout_format(b, vals[i]);
		assert_int_equal(ds_grpc_timeout_parse(b, strlen(b), &ns), DS_OK);
		assert_true(ns >= vals[i]);
	}
}

static void test_timeout_parse(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		uint64_t ns;
	} ok[] = {
	    {"250m", 250000000ull},
	    {"150m", 150000000ull},
	    {"2S", 2000000000ull},
	    {"1500n", 1500},
	    {"7u", 7000},
	    {"3M", 180000000000ull},
	    {"1H", 3600000000000ull},
	    {"0S", 0},
	    {"99999999H", UINT64_MAX}, /* overflows 64-bit ns: saturated, not wrapped */
	};
	/* no unit, no digits, empty, a non-digit, a sign, a lower-case unit, > 8 digits */
	static const char *const bad[] = {"12", "m", "", "1x0m", "-1m", "5s", "123456789m"};
	for (size_t i = 0; i < DS_ARRAY_LEN(ok); i++) {
		uint64_t ns = 12345;
		assert_int_equal(ds_grpc_timeout_parse(ok[i].s, strlen(ok[i].s), &ns), DS_OK);
		assert_true(ns == ok[i].ns);
	}
	for (size_t i = 0; i < DS_ARRAY_LEN(bad); i++) {
		uint64_t ns = 12345;
		assert_int_equal(ds_grpc_timeout_parse(bad[i], strlen(bad[i]), &ns),
		                 DS_ERR_INVALID);
		assert_int_equal(ns, 12345); /* untouched */
	}
}

static void test_percent_codec(void **state)
{
	(void)state;
	char out[32], enc[128];
	const char *in = "bad %E2%89%A5 vocab 100%25";
	assert_int_equal(ds_grpc_percent_decode(out, sizeof(out), in, strlen(in)),
	                 strlen("bad \xe2\x89\xa5 vocab 100%"));
	assert_string_equal(out, "bad \xe2\x89\xa5 vocab 100%");
	/* malformed escapes are kept verbatim */
	assert_int_equal(ds_grpc_percent_decode(out, sizeof(out), "a%zz%4", 6), 6);
	assert_string_equal(out, "a%zz%4");
	/* only len bytes are read: an escape cut by len stays verbatim */
	assert_int_equal(ds_grpc_percent_decode(out, sizeof(out), "%41", 2), 2);
	assert_string_equal(out, "%4");
	assert_int_equal(ds_grpc_percent_decode(out, sizeof(out), "%41", 3), 1);
	assert_string_equal(out, "A");
	/* truncation keeps the terminator */
	assert_int_equal(ds_grpc_percent_decode(out, 4, "abcdef", 6), 3);
	assert_string_equal(out, "abc");
	assert_int_equal(ds_grpc_percent_decode(out, 0, "abc", 3), 0);

	/* encoding: '%' and bytes outside 0x20..0x7e become %XX (upper-case hex) */
	assert_int_equal(ds_grpc_percent_encode(enc, sizeof(enc), "bad \xe2\x89\xa5 vocab 100%"),
	                 strlen(in));
	assert_string_equal(enc, in);
	ds_grpc_percent_encode(enc, sizeof(enc), "caf\xc3\xa9 %\n\t~ ok");
	assert_string_equal(enc, "caf%C3%A9 %25%0A%09~ ok");
	for (const char *c = enc; *c; c++)
		assert_true(*c >= 0x20 && *c <= 0x7e);
	/* truncation keeps whole escapes and the terminator */
	assert_int_equal(ds_grpc_percent_encode(enc, 7, "ab\xff\xff"), 5);
	assert_string_equal(enc, "ab%FF");
	assert_int_equal(ds_grpc_percent_encode(enc, 6, "ab\xff\xff"), 5);
	assert_int_equal(ds_grpc_percent_encode(enc, 5, "ab\xff\xff"), 2);
	assert_string_equal(enc, "ab");
	assert_int_equal(ds_grpc_percent_encode(enc, 0, "ab"), 0);

	/* round trip: every byte value 1..255 survives encode then decode */
	char all[256], big[800], back[256];
	for (int i = 1; i < 256; i++)
		all[i - 1] = (char)i;
	all[255] = '\0';
	size_t n = ds_grpc_percent_encode(big, sizeof(big), all);
	assert_int_equal(n, strlen(big));
	assert_int_equal(ds_grpc_percent_decode(back, sizeof(back), big, n), 255);
	assert_memory_equal(back, all, 256);
}

static void test_code_names_and_http(void **state)
{
	(void)state;
	assert_string_equal(ds_grpc_code_name(0), "OK");
	assert_string_equal(ds_grpc_code_name(DS_GRPC_INVALID_ARGUMENT), "INVALID_ARGUMENT");
	assert_string_equal(ds_grpc_code_name(8), "RESOURCE_EXHAUSTED");
	assert_string_equal(ds_grpc_code_name(16), "UNAUTHENTICATED");
	assert_string_equal(ds_grpc_code_name(17), "UNKNOWN");
	assert_string_equal(ds_grpc_code_name(-1), "UNKNOWN");
	assert_int_equal(DS_GRPC_N_CODES, 17);
	assert_int_equal(ds_grpc_code_from_http(400), DS_GRPC_INTERNAL);
	assert_int_equal(ds_grpc_code_from_http(401), DS_GRPC_UNAUTHENTICATED);
	assert_int_equal(ds_grpc_code_from_http(403), DS_GRPC_PERMISSION_DENIED);
	assert_int_equal(ds_grpc_code_from_http(404), DS_GRPC_UNIMPLEMENTED);
	assert_int_equal(ds_grpc_code_from_http(429), DS_GRPC_UNAVAILABLE);
	assert_int_equal(ds_grpc_code_from_http(503), DS_GRPC_UNAVAILABLE);
	assert_int_equal(ds_grpc_code_from_http(500), DS_GRPC_UNKNOWN);

	uint8_t p[5];
	ds_grpc_frame_prefix(p, 0x01020304u);
	assert_int_equal(p[0], 0);
	assert_int_equal(p[1], 1);
	assert_int_equal(p[2], 2);
	assert_int_equal(p[3], 3);
	assert_int_equal(p[4], 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_deframer_any_split),
	    cmocka_unit_test(test_deframer_partial_is_not_idle),
	    cmocka_unit_test(test_deframer_errors),
	    cmocka_unit_test(test_timeout_format),
	    cmocka_unit_test(test_timeout_parse),
	    cmocka_unit_test(test_percent_codec),
	    cmocka_unit_test(test_code_names_and_http),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
