/* test_tokenizer_ref.c - compares our encoder with Hugging Face `tokenizers` on a corpus.
 *
 * usage: test_tokenizer_ref [--add-special] [--no-round-trip] TOKENIZER CORPUS REFERENCE
 *        test_tokenizer_ref --write-bytelevel PRESET DIR
 *   TOKENIZER  a model dir / tokenizer.json / .gguf (anything ds_tokenizer_load takes), or
 *              bytelevel:PRESET for ds_tokenizer_init_bytelevel of a model preset
 *   --add-special  encode with add_special (the reference must have been made the same way)
 *   --no-round-trip  skip decode(encode(x)) == x (ByteLevel add_prefix_space adds a space)
 *   --write-bytelevel  writes the byte-level tokenizer.json of PRESET for the reference
 *   CORPUS     records of (u32 length, raw bytes)            (tests/tokenizer/make_corpus.py)
 *   REFERENCE  per record (u32 n, n x u32 ids, u32 len, text)  (tests/tokenizer/ref_encode.py)
 * Checks, per record: ids equal token for token; decode(ids) equals the reference decode;
 * decode(encode(x)) == x when x is valid UTF-8; the streaming decoder's output equals
 * decode(). Prints the encode speed. Exit 0 only when everything matches. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <utf8proc.h>

#include "tokenizer.h"
#include "tokenizer_internal.h" /* ds_utf8_sanitize, t->nfc */

struct blob {
	uint8_t *p;
	size_t n, off;
};

static bool read_file(const char *path, struct blob *b)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return false;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b->p = malloc(n > 0 ? (size_t)n : 1);
	b->n = n > 0 ? (size_t)n : 0;
	b->off = 0;
	bool ok = b->p && fread(b->p, 1, b->n, f) == b->n;
	fclose(f);
	return ok;
}

static bool take(struct blob *b, size_t n, const uint8_t **out)
{
	if (n > b->n - b->off)
		return false;
	*out = b->p + b->off;
	b->off += n;
	return true;
}

static bool take_u32(struct blob *b, uint32_t *v)
{
	const uint8_t *p;
	if (!take(b, 4, &p))
		return false;
	*v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	return true;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void show_piece(const struct ds_tokenizer *t, int32_t id)
{
	size_t len;
	const char *p = ds_tokenizer_piece(t, id, &len);
	printf(" %d:\"", (int)id);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x20 || c == '"' || c == '\\')
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void show_mismatch(const struct ds_tokenizer *t, size_t doc, const int32_t *ours, size_t n_ours,
			  const uint8_t *ref, uint32_t n_ref)
{
	size_t i = 0;
	int32_t r = 0;
	for (; i < n_ours && i < n_ref; i++) {
		memcpy(&r, ref + 4 * i, 4);
		if (r != ours[i])
			break;
	}
	printf("MISMATCH doc %zu: %zu ids (ours) vs %u (reference), first difference at %zu\n", doc,
	       n_ours, n_ref, i);
	size_t from = i > 3 ? i - 3 : 0;
	printf("  ours:");
	for (size_t k = from; k < n_ours && k < i + 6; k++)
		show_piece(t, ours[k]);
	printf("\n  ref: ");
	for (size_t k = from; k < n_ref && k < i + 6; k++) {
		memcpy(&r, ref + 4 * k, 4);
		show_piece(t, r);
	}
	printf("\n");
}

int main(int argc, char **argv)
{
	bool add_special = false, round_trip = true;
	struct ds_err err = { { 0 } };
	struct ds_model_config cfg;
	if (argc == 4 && strcmp(argv[1], "--write-bytelevel") == 0) {
		if (ds_model_preset(argv[2], &cfg) != DS_OK ||
		    ds_tokenizer_write_bytelevel_json(argv[3], &cfg, &err) != DS_OK) {
			fprintf(stderr, "write-bytelevel %s: %s\n", argv[2], err.msg);
			return 1;
		}
		return 0;
	}
	while (argc > 1 && strncmp(argv[1], "--", 2) == 0) {
		if (strcmp(argv[1], "--add-special") == 0)
			add_special = true;
		else if (strcmp(argv[1], "--no-round-trip") == 0)
			round_trip = false;
		else
			break;
		argv++;
		argc--;
	}
	if (argc != 4) {
		fprintf(stderr, "usage: test_tokenizer_ref [--add-special] [--no-round-trip] TOKENIZER CORPUS REFERENCE\n"
				"       test_tokenizer_ref --write-bytelevel PRESET DIR\n");
		return 2;
	}
	struct ds_tokenizer *t;
	double t0 = now();
	enum ds_status rv;
	if (strncmp(argv[1], "bytelevel:", 10) == 0)
		rv = ds_model_preset(argv[1] + 10, &cfg) == DS_OK
			     ? ds_tokenizer_init_bytelevel(&cfg, &t, &err)
			     : ds_errf(&err, DS_ERR_NOT_FOUND, "no preset %s", argv[1] + 10);
	else
		rv = ds_tokenizer_load(argv[1], &t, &err);
	if (rv != DS_OK) {
		fprintf(stderr, "load failed: %s\n", err.msg);
		return 1;
	}
	double t_load = now() - t0;
	struct blob corpus, ref;
	if (!read_file(argv[2], &corpus) || !read_file(argv[3], &ref)) {
		fprintf(stderr, "cannot read %s or %s\n", argv[2], argv[3]);
		return 1;
	}
	size_t docs = 0, bytes = 0, tokens = 0, bad_ids = 0, bad_decode = 0, bad_trip = 0, bad_stream = 0;
	double t_enc = 0;
	uint32_t len;
	while (take_u32(&corpus, &len)) {
		const uint8_t *text, *ref_ids, *ref_text;
		uint32_t n_ref, ref_len;
		if (!take(&corpus, len, &text) || !take_u32(&ref, &n_ref) || !take(&ref, 4ull * n_ref, &ref_ids) ||
		    !take_u32(&ref, &ref_len) || !take(&ref, ref_len, &ref_text)) {
			fprintf(stderr, "truncated corpus or reference at record %zu\n", docs);
			return 1;
		}
		int32_t *ids;
		size_t n;
		double s = now();
		if (ds_tokenizer_encode(t, (const char *)text, len, add_special, &ids, &n, &err) != DS_OK) {
			fprintf(stderr, "encode failed on record %zu: %s\n", docs, err.msg);
			return 1;
		}
		t_enc += now() - s;
		bytes += len;
		tokens += n;
		if (n != n_ref || (n && memcmp(ids, ref_ids, 4 * n) != 0)) {
			if (bad_ids < 5)
				show_mismatch(t, docs, ids, n, ref_ids, n_ref);
			bad_ids++;
		}
		char *d;
		size_t dl;
		if (ds_tokenizer_decode(t, ids, n, false, &d, &dl, &err) != DS_OK) {
			fprintf(stderr, "decode failed on record %zu: %s\n", docs, err.msg);
			return 1;
		}
		/* the reference decoded its own ids; equal ids must give equal text */
		if (n == n_ref && (dl != ref_len || memcmp(d, ref_text, dl) != 0)) {
			if (bad_decode < 5)
				printf("DECODE MISMATCH doc %zu\n", docs);
			bad_decode++;
		}
		/* decode(encode(x)) == x for valid UTF-8, or NFC(x) when the tokenizer normalizes */
		bool valid = ds_utf8_sanitize(text, len, NULL) == 1;
		const uint8_t *want = text;
		size_t want_len = len;
		utf8proc_uint8_t *nfc = NULL;
		if (valid && t->nfc) {
			utf8proc_ssize_t r = utf8proc_map(text, (utf8proc_ssize_t)len, &nfc,
							  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
			if (r >= 0) {
				want = nfc;
				want_len = (size_t)r;
			}
		}
		if (valid && round_trip && !add_special && (dl != want_len || memcmp(d, want, want_len) != 0)) {
			if (bad_trip < 5)
				printf("ROUND TRIP MISMATCH doc %zu\n", docs);
			bad_trip++;
		}
		free(nfc);
		struct ds_tokenizer_stream st;
		ds_tokenizer_stream_init(&st, t, false);
		size_t sl = 0;
		bool same = true;
		for (size_t i = 0; i <= n && same; i++) {
			const char *piece;
			size_t pl;
			enum ds_status rv = i < n ? ds_tokenizer_stream_push(&st, ids[i], &piece, &pl, &err)
						  : ds_tokenizer_stream_flush(&st, &piece, &pl, &err);
			same = rv == DS_OK && sl + pl <= dl && memcmp(d + sl, piece, pl) == 0;
			sl += pl;
		}
		if (!same || sl != dl) {
			if (bad_stream < 5)
				printf("STREAM MISMATCH doc %zu\n", docs);
			bad_stream++;
		}
		ds_tokenizer_stream_free(&st);
		free(d);
		free(ids);
		docs++;
	}
	if (ref.off != ref.n) {
		fprintf(stderr, "reference has more records than the corpus\n");
		return 1;
	}
	printf("%s: vocab %d, load %.2f s; %zu documents, %zu bytes, %zu tokens; encode %.2f MB/s\n",
	       argv[1], ds_tokenizer_vocab_size(t), t_load, docs, bytes, tokens,
	       t_enc > 0 ? (double)bytes / 1e6 / t_enc : 0.0);
	printf("id mismatches: %zu, decode mismatches: %zu, round-trip failures: %zu, stream mismatches: %zu\n",
	       bad_ids, bad_decode, bad_trip, bad_stream);
	size_t failed = (bad_ids > 0) + (bad_decode > 0) + (bad_trip > 0) + (bad_stream > 0);
	printf("%zu passed, %zu failed\n", 4 - failed, failed);
	ds_tokenizer_free(t);
	free(corpus.p);
	free(ref.p);
	return failed ? 1 : 0;
}
