/* test_tokenizer_ref.c - compares our encoder with Hugging Face `tokenizers` on a corpus.
 *
 * usage: test_tokenizer_ref [--add-special] [--no-round-trip] [--untrusted] TOKENIZER CORPUS REFERENCE...
 *        test_tokenizer_ref --write-bytelevel PRESET DIR
 *   TOKENIZER  a model dir / tokenizer.json / .gguf (anything ds_tokenizer_load takes), or
 *              bytelevel:PRESET for ds_tokenizer_init_bytelevel of a model preset
 *   --add-special  encode with add_special (the reference must have been made the same way)
 *   --untrusted    encode with ds_tokenizer_encode_untrusted (reference: --encode-special-tokens)
 *   --no-round-trip  skip decode(encode(x)) == x (ByteLevel add_prefix_space adds a space)
 *   --write-bytelevel  writes the byte-level tokenizer.json of PRESET for the reference
 *   CORPUS     records of (u32 length, raw bytes)            (tests/tokenizer/make_corpus.py)
 *   REFERENCE  per record (u32 n, n x u32 ids, u32 len, text)  (tests/tokenizer/ref_encode.py)
 *   (several CORPUS REFERENCE pairs may follow one TOKENIZER)
 * Checks, per record: ids equal token for token; decode(ids) equals the reference decode;
 * decode(encode(x)) == x (NFC(x) for an NFC tokenizer) when x is valid UTF-8 of bytes the
 * vocabulary has tokens for (others are dropped, as by the reference); the streaming decoder's output equals
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

struct opts {
	bool add_special, round_trip, untrusted;
};

struct tally {
	size_t docs, bytes, tokens, bad_ids, bad_decode, bad_trip, bad_stream, trip_skipped;
	double t_enc;
};

/* Checks one record; false on an API error (reported). */
static bool check_doc(const struct ds_tokenizer *t, const struct opts *o, const uint8_t *text,
		      uint32_t len, const uint8_t *ref_ids, uint32_t n_ref, const uint8_t *ref_text,
		      uint32_t ref_len, struct tally *y)
{
	struct ds_err err = { { 0 } };
	int32_t *ids;
	size_t n;
	double s = now();
	enum ds_status rv = o->untrusted
				    ? ds_tokenizer_encode_untrusted(t, (const char *)text, len, o->add_special, &ids, &n, &err)
				    : ds_tokenizer_encode(t, (const char *)text, len, o->add_special, &ids, &n, &err);
	if (rv != DS_OK) {
		fprintf(stderr, "encode failed on record %zu: %s\n", y->docs, err.msg);
		return false;
	}
	y->t_enc += now() - s;
	y->bytes += len;
	y->tokens += n;
	if (n != n_ref || (n && memcmp(ids, ref_ids, 4 * n) != 0)) {
		if (y->bad_ids < 5)
			show_mismatch(t, y->docs, ids, n, ref_ids, n_ref);
		y->bad_ids++;
	}
	char *d;
	size_t dl;
	if (ds_tokenizer_decode(t, ids, n, false, &d, &dl, &err) != DS_OK) {
		fprintf(stderr, "decode failed on record %zu: %s\n", y->docs, err.msg);
		free(ids);
		return false;
	}
	/* the reference decoded its own ids; equal ids must give equal text */
	if (n == n_ref && (dl != ref_len || memcmp(d, ref_text, dl) != 0)) {
		if (y->bad_decode < 5)
			printf("DECODE MISMATCH doc %zu\n", y->docs);
		y->bad_decode++;
	}
	/* decode(encode(x)) == x for valid UTF-8, or NFC(x) when the tokenizer normalizes */
	bool valid = ds_utf8_sanitize(text, len, NULL) == 1, covered = true;
	for (uint32_t i = 0; i < len && covered; i++)
		covered = t->byte_id[text[i]] >= 0;
	y->trip_skipped += valid && !covered;
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
	if (valid && covered && o->round_trip && !o->add_special &&
	    (dl != want_len || memcmp(d, want, want_len) != 0)) {
		if (y->bad_trip < 5)
			printf("ROUND TRIP MISMATCH doc %zu\n", y->docs);
		y->bad_trip++;
	}
	free(nfc);
	struct ds_tokenizer_stream st;
	ds_tokenizer_stream_init(&st, t, false);
	size_t sl = 0;
	bool same = true;
	for (size_t i = 0; i <= n && same; i++) {
		const char *piece;
		size_t pl;
		rv = i < n ? ds_tokenizer_stream_push(&st, ids[i], &piece, &pl, &err)
			   : ds_tokenizer_stream_flush(&st, &piece, &pl, &err);
		same = rv == DS_OK && sl + pl <= dl && memcmp(d + sl, piece, pl) == 0;
		sl += pl;
	}
	if (!same || sl != dl) {
		if (y->bad_stream < 5)
			printf("STREAM MISMATCH doc %zu\n", y->docs);
		y->bad_stream++;
	}
	ds_tokenizer_stream_free(&st);
	free(d);
	free(ids);
	y->docs++;
	return true;
}

/* One CORPUS/REFERENCE pair: returns the number of failed checks (0..4), or 4 on errors. */
static size_t check_pair(const struct ds_tokenizer *t, const char *name, const struct opts *o,
			 const char *corpus_path, const char *ref_path)
{
	struct blob corpus = { 0 }, ref = { 0 };
	struct tally y = { 0 };
	size_t failed = 4;
	if (!read_file(corpus_path, &corpus) || !read_file(ref_path, &ref)) {
		fprintf(stderr, "cannot read %s or %s\n", corpus_path, ref_path);
		goto out;
	}
	uint32_t len;
	while (take_u32(&corpus, &len)) {
		const uint8_t *text, *ref_ids, *ref_text;
		uint32_t n_ref, ref_len;
		if (!take(&corpus, len, &text) || !take_u32(&ref, &n_ref) || !take(&ref, 4ull * n_ref, &ref_ids) ||
		    !take_u32(&ref, &ref_len) || !take(&ref, ref_len, &ref_text)) {
			fprintf(stderr, "truncated corpus or reference at record %zu\n", y.docs);
			goto out;
		}
		if (!check_doc(t, o, text, len, ref_ids, n_ref, ref_text, ref_len, &y))
			goto out;
	}
	if (ref.off != ref.n) {
		fprintf(stderr, "%s has more records than %s\n", ref_path, corpus_path);
		goto out;
	}
	printf("%s on %s: %zu documents, %zu bytes, %zu tokens; encode %.2f MB/s\n", name, corpus_path,
	       y.docs, y.bytes, y.tokens, y.t_enc > 0 ? (double)y.bytes / 1e6 / y.t_enc : 0.0);
	printf("id mismatches: %zu, decode mismatches: %zu, round-trip failures: %zu (%zu documents hold "
	       "bytes the vocabulary lacks), stream mismatches: %zu\n",
	       y.bad_ids, y.bad_decode, y.bad_trip, y.trip_skipped, y.bad_stream);
	failed = (y.bad_ids > 0) + (y.bad_decode > 0) + (y.bad_trip > 0) + (y.bad_stream > 0);
out:
	free(corpus.p);
	free(ref.p);
	return failed;
}

int main(int argc, char **argv)
{
	struct opts o = { .add_special = false, .round_trip = true };
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
			o.add_special = true;
		else if (strcmp(argv[1], "--no-round-trip") == 0)
			o.round_trip = false;
		else if (strcmp(argv[1], "--untrusted") == 0)
			o.untrusted = true;
		else
			break;
		argv++;
		argc--;
	}
	if (argc < 4 || argc % 2 != 0) {
		fprintf(stderr, "usage: test_tokenizer_ref [--add-special] [--no-round-trip] [--untrusted] TOKENIZER CORPUS REFERENCE...\n"
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
	printf("%s: vocab %d, load %.2f s\n", argv[1], ds_tokenizer_vocab_size(t), now() - t0);
	size_t failed = 0, checks = 0;
	for (int a = 2; a + 1 < argc; a += 2) {
		failed += check_pair(t, argv[1], &o, argv[a], argv[a + 1]);
		checks += 4;
	}
	printf("%zu passed, %zu failed\n", checks - failed, failed);
	ds_tokenizer_free(t);
	return failed ? 1 : 0;
}
