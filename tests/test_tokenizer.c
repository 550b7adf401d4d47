/* test_tokenizer.c - unit tests for the byte-level BPE tokenizer (model/tokenizer*.c).
 *
 * Real vocabularies are checked against HF `tokenizers` by the integration suite
 * (tests/tokenizer/run_reference.sh); here: small hand-made vocabularies whose expected
 * encodings follow from the BPE rules, round trips, the streaming decoder, UTF-8
 * replacement and every load-time error we promise. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "gguf.h"
#include "tokenizer.h"
#include "tokenizer_internal.h"

/* ---- helpers ---- */

static struct ds_tokenizer *tiny_bytelevel(void)
{
	struct ds_model_config cfg;
	assert_int_equal(ds_model_preset("tiny", &cfg), DS_OK);
	struct ds_tokenizer *t = NULL;
	struct ds_err err = { { 0 } };
	assert_int_equal(ds_tokenizer_init_bytelevel(&cfg, &t, &err), DS_OK);
	return t;
}

static size_t enc(const struct ds_tokenizer *t, const char *s, size_t len, bool add, int32_t *out,
		  size_t cap)
{
	int32_t *ids;
	size_t n;
	struct ds_err err = { { 0 } };
	assert_int_equal(ds_tokenizer_encode(t, s, len, add, &ids, &n, &err), DS_OK);
	assert_true(n <= cap);
	if (n)
		memcpy(out, ids, n * sizeof(*ids));
	free(ids);
	return n;
}

static void assert_round_trip(const struct ds_tokenizer *t, const char *s, size_t len)
{
	int32_t *ids;
	size_t n, dl;
	char *d;
	struct ds_err err = { { 0 } };
	assert_int_equal(ds_tokenizer_encode(t, s, len, false, &ids, &n, &err), DS_OK);
	assert_int_equal(ds_tokenizer_decode(t, ids, n, false, &d, &dl, &err), DS_OK);
	assert_int_equal(dl, len);
	assert_memory_equal(d, s, len);
	free(ids);
	free(d);
}

/* A tokenizer.json with the 256 byte tokens at ids 0..255, then one token per merge
 * result, the given merges and pre_tokenizer (JSON text or NULL), written to a temp dir. */
static char tmpdir[256];

static const char *write_tok_json(const char *const *merges, size_t n_merges, const char *pretok,
				  const char *extra_model, const char *added)
{
	char path[300];
	json_t *vocab = json_object();
	for (int b = 0; b < 256; b++) {
		char s[4];
		uint8_t raw = (uint8_t)b;
		ds_tok_map(&raw, 1, s);
		json_object_set_new(vocab, s, json_integer(b));
	}
	json_t *jm = json_array();
	int next = 256;
	for (size_t i = 0; i < n_merges; i++) {
		char l[64], r[64], lr[128];
		assert_int_equal(sscanf(merges[i], "%63s %63s", l, r), 2);
		snprintf(lr, sizeof(lr), "%s%s", l, r);
		if (!json_object_get(vocab, lr))
			json_object_set_new(vocab, lr, json_integer(next++));
		json_array_append_new(jm, json_string(merges[i]));
	}
	char buf[8192];
	snprintf(buf, sizeof(buf),
		 "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":null,\"pre_tokenizer\":%s,"
		 "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
		 "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]%s}}",
		 added ? added : "[]", pretok ? pretok : "null", extra_model ? extra_model : "");
	json_error_t je;
	json_t *root = json_loads(buf, 0, &je);
	assert_non_null(root);
	json_t *model = json_object_get(root, "model");
	json_object_set_new(model, "vocab", vocab);
	json_object_set_new(model, "merges", jm);
	snprintf(path, sizeof(path), "%s/tokenizer.json", tmpdir);
	assert_int_equal(json_dump_file(root, path, 0), 0);
	json_decref(root);
	return tmpdir;
}

static const char *write_raw(const char *name, const char *text)
{
	static char path[300];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

/* ds_tokenizer_load_json on dir/tokenizer.json (+ dir/tokenizer_config.json) */
static enum ds_status load_dir(const char *dir, bool with_config, struct ds_tokenizer **t,
			       struct ds_err *err)
{
	char tj[300], tc[300];
	snprintf(tj, sizeof(tj), "%s/tokenizer.json", dir);
	snprintf(tc, sizeof(tc), "%s/tokenizer_config.json", dir);
	return ds_tokenizer_load_json(tj, with_config ? tc : NULL, t, err);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/ds_test_tok_XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* ---- byte-level fallback ---- */

static void test_bytelevel_layout(void **state)
{
	(void)state;
	struct ds_tokenizer *t = tiny_bytelevel();
	assert_int_equal(ds_tokenizer_vocab_size(t), 259);
	assert_int_equal(ds_tokenizer_bos_id(t), 256);
	assert_int_equal(ds_tokenizer_eos_id(t), 257);
	assert_int_equal(ds_tokenizer_pad_id(t), 258);
	assert_int_equal(ds_tokenizer_find_added(t, "<|begin_of_text|>"), 256);
	assert_int_equal(ds_tokenizer_find_added(t, "<|end_of_text|>"), 257);
	assert_int_equal(ds_tokenizer_find_added(t, "<|nope|>"), -1);
	assert_true(ds_tokenizer_is_special(t, 257));
	assert_false(ds_tokenizer_is_special(t, 65));
	size_t len;
	const char *p = ds_tokenizer_piece(t, 'A', &len);
	assert_int_equal(len, 1);
	assert_int_equal(p[0], 'A');
	assert_null(ds_tokenizer_piece(t, 259, &len));

	int32_t ids[64];
	size_t n = enc(t, "hi \xc3\xa9", 5, false, ids, 64);
	int32_t want[] = { 'h', 'i', ' ', 0xc3, 0xa9 };
	assert_int_equal(n, 5);
	assert_memory_equal(ids, want, sizeof(want));
	n = enc(t, "hi", 2, true, ids, 64); /* add_special: BOS first */
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 256);
	/* special tokens inside the text are matched whole, before pre-tokenization */
	const char *s = "a<|end_of_text|>b<|pad|><|begin_of_text";
	n = enc(t, s, strlen(s), false, ids, 64);
	assert_int_equal(n, 4 + 15);
	assert_int_equal(ids[0], 'a');
	assert_int_equal(ids[1], 257);
	assert_int_equal(ids[2], 'b');
	assert_int_equal(ids[3], 258);
	assert_int_equal(ids[4], '<');
	/* untrusted text: written specials are plain text, the BOS of add_special is still real */
	int32_t *u;
	size_t nu;
	struct ds_err err;
	assert_int_equal(ds_tokenizer_encode_untrusted(t, s, strlen(s), true, &u, &nu, &err), DS_OK);
	assert_int_equal(nu, 1 + strlen(s));
	assert_int_equal(u[0], 256);
	for (size_t i = 0; i < strlen(s); i++)
		assert_int_equal(u[1 + i], (uint8_t)s[i]);
	free(u);
	ds_tokenizer_free(t);
}

static void test_bytelevel_large_vocab(void **state)
{
	(void)state;
	struct ds_model_config cfg;
	assert_int_equal(ds_model_preset("small", &cfg), DS_OK);
	cfg.bos_id = 3; /* specials below 256 push the bytes up */
	cfg.eos_ids[0] = 4000;
	cfg.eos_ids[1] = 4001;
	cfg.n_eos = 2;
	struct ds_tokenizer *t;
	struct ds_err err;
	assert_int_equal(ds_tokenizer_init_bytelevel(&cfg, &t, &err), DS_OK);
	assert_int_equal(ds_tokenizer_vocab_size(t), 4096);
	assert_int_equal(ds_tokenizer_find_added(t, "<|begin_of_text|>"), 3);
	assert_int_equal(ds_tokenizer_find_added(t, "<|eot_id|>"), 4001);
	assert_int_equal(ds_tokenizer_find_added(t, "<|reserved_special_token_0|>"), 258);
	int32_t ids[8];
	size_t n = enc(t, "\x02\x03\x04", 3, false, ids, 8);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 2);
	assert_int_equal(ids[1], 4); /* byte 3 moved to id 4 */
	assert_int_equal(ids[2], 5);
	ds_tokenizer_free(t);

	cfg.vocab_size = 257; /* 256 bytes + 3 specials do not fit */
	assert_int_equal(ds_tokenizer_init_bytelevel(&cfg, &t, &err), DS_ERR_INVALID);
	assert_null(t);
	assert_non_null(strstr(err.msg, "vocab_size"));
}

static void test_bytelevel_json_round_trip(void **state)
{
	(void)state;
	struct ds_model_config cfg;
	struct ds_err err;
	assert_int_equal(ds_model_preset("tiny", &cfg), DS_OK);
	assert_int_equal(ds_tokenizer_write_bytelevel_json(tmpdir, &cfg, &err), DS_OK);
	struct ds_tokenizer *a = tiny_bytelevel(), *b;
	assert_int_equal(load_dir(tmpdir, true, &b, &err), DS_OK);
	assert_int_equal(ds_tokenizer_vocab_size(b), 259);
	assert_int_equal(ds_tokenizer_bos_id(b), 256);
	assert_int_equal(ds_tokenizer_eos_id(b), 257);
	assert_int_equal(ds_tokenizer_pad_id(b), 258);
	const char *s = "<|begin_of_text|>Hello, w\xc3\xb6rld! \xf0\x9f\x98\x80 \xe4\xb8\xad<|end_of_text|>";
	int32_t x[128], y[128];
	size_t nx = enc(a, s, strlen(s), true, x, 128), ny = enc(b, s, strlen(s), true, y, 128);
	assert_int_equal(nx, ny);
	assert_memory_equal(x, y, nx * sizeof(*x));
	assert_int_equal(x[0], 256);
	assert_int_equal(x[1], 256);
	assert_round_trip(b, s, strlen(s));
	ds_tokenizer_free(a);
	ds_tokenizer_free(b);
}

/* ---- BPE rules ---- */

static void test_bpe_merge_order(void **state)
{
	(void)state;
	/* ranks: "b c" (0) before "a b" (1): "abcd" -> a + bc + d, never ab + cd */
	const char *const m1[] = { "b c", "a b", "c d" };
	struct ds_tokenizer *t;
	struct ds_err err;
	assert_int_equal(load_dir(write_tok_json(m1, 3, NULL, NULL, NULL), false, &t, &err), DS_OK);
	int32_t ids[16];
	size_t n = enc(t, "abcd", 4, false, ids, 16);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 'a');
	assert_int_equal(ids[1], 256);
	assert_int_equal(ids[2], 'd');
	size_t len;
	const char *p = ds_tokenizer_piece(t, ids[1], &len);
	assert_int_equal(len, 2);
	assert_memory_equal(p, "bc", 2);
	ds_tokenizer_free(t);
	/* equal pairs merge leftmost first: "aaa" with "a a" -> "aa" + "a" */
	const char *const m2[] = { "a a" };
	assert_int_equal(load_dir(write_tok_json(m2, 1, NULL, NULL, NULL), false, &t, &err), DS_OK);
	n = enc(t, "aaaaa", 5, false, ids, 16);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 256);
	assert_int_equal(ids[1], 256);
	assert_int_equal(ids[2], 'a');
	ds_tokenizer_free(t);
}

static void test_pretokenizer_pipeline(void **state)
{
	(void)state;
	/* with a ByteLevel regex split, a merge never crosses " 1" | "23" boundaries */
	const char *const m[] = { "Ġ 1", "1 2", "2 3", "a b" };
	const char *pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
			  "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]}";
	struct ds_tokenizer *t;
	struct ds_err err;
	assert_int_equal(load_dir(write_tok_json(m, 4, pre, NULL, NULL), false, &t, &err), DS_OK);
	int32_t ids[16];
	/* digits isolated one by one: no "12" or "23" merges, and the space stays alone */
	size_t n = enc(t, "ab 123", 6, false, ids, 16);
	assert_int_equal(n, 5);
	assert_int_equal(ids[1], ' ');
	assert_int_equal(ids[2], '1');
	assert_round_trip(t, "ab 123", 6);
	ds_tokenizer_free(t);

	/* without the Digits step, " 123" is one pre-token: " 1" merges first (rank 0) */
	const char *pre2 = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}";
	assert_int_equal(load_dir(write_tok_json(m, 4, pre2, NULL, NULL), false, &t, &err), DS_OK);
	n = enc(t, "ab 123", 6, false, ids, 16);
	/* add_prefix_space: " ab" -> Ġ + ab, then " 123" -> Ġ1 + 23 */
	assert_int_equal(n, 4);
	assert_int_equal(ids[0], ' ');
	ds_tokenizer_free(t);

	/* Split with a literal pattern and the Removed behavior drops the delimiter */
	const char *pre3 = "{\"type\":\"Split\",\"pattern\":{\"String\":\"b\"},\"behavior\":\"Removed\",\"invert\":false}";
	assert_int_equal(load_dir(write_tok_json(m, 4, pre3, NULL, NULL), false, &t, &err), DS_OK);
	n = enc(t, "abab", 4, false, ids, 16);
	assert_int_equal(n, 2);
	assert_int_equal(ids[0], 'a');
	assert_int_equal(ids[1], 'a');
	ds_tokenizer_free(t);

	/* \s is Unicode White_Space as in Oniguruma (also inside a class): U+0020 and U+3000 are,
	 * U+180E (MONGOLIAN VOWEL SEPARATOR) is not, although PCRE2's own \s takes it */
	const char *pre6 = "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+|[^\\\\sab]\"},\"behavior\":\"Removed\",\"invert\":false}";
	assert_int_equal(load_dir(write_tok_json(m, 4, pre6, NULL, NULL), false, &t, &err), DS_OK);
	n = enc(t, "a \xe3\x80\x80" "b", 6, false, ids, 16); /* U+0020 and U+3000 are \s */
	assert_int_equal(n, 2);
	const char *pre7 = "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"Removed\",\"invert\":false}";
	ds_tokenizer_free(t);
	assert_int_equal(load_dir(write_tok_json(m, 4, pre7, NULL, NULL), false, &t, &err), DS_OK);
	n = enc(t, "a\xe1\xa0\x8e" "b", 5, false, ids, 16);
	assert_int_equal(n, 5); /* nothing removed: a, e1, a0, 8e, b */
	ds_tokenizer_free(t);

	/* MergedWithNext: "b" joins the next piece, so "a|ba|b" style pieces; "a b" cannot merge */
	const char *pre4 = "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"b\"},\"behavior\":\"MergedWithNext\",\"invert\":false}";
	assert_int_equal(load_dir(write_tok_json(m, 4, pre4, NULL, NULL), false, &t, &err), DS_OK);
	n = enc(t, "abab", 4, false, ids, 16);
	assert_int_equal(n, 4);
	ds_tokenizer_free(t);
	const char *pre5 = "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"b\"},\"behavior\":\"MergedWithPrevious\",\"invert\":false}";
	assert_int_equal(load_dir(write_tok_json(m, 4, pre5, NULL, NULL), false, &t, &err), DS_OK);
	n = enc(t, "abab", 4, false, ids, 16);
	assert_int_equal(n, 2); /* "ab" "ab" */
	ds_tokenizer_free(t);
}

static void test_added_tokens_and_ignore_merges(void **state)
{
	(void)state;
	const char *const m[] = { "a b", "ab c" };
	const char *added = "[{\"id\":300,\"content\":\"<x>\",\"special\":true,\"lstrip\":false,\"rstrip\":true},"
			    "{\"id\":301,\"content\":\"<x><y>\",\"special\":false}]";
	struct ds_tokenizer *t;
	struct ds_err err;
	assert_int_equal(load_dir(write_tok_json(m, 2, NULL, ",\"ignore_merges\":true", added),
				  false, &t, &err),
			 DS_OK);
	assert_int_equal(ds_tokenizer_vocab_size(t), 302);
	int32_t ids[16];
	/* leftmost-longest: "<x><y>" beats "<x>"; rstrip eats the spaces after "<x>" */
	const char *s = "abc<x><y><x>  abc";
	size_t n = enc(t, s, strlen(s), false, ids, 16);
	assert_int_equal(n, 4);
	assert_int_equal(ids[0], 257);
	assert_int_equal(ids[1], 301);
	assert_int_equal(ids[2], 300);
	assert_int_equal(ids[3], 257);
	char *d;
	size_t dl;
	assert_int_equal(ds_tokenizer_decode(t, ids, n, true, &d, &dl, &err), DS_OK);
	assert_string_equal(d, "abc<x><y>abc");
	free(d);
	ds_tokenizer_free(t);
}

/* ---- UTF-8 ---- */

static void test_invalid_utf8_replaced(void **state)
{
	(void)state;
	struct ds_tokenizer *t = tiny_bytelevel();
	/* maximal subparts: F0 9F 98 (truncated) is one U+FFFD, C0 and FF one each,
	 * E0 80 is two (80 is not a valid second byte after E0) */
	const char *bad = "a\xf0\x9f\x98" "b\xc0\xff" "c\xe0\x80" "d\xed\xa0\x80";
	char clean[64];
	size_t n = ds_utf8_sanitize((const uint8_t *)bad, strlen(bad), clean);
	const char *want = "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd"
			   "d\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(clean, want, n);
	int32_t x[64], y[64];
	size_t nx = enc(t, bad, strlen(bad), false, x, 64), ny = enc(t, want, strlen(want), false, y, 64);
	assert_int_equal(nx, ny);
	assert_memory_equal(x, y, nx * sizeof(*x));
	/* decode of bytes that are not UTF-8 yields replacement characters, never raw bytes */
	int32_t ids[] = { 'o', 0xe4, 'k', 0xb8 };
	char *d;
	size_t dl;
	struct ds_err err;
	assert_int_equal(ds_tokenizer_decode(t, ids, 4, false, &d, &dl, &err), DS_OK);
	assert_string_equal(d, "o\xef\xbf\xbdk\xef\xbf\xbd");
	free(d);
	ds_tokenizer_free(t);
}

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static size_t put_cp(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static size_t random_utf8(uint64_t *rs, char *o, size_t n_cp)
{
	static const uint32_t pool[] = { ' ', ' ', '\n', '\t', 'a', 'Z', '1', '\'', 0xe9, 0x301,
					 0x4e2d, 0x6587, 0x1f600, 0x1f1fa, 0x0915, 0x094d, 0xa0, 0x3000 };
	size_t len = 0;
	for (size_t i = 0; i < n_cp; i++) {
		uint64_t r = rng_next(rs);
		uint32_t cp = (r & 3) ? pool[(r >> 8) % DS_ARRAY_LEN(pool)] : (uint32_t)((r >> 8) % 0x10ffff);
		if (cp >= 0xd800 && cp < 0xe000)
			cp = 'x';
		len += put_cp(o + len, cp ? cp : 'y');
	}
	return len;
}

static void test_round_trip_random(void **state)
{
	(void)state;
	const char *const m[] = { "Ġ Ġ", "ĠĠ ĠĠ", "a a", "ä ¸", "ä¸ Ń", "Ġ a" };
	const char *pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
			  "\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
			  "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
	struct ds_tokenizer *bpe, *bl = tiny_bytelevel();
	struct ds_err err;
	assert_int_equal(load_dir(write_tok_json(m, 6, pre, NULL, NULL), false, &bpe, &err), DS_OK);
	uint64_t rs = 42;
	char buf[4096];
	for (int it = 0; it < 300; it++) {
		size_t len = random_utf8(&rs, buf, 1 + rng_next(&rs) % 200);
		assert_round_trip(bpe, buf, len);
		assert_round_trip(bl, buf, len);
	}
	/* long runs */
	memset(buf, ' ', 3000);
	assert_round_trip(bpe, buf, 3000);
	memset(buf, '7', 3000);
	assert_round_trip(bpe, buf, 3000);
	ds_tokenizer_free(bpe);
	ds_tokenizer_free(bl);
}

/* Every truncation and a few thousand byte flips of a valid tokenizer.json load cleanly or
 * fail with a status, never crash or leak (the ASan build runs this too). */
static void test_load_corrupt_json(void **state)
{
	(void)state;
	const char *const m[] = { "Ġ t", "h e", "Ġt he", "i n" };
	const char *added = "[{\"id\":300,\"content\":\"<|x|>\",\"special\":true}]";
	const char *pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
			  "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]}";
	char path[300];
	snprintf(path, sizeof(path), "%s/tokenizer.json", write_tok_json(m, 4, pre, NULL, added));
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	static char good[65536];
	size_t n = fread(good, 1, sizeof(good), f);
	fclose(f);
	assert_true(n > 100 && n < sizeof(good));
	static char bad[65536];
	static const char junk[] = "{}[]\":,0123456789-\\ae";
	uint64_t rs = 99;
	int ok = 0, failed = 0;
	for (int it = 0; it < 1500; it++) {
		size_t len = n;
		memcpy(bad, good, n);
		if (it < 500) {
			len = (size_t)it * n / 500; /* truncation */
		} else {
			for (int k = 0; k < 1 + it % 3; k++) /* flip a few bytes to JSON-ish characters */
				bad[rng_next(&rs) % n] = junk[rng_next(&rs) % (sizeof(junk) - 1)];
		}
		f = fopen(path, "wb");
		assert_non_null(f);
		assert_int_equal(fwrite(bad, 1, len, f), len);
		fclose(f);
		struct ds_tokenizer *t = NULL;
		struct ds_err err = { { 0 } };
		if (ds_tokenizer_load_json(path, NULL, &t, &err) == DS_OK) {
			int32_t ids[64];
			enc(t, "the 12 <|x|> in", 15, true, ids, 64);
			ds_tokenizer_free(t);
			ok++;
		} else {
			assert_null(t);
			assert_true(err.msg[0] != 0);
			failed++;
		}
	}
	assert_true(failed >= 500); /* every strict truncation is invalid JSON */
	(void)ok;
}

/* ---- GGUF metadata ---- */

struct gbuf {
	uint8_t p[65536];
	size_t n;
	uint64_t n_kv;
};

static void g_raw(struct gbuf *g, const void *x, size_t n)
{
	assert_true(g->n + n <= sizeof(g->p));
	memcpy(g->p + g->n, x, n);
	g->n += n;
}

static void g_u32(struct gbuf *g, uint32_t v) { g_raw(g, &v, 4); }
static void g_u64(struct gbuf *g, uint64_t v) { g_raw(g, &v, 8); }

static void g_str(struct gbuf *g, const char *s)
{
	g_u64(g, strlen(s));
	g_raw(g, s, strlen(s));
}

static void g_kv_str(struct gbuf *g, const char *key, const char *v)
{
	g_str(g, key);
	g_u32(g, DS_GGUF_STRING);
	g_str(g, v);
	g->n_kv++;
}

static void g_kv_u32(struct gbuf *g, const char *key, uint32_t v)
{
	g_str(g, key);
	g_u32(g, DS_GGUF_UINT32);
	g_u32(g, v);
	g->n_kv++;
}

static void g_kv_bool(struct gbuf *g, const char *key, bool v)
{
	uint8_t b = v;
	g_str(g, key);
	g_u32(g, DS_GGUF_BOOL);
	g_raw(g, &b, 1);
	g->n_kv++;
}

/* A gpt2 tokenizer: the 256 bytes, "ab", "<|ctl|>" (CONTROL), "<u>" (USER_DEFINED). */
static void g_vocab(struct gbuf *g, const char *model, const char *pre, const char *merge)
{
	g_kv_str(g, "tokenizer.ggml.model", model);
	if (pre)
		g_kv_str(g, "tokenizer.ggml.pre", pre);
	g_str(g, "tokenizer.ggml.tokens");
	g_u32(g, DS_GGUF_ARRAY);
	g_u32(g, DS_GGUF_STRING);
	g_u64(g, 259);
	for (int b = 0; b < 256; b++) {
		char m[4];
		uint8_t raw = (uint8_t)b;
		ds_tok_map(&raw, 1, m);
		g_str(g, m);
	}
	g_str(g, "ab");
	g_str(g, "<|ctl|>");
	g_str(g, "<u>");
	g->n_kv++;
	g_str(g, "tokenizer.ggml.token_type");
	g_u32(g, DS_GGUF_ARRAY);
	g_u32(g, DS_GGUF_INT32);
	g_u64(g, 259);
	for (int i = 0; i < 259; i++)
		g_u32(g, i == 257 ? 3 : i == 258 ? 4 : 1);
	g->n_kv++;
	if (merge) {
		g_str(g, "tokenizer.ggml.merges");
		g_u32(g, DS_GGUF_ARRAY);
		g_u32(g, DS_GGUF_STRING);
		g_u64(g, 1);
		g_str(g, merge);
		g->n_kv++;
	}
}

static enum ds_status g_load(struct gbuf *g, struct ds_tokenizer **t, struct ds_err *err)
{
	static uint8_t file[sizeof(g->p) + 64];
	memcpy(file, "GGUF", 4);
	uint32_t version = 3;
	uint64_t n_tensors = 0;
	memcpy(file + 4, &version, 4);
	memcpy(file + 8, &n_tensors, 8);
	memcpy(file + 16, &g->n_kv, 8);
	memcpy(file + 24, g->p, g->n);
	struct ds_gguf *gg;
	enum ds_status rv = ds_gguf_parse(file, 24 + g->n, "mem.gguf", &gg, err);
	assert_int_equal(rv, DS_OK);
	rv = ds_tokenizer_load_gguf(gg, t, err);
	ds_gguf_close(gg);
	return rv;
}

static void test_gguf_vocab(void **state)
{
	(void)state;
	static struct gbuf g;
	memset(&g, 0, sizeof(g));
	g_vocab(&g, "gpt2", "smollm", "a b");
	g_kv_u32(&g, "tokenizer.ggml.bos_token_id", 257);
	g_kv_u32(&g, "tokenizer.ggml.eos_token_id", 257);
	g_kv_bool(&g, "tokenizer.ggml.add_bos_token", true);
	struct ds_tokenizer *t;
	struct ds_err err;
	if (g_load(&g, &t, &err) != DS_OK)
		fail_msg("%s", err.msg);
	assert_int_equal(ds_tokenizer_vocab_size(t), 259);
	assert_int_equal(ds_tokenizer_bos_id(t), 257);
	assert_true(ds_tokenizer_is_special(t, 257));
	assert_false(ds_tokenizer_is_special(t, 258));
	int32_t ids[16];
	/* smollm: digits one by one, then the GPT-2 regex; control and user tokens matched */
	size_t n = enc(t, "ab12<|ctl|><u>", 14, true, ids, 16);
	int32_t want[] = { 257, 256, '1', '2', 257, 258 };
	assert_int_equal(n, 6);
	assert_memory_equal(ids, want, sizeof(want));
	ds_tokenizer_free(t);
}

static void expect_gguf_error(const char *model, const char *pre, const char *merge,
			      enum ds_status want, const char *msg_part)
{
	static struct gbuf g;
	memset(&g, 0, sizeof(g));
	g_vocab(&g, model, pre, merge);
	struct ds_tokenizer *t = (struct ds_tokenizer *)1;
	struct ds_err err = { { 0 } };
	assert_int_equal(g_load(&g, &t, &err), want);
	assert_null(t);
	if (!strstr(err.msg, msg_part) || !strstr(err.msg, "mem.gguf"))
		fail_msg("error \"%s\" lacks \"%s\" or the file name", err.msg, msg_part);
}

static void test_gguf_errors(void **state)
{
	(void)state;
	expect_gguf_error("llama", "default", "a b", DS_ERR_UNSUPPORTED, "tokenizer.ggml.model");
	expect_gguf_error("gpt2", "falcon", "a b", DS_ERR_UNSUPPORTED, "falcon");
	expect_gguf_error("gpt2", "llama-bpe", NULL, DS_ERR_FORMAT, "merges");
	expect_gguf_error("gpt2", "qwen2", "a z", DS_ERR_FORMAT, "merged token");
	expect_gguf_error("gpt2", "gpt2", "ab", DS_ERR_FORMAT, "left right");
}

/* ---- concurrency ---- */

struct conc_job {
	const struct ds_tokenizer *t;
	const char *const *texts;
	int n_texts;
	size_t digest; /* sum over texts of (i+1) * hash of the ids */
	bool ok;
};

static size_t ids_hash(const int32_t *ids, size_t n)
{
	size_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (size_t)(uint32_t)ids[i]) * 1099511628211ull;
	return h;
}

static void *conc_run(void *arg)
{
	struct conc_job *j = arg;
	j->ok = true;
	j->digest = 0;
	for (int rep = 0; rep < 20; rep++)
		for (int i = 0; i < j->n_texts; i++) {
			int32_t *ids;
			size_t n;
			struct ds_err err;
			if (ds_tokenizer_encode(j->t, j->texts[i], strlen(j->texts[i]), false, &ids, &n, &err) != DS_OK) {
				j->ok = false;
				return NULL;
			}
			if (rep == 0)
				j->digest += (size_t)(i + 1) * ids_hash(ids, n);
			free(ids);
		}
	return NULL;
}

/* Threads share the tokenizer (and its word cache): results equal the single-thread ones. */
static void test_concurrent_encode(void **state)
{
	(void)state;
	const char *const m[] = { "Ġ t", "h e", "Ġt he", "i n", "Ġ a", "a n", "Ġa n", "Ġan d" };
	const char *pre = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
	struct ds_tokenizer *t;
	struct ds_err err;
	assert_int_equal(load_dir(write_tok_json(m, 8, pre, NULL, NULL), false, &t, &err), DS_OK);
	static char texts_buf[64][512];
	const char *texts[64];
	uint64_t rs = 3;
	for (int i = 0; i < 64; i++) {
		size_t l = 0;
		while (l < 400) {
			static const char *const words[] = { "the", "and", "in", "an", "then", "hand", "in the" };
			const char *w = words[rng_next(&rs) % 7];
			memcpy(texts_buf[i] + l, w, strlen(w));
			l += strlen(w);
			texts_buf[i][l++] = ' ';
		}
		texts_buf[i][l] = 0;
		texts[i] = texts_buf[i];
	}
	struct conc_job single = { t, texts, 64, 0, false };
	conc_run(&single);
	assert_true(single.ok);
	pthread_t th[4];
	struct conc_job jobs[4];
	for (int k = 0; k < 4; k++) {
		jobs[k] = (struct conc_job){ t, texts, 64, 0, false };
		assert_int_equal(pthread_create(&th[k], NULL, conc_run, &jobs[k]), 0);
	}
	for (int k = 0; k < 4; k++) {
		assert_int_equal(pthread_join(th[k], NULL), 0);
		assert_true(jobs[k].ok);
		assert_int_equal(jobs[k].digest, single.digest);
	}
	ds_tokenizer_free(t);
}

/* ---- load errors ---- */

static void expect_load_error(const char *json, enum ds_status want, const char *msg_part)
{
	write_raw("tokenizer.json", json);
	struct ds_tokenizer *t = (struct ds_tokenizer *)1;
	struct ds_err err = { { 0 } };
	assert_int_equal(load_dir(tmpdir, false, &t, &err), want);
	assert_null(t);
	if (!strstr(err.msg, msg_part))
		fail_msg("error \"%s\" lacks \"%s\"", err.msg, msg_part);
	assert_non_null(strstr(err.msg, "tokenizer.json"));
}

static void test_load_errors(void **state)
{
	(void)state;
	expect_load_error("{\"model\": {\"type\": \"BPE\", ", DS_ERR_FORMAT, "invalid JSON");
	expect_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]},\"decoder\":null}", DS_ERR_UNSUPPORTED,
			  "Unigram");
	expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", DS_ERR_UNSUPPORTED, "WordPiece");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"decoder\":{\"type\":\"ByteLevel\"}}",
			  DS_ERR_FORMAT, "merges");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[]},"
			  "\"decoder\":{\"type\":\"ByteLevel\"}}",
			  DS_ERR_FORMAT, "no merges");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]},"
			  "\"decoder\":{\"type\":\"ByteLevel\"}}",
			  DS_ERR_FORMAT, "merged token is not in the vocabulary");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"byte_fallback\":true},"
			  "\"decoder\":{\"type\":\"ByteLevel\"}}",
			  DS_ERR_UNSUPPORTED, "byte_fallback");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
			  "\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"decoder\":{\"type\":\"ByteLevel\"}}",
			  DS_ERR_UNSUPPORTED, "Metaspace");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
			  "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"},"
			  "\"decoder\":{\"type\":\"ByteLevel\"}}",
			  DS_ERR_UNSUPPORTED, "regex");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
			  "\"decoder\":{\"type\":\"Metaspace\"}}",
			  DS_ERR_UNSUPPORTED, "ByteLevel");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
			  "\"normalizer\":{\"type\":\"NFKC\"},\"decoder\":{\"type\":\"ByteLevel\"}}",
			  DS_ERR_UNSUPPORTED, "NFKC");
	expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"decoder\":{\"type\":\"ByteLevel\"},"
			  "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
			  "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"ids\":[7]}}}}",
			  DS_ERR_FORMAT, "post-processor adds token id 7");
	struct ds_tokenizer *t;
	struct ds_err err;
	assert_int_equal(load_dir("/nonexistent/tok", false, &t, &err), DS_ERR_IO);
	assert_null(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytelevel_layout),
		cmocka_unit_test(test_bytelevel_large_vocab),
		cmocka_unit_test(test_bytelevel_json_round_trip),
		cmocka_unit_test(test_bpe_merge_order),
		cmocka_unit_test(test_pretokenizer_pipeline),
		cmocka_unit_test(test_added_tokens_and_ignore_merges),
		cmocka_unit_test(test_invalid_utf8_replaced),
		cmocka_unit_test(test_round_trip_random),
		cmocka_unit_test(test_concurrent_encode),
		cmocka_unit_test(test_load_errors),
		cmocka_unit_test(test_load_corrupt_json),
		cmocka_unit_test(test_gguf_vocab),
		cmocka_unit_test(test_gguf_errors),
	};
	return cmocka_run_group_tests_name("tokenizer", tests, setup, teardown);
}
