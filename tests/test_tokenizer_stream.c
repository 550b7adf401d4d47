/* test_tokenizer_stream.c - unit tests for the streaming decoder and the stop-string matcher
 * (model/tokenizer.c, model/tokenizer_stop.c): text only at UTF-8 boundaries, equality with
 * decode(), stop strings across token boundaries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "tokenizer.h"
#include "tokenizer_internal.h"

static struct ds_tokenizer *tiny_bytelevel(void)
{
	struct ds_model_config cfg;
	assert_int_equal(ds_model_preset("tiny", &cfg), DS_OK);
	struct ds_tokenizer *t = NULL;
	struct ds_err err = { { 0 } };
	assert_int_equal(ds_tokenizer_init_bytelevel(&cfg, &t, &err), DS_OK);
	return t;
}

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---- streaming decode ---- */

static void test_stream_utf8_boundaries(void **state)
{
	(void)state;
	struct ds_tokenizer *t = tiny_bytelevel();
	struct ds_tokenizer_stream s;
	struct ds_err err;
	const char *text;
	size_t len;
	/* "é😀" fed one byte token at a time: nothing until a character completes */
	const uint8_t bytes[] = { 0xc3, 0xa9, 0xf0, 0x9f, 0x98, 0x80 };
	const size_t emit_len[] = { 0, 2, 0, 0, 0, 4 };
	ds_tokenizer_stream_init(&s, t, false);
	for (size_t i = 0; i < sizeof(bytes); i++) {
		assert_int_equal(ds_tokenizer_stream_push(&s, bytes[i], &text, &len, &err), DS_OK);
		assert_int_equal(len, emit_len[i]);
	}
	/* a lead byte followed by ASCII can never complete: U+FFFD then the ASCII */
	assert_int_equal(ds_tokenizer_stream_push(&s, 0xe4, &text, &len, &err), DS_OK);
	assert_int_equal(len, 0);
	assert_int_equal(ds_tokenizer_stream_push(&s, 'z', &text, &len, &err), DS_OK);
	assert_int_equal(len, 4);
	assert_memory_equal(text, "\xef\xbf\xbdz", 4);
	/* an incomplete character at the end comes out of flush as U+FFFD */
	assert_int_equal(ds_tokenizer_stream_push(&s, 0xe4, &text, &len, &err), DS_OK);
	assert_int_equal(ds_tokenizer_stream_push(&s, 0xb8, &text, &len, &err), DS_OK);
	assert_int_equal(len, 0);
	assert_int_equal(ds_tokenizer_stream_flush(&s, &text, &len, &err), DS_OK);
	assert_int_equal(len, 3);
	assert_int_equal(ds_tokenizer_stream_push(&s, 9999, &text, &len, &err), DS_ERR_INVALID);
	/* skip_special drops specials */
	ds_tokenizer_stream_free(&s);
	ds_tokenizer_stream_init(&s, t, true);
	assert_int_equal(ds_tokenizer_stream_push(&s, 257, &text, &len, &err), DS_OK);
	assert_int_equal(len, 0);
	ds_tokenizer_stream_free(&s);
	ds_tokenizer_free(t);
}

static bool utf8_complete(const char *s, size_t n)
{
	return ds_utf8_sanitize((const uint8_t *)s, n, NULL) == 1;
}

static void test_stream_equals_decode_random(void **state)
{
	(void)state;
	struct ds_tokenizer *t = tiny_bytelevel();
	uint64_t rs = 7;
	struct ds_err err;
	static const int32_t pool[] = { 0xc3, 0xa9, 0xe4, 0xb8, 0xad, 0xf0, 0x9f, 0x98, 0x80, 'a', ' ', 0xff, 256 };
	for (int it = 0; it < 2000; it++) {
		int32_t ids[24];
		size_t n = 1 + rng_next(&rs) % 24;
		for (size_t i = 0; i < n; i++)
			ids[i] = pool[rng_next(&rs) % DS_ARRAY_LEN(pool)];
		char *d;
		size_t dl;
		assert_int_equal(ds_tokenizer_decode(t, ids, n, false, &d, &dl, &err), DS_OK);
		char acc[512];
		size_t al = 0;
		struct ds_tokenizer_stream s;
		ds_tokenizer_stream_init(&s, t, false);
		for (size_t i = 0; i < n; i++) {
			const char *text;
			size_t len;
			assert_int_equal(ds_tokenizer_stream_push(&s, ids[i], &text, &len, &err), DS_OK);
			/* every emitted chunk is whole characters */
			assert_true(utf8_complete(text, len));
			memcpy(acc + al, text, len);
			al += len;
		}
		const char *text;
		size_t len;
		assert_int_equal(ds_tokenizer_stream_flush(&s, &text, &len, &err), DS_OK);
		memcpy(acc + al, text, len);
		al += len;
		assert_int_equal(al, dl);
		assert_memory_equal(acc, d, dl);
		free(d);
		ds_tokenizer_stream_free(&s);
	}
	ds_tokenizer_free(t);
}


/* ---- stop strings ---- */

/* Feeds s one byte token at a time; returns everything emitted (and the stop index). */
static size_t stop_feed(struct ds_tokenizer_stop *st, const char *s, size_t n, char *out, int *stop)
{
	struct ds_err err;
	size_t o = 0;
	*stop = -1;
	for (size_t i = 0; i < n; i++) {
		const char *text;
		size_t len;
		assert_int_equal(ds_tokenizer_stop_push(st, (uint8_t)s[i], &text, &len, stop, &err), DS_OK);
		memcpy(out + o, text, len);
		o += len;
	}
	return o;
}

static void test_stop_strings(void **state)
{
	(void)state;
	struct ds_tokenizer *t = tiny_bytelevel();
	struct ds_tokenizer_stop st;
	struct ds_err err;
	const char *stops[] = { "END", "\xe4\xb8\xad!", "ENDING" };
	char out[256];
	int stop;
	const char *text;
	size_t len;
	assert_int_equal(ds_tokenizer_stop_init(&st, t, false, stops, NULL, 3, &err), DS_OK);
	/* "EN" is held until 'X' shows it is not "END"; "END" then stops before itself */
	assert_int_equal(ds_tokenizer_stop_push(&st, 'a', &text, &len, &stop, &err), DS_OK);
	assert_int_equal(len, 1);
	assert_int_equal(ds_tokenizer_stop_push(&st, 'E', &text, &len, &stop, &err), DS_OK);
	assert_int_equal(len, 0);
	assert_int_equal(ds_tokenizer_stop_push(&st, 'N', &text, &len, &stop, &err), DS_OK);
	assert_int_equal(len, 0);
	assert_int_equal(ds_tokenizer_stop_push(&st, 'X', &text, &len, &stop, &err), DS_OK);
	assert_int_equal(len, 3);
	assert_memory_equal(text, "ENX", 3);
	assert_int_equal(stop, -1);
	size_t n = stop_feed(&st, "yEENDzz", 7, out, &stop);
	assert_int_equal(stop, 0);
	assert_int_equal(n, 2);
	assert_memory_equal(out, "yE", 2);
	assert_int_equal(ds_tokenizer_stop_push(&st, 'q', &text, &len, &stop, &err), DS_OK);
	assert_int_equal(len, 0); /* nothing after a stop */
	assert_int_equal(stop, 0);
	ds_tokenizer_stop_free(&st);

	/* a multi-byte stop split across byte tokens, and text released by flush */
	assert_int_equal(ds_tokenizer_stop_init(&st, t, false, stops, NULL, 3, &err), DS_OK);
	n = stop_feed(&st, "ok \xe4\xb8\xad?\xe4\xb8\xad!tail", 15, out, &stop);
	assert_int_equal(stop, 1);
	assert_int_equal(n, 7);
	assert_memory_equal(out, "ok \xe4\xb8\xad?", 7);
	ds_tokenizer_stop_free(&st);
	assert_int_equal(ds_tokenizer_stop_init(&st, t, false, stops, NULL, 3, &err), DS_OK);
	n = stop_feed(&st, "the EN", 6, out, &stop);
	assert_int_equal(n, 4);
	assert_int_equal(ds_tokenizer_stop_flush(&st, &text, &len, &err), DS_OK);
	assert_int_equal(len, 2);
	assert_memory_equal(text, "EN", 2);
	ds_tokenizer_stop_free(&st);

	/* random streams: output == text before the earliest stop, else the whole text */
	uint64_t rs = 5;
	for (int it = 0; it < 500; it++) {
		char txt[64];
		size_t tl = 1 + rng_next(&rs) % 60;
		for (size_t i = 0; i < tl; i++)
			txt[i] = "ENDIG x"[rng_next(&rs) % 7];
		assert_int_equal(ds_tokenizer_stop_init(&st, t, false, stops, NULL, 3, &err), DS_OK);
		n = stop_feed(&st, txt, tl, out, &stop);
		if (stop < 0) {
			assert_int_equal(ds_tokenizer_stop_flush(&st, &text, &len, &err), DS_OK);
			memcpy(out + n, text, len);
			n += len;
		}
		const char *hit = memmem(txt, tl, "END", 3);
		size_t want = hit ? (size_t)(hit - txt) : tl;
		assert_int_equal(stop, hit ? 0 : -1);
		assert_int_equal(n, want);
		assert_memory_equal(out, txt, want);
		ds_tokenizer_stop_free(&st);
	}
	const char *empty[] = { "" };
	assert_int_equal(ds_tokenizer_stop_init(&st, t, false, empty, NULL, 1, &err), DS_ERR_INVALID);
	ds_tokenizer_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stream_utf8_boundaries),
		cmocka_unit_test(test_stream_equals_decode_random),
		cmocka_unit_test(test_stop_strings),
	};
	return cmocka_run_group_tests_name("tokenizer_stream", tests, NULL, NULL);
}
