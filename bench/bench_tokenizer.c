/* bench_tokenizer.c - encode throughput (MB/s) of the byte-level BPE tokenizer on a corpus.
 *
 * usage: bench_tokenizer CORPUS [TOKENIZER...]
 *   CORPUS     a corpus file of (u32 length, bytes) records (tests/tokenizer/make_corpus.py)
 *              or any other file, taken as one text
 *   TOKENIZER  model dirs / tokenizer.json / .gguf; none: only the byte-level baseline
 * Each tokenizer encodes every record, PASSES times. Reported: MB/s of the first pass (cold
 * word cache) and of the best pass, by wall clock and by this process's CPU time (steadier
 * on a shared machine), and the ratio to the byte-level fallback tokenizer (no regex, no
 * merges) measured in the same run. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tokenizer.h"

#define PASSES 3

struct rec {
	const char *p;
	size_t n;
};

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }

struct speed {
	double cold, best, cpu_cold, cpu_best; /* MB/s */
};

/* Splits buf into records when it parses as one, else returns it whole. */
static size_t split_records(char *buf, size_t n, struct rec **out)
{
	size_t cnt = 0, off = 0;
	while (off + 4 <= n) {
		uint32_t l;
		memcpy(&l, buf + off, 4);
		if (l > n - off - 4)
			break;
		off += 4 + l;
		cnt++;
	}
	bool records = off == n && cnt > 0;
	*out = malloc((records ? cnt : 1) * sizeof(**out));
	if (!*out)
		return 0;
	if (!records) {
		(*out)[0] = (struct rec){ buf, n };
		return 1;
	}
	off = 0;
	for (size_t i = 0; i < cnt; i++) {
		uint32_t l;
		memcpy(&l, buf + off, 4);
		(*out)[i] = (struct rec){ buf + off + 4, l };
		off += 4 + l;
	}
	return cnt;
}

/* false on an encode error */
static bool bench(const struct ds_tokenizer *t, const struct rec *r, size_t nr, size_t bytes,
		  size_t *tokens, struct speed *sp)
{
	memset(sp, 0, sizeof(*sp));
	for (int pass = 0; pass < PASSES; pass++) {
		size_t nt = 0;
		double s = now(), c = clock_s(CLOCK_PROCESS_CPUTIME_ID);
		for (size_t i = 0; i < nr; i++) {
			int32_t *ids;
			size_t n;
			struct ds_err err;
			if (ds_tokenizer_encode(t, r[i].p, r[i].n, false, &ids, &n, &err) != DS_OK) {
				fprintf(stderr, "encode: %s\n", err.msg);
				return false;
			}
			nt += n;
			free(ids);
		}
		double mbs = (double)bytes / 1e6 / (now() - s);
		double cpu = (double)bytes / 1e6 / (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c);
		if (pass == 0) {
			sp->cold = mbs;
			sp->cpu_cold = cpu;
		}
		sp->best = DS_MAX(sp->best, mbs);
		sp->cpu_best = DS_MAX(sp->cpu_best, cpu);
		*tokens = nt;
	}
	return true;
}

static void report(const char *name, const struct speed *sp, const struct speed *base)
{
	printf("%-44s wall %7.2f MB/s cold, %7.2f best | cpu %7.2f cold, %7.2f best", name, sp->cold,
	       sp->best, sp->cpu_cold, sp->cpu_best);
	if (base)
		printf(" | %.3fx baseline (cpu best)", sp->cpu_best / base->cpu_best);
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS [TOKENIZER...]\n", argv[0]);
		return 2;
	}
	FILE *f = fopen(argv[1], "rb");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc(len > 0 ? (size_t)len : 1);
	if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
		fprintf(stderr, "%s: read failed\n", argv[1]);
		return 1;
	}
	fclose(f);
	struct rec *r;
	size_t nr = split_records(buf, (size_t)len, &r), bytes = 0;
	for (size_t i = 0; i < nr; i++)
		bytes += r[i].n;

	struct ds_model_config cfg;
	struct ds_tokenizer *t;
	struct ds_err err;
	size_t tokens;
	if (ds_model_preset("tiny", &cfg) != DS_OK || ds_tokenizer_init_bytelevel(&cfg, &t, &err) != DS_OK) {
		fprintf(stderr, "byte-level tokenizer: %s\n", err.msg);
		return 1;
	}
	struct speed base, sp;
	int rc = !bench(t, r, nr, bytes, &tokens, &base);
	ds_tokenizer_free(t);
	printf("corpus %s: %zu records, %zu bytes; %d passes\n", argv[1], nr, bytes, PASSES);
	report("byte-level fallback (baseline)", &base, NULL);
	for (int a = 2; a < argc; a++) {
		double s = now();
		if (ds_tokenizer_load(argv[a], &t, &err) != DS_OK) {
			fprintf(stderr, "%s\n", err.msg);
			rc = 1;
			continue;
		}
		double load = now() - s;
		rc |= !bench(t, r, nr, bytes, &tokens, &sp);
		report(argv[a], &sp, &base);
		printf("%-44s %zu tokens (%.2f bytes/token), vocab %d, load %.2f s\n", "", tokens,
		       (double)bytes / (double)(tokens ? tokens : 1), ds_tokenizer_vocab_size(t), load);
		ds_tokenizer_free(t);
	}
	free(r);
	free(buf);
	return rc;
}
