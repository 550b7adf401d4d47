/* bench_cpu.c - tokens/s of the CPU backend's fast and reference paths.
 *
 * Decode: B sequences (B = 1, 8, 32) share a prefilled context of --ctx tokens (blocks copied
 * from one prefill, like a common system prompt) and each decodes --steps new tokens; the
 * same steps are timed on each path, alternating fast/ref for --reps rounds and keeping the best
 * round, so both see the same machine load. Prefill: one --ctx-token prompt in one pass.
 * Prints a table and one JSON line per measurement; ratio = ref tokens/s / fast tokens/s.
 * Alongside wall-clock tokens/s it reports tokens per CPU-second (process CPU time, all
 * threads): on a shared, oversubscribed box that is the steadier number for comparing paths.
 *
 * usage: bench_cpu [--preset small] [--threads N] [--ctx 128] [--steps 8] [--reps 2]
 *                  [--batches 1,8,32] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend.h"
#include "rng.h"

#define BENCH_BS 16
#define BENCH_MAX_BATCH 256

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* wall and CPU seconds of one measurement */
struct span {
	double wall, cpu;
};

static struct span span_start(void)
{
	return (struct span){clock_s(CLOCK_MONOTONIC), clock_s(CLOCK_PROCESS_CPUTIME_ID)};
}

static struct span span_end(struct span t0)
{
	return (struct span){clock_s(CLOCK_MONOTONIC) - t0.wall,
	                     clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0.cpu};
}

static void span_min(struct span *best, struct span t)
{
	best->wall = DS_MIN(best->wall, t.wall);
	best->cpu = DS_MIN(best->cpu, t.cpu);
}

struct bench {
	struct ds_backend be;
	int vocab, ctx, steps, nb_seq; /* blocks per sequence */
	int32_t *blocks;               /* (BENCH_MAX_BATCH, nb_seq) */
	int32_t *tokens;               /* (ctx) prompt */
};

static int run_logits(struct bench *bn, enum ds_path path, struct ds_fwd_seq *seqs, int n,
                      float *logits)
{
	struct ds_fwd_row rows[BENCH_MAX_BATCH]; /* one output row per sequence */
	struct ds_fwd_batch b = {
	    .path = path, .seqs = seqs, .n_seqs = n, .rows = rows, .logits = logits};
	struct ds_err err;
	if (ds_backend_forward(&bn->be, &b, &err) != DS_OK) {
		fprintf(stderr, "bench_cpu: forward: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int run(struct bench *bn, enum ds_path path, struct ds_fwd_seq *seqs, int n)
{
	return run_logits(bn, path, seqs, n, NULL);
}

/* Decodes the same token for sequence 0 alone and in batches of 8 and 32, on each path, and
 * reports whether its logits kept their bits: the reference path must, the fast path need not.
 * Returns -1 on failure, 1 when the reference path changed (a bug), else 0. */
static int probe_invariance(struct bench *bn, const char *preset, int threads)
{
	const int sizes[3] = {1, 8, 32};
	size_t V = (size_t)bn->vocab;
	float *lg = malloc(32 * V * sizeof(float)), *base = malloc(V * sizeof(float));
	int rc = -1, differ[2] = {0, 0};
	double maxdiff[2] = {0, 0};
	if (!lg || !base)
		goto out;
	for (int path = 0; path < 2; path++)
		for (int v = 0; v < 3; v++) {
			struct ds_fwd_seq seqs[32];
			int32_t tok[32];
			for (int i = 0; i < sizes[v]; i++) {
				tok[i] =
				    (int32_t)(ds_hash3(9, (uint64_t)i, (uint64_t)v) % (uint64_t)V);
				seqs[i] = (struct ds_fwd_seq){
				    .tokens = &tok[i],
				    .n_tokens = 1,
				    .pos0 = bn->ctx,
				    .blocks = bn->blocks + (size_t)i * bn->nb_seq,
				    .n_blocks = bn->nb_seq,
				    .sp = {.temperature = 0.0f, .top_p = 1.0f, .seed = 1}};
			}
			tok[0] = 42 % bn->vocab;
			if (run_logits(bn, (enum ds_path)path, seqs, sizes[v], lg) != 0)
				goto out;
			if (v == 0) {
				memcpy(base, lg, V * sizeof(float));
				continue;
			}
			differ[path] += memcmp(base, lg, V * sizeof(float)) != 0;
			for (size_t i = 0; i < V; i++)
				maxdiff[path] =
				    DS_MAX(maxdiff[path], fabs((double)lg[i] - base[i]));
		}
	printf("  invariance probe (seq 0 alone vs in batch 8 / 32): ref logits %s, fast logits "
	       "%s (max |diff| %.2e)\n",
	       differ[1] ? "CHANGED" : "identical", differ[0] ? "differ in bits" : "identical",
	       maxdiff[0]);
	printf("{\"bench\":\"cpu_invariance\",\"preset\":\"%s\",\"threads\":%d,"
	       "\"ref_pairs_differ\":%d,\"fast_pairs_differ\":%d,\"fast_max_abs_diff\":%.3g}\n",
	       preset, threads, differ[1], differ[0], maxdiff[0]);
	rc = differ[1] ? 1 : 0;
out:
	free(lg);
	free(base);
	return rc;
}

/* Time of `steps` decode steps of batch B on one path (wall < 0 on failure). */
static struct span time_decode(struct bench *bn, enum ds_path path, int B)
{
	struct ds_fwd_seq seqs[BENCH_MAX_BATCH];
	int32_t tok[BENCH_MAX_BATCH];
	struct span t0 = span_start();
	for (int s = 0; s < bn->steps; s++) {
		for (int i = 0; i < B; i++) {
			tok[i] =
			    (int32_t)(ds_hash3(7, (uint64_t)i, (uint64_t)s) % (uint64_t)bn->vocab);
			seqs[i] = (struct ds_fwd_seq){
			    .tokens = &tok[i],
			    .n_tokens = 1,
			    .pos0 = bn->ctx + s,
			    .blocks = bn->blocks + (size_t)i * bn->nb_seq,
			    .n_blocks = bn->nb_seq,
			    .sp = {.temperature = 0.0f, .top_p = 1.0f, .seed = 1}};
		}
		if (run(bn, path, seqs, B) != 0)
			return (struct span){-1.0, -1.0};
	}
	return span_end(t0);
}

static struct span time_prefill(struct bench *bn, enum ds_path path)
{
	struct ds_fwd_seq s = {.tokens = bn->tokens,
	                       .n_tokens = bn->ctx,
	                       .pos0 = 0,
	                       .blocks = bn->blocks,
	                       .n_blocks = bn->nb_seq,
	                       .sp = {.temperature = 0.0f, .top_p = 1.0f, .seed = 1}};
	struct span t0 = span_start();
	if (run(bn, path, &s, 1) != 0)
		return (struct span){-1.0, -1.0};
	return span_end(t0);
}

/* Prints one row of the table and its JSON line. */
static void report(const char *kind, const char *preset, int threads, int batch, int ctx,
                   int tokens, const struct span best[2])
{
	double tf = tokens / best[0].wall, tr = tokens / best[1].wall;
	double cf = tokens / best[0].cpu, cr = tokens / best[1].cpu;
	if (batch > 0)
		printf("  decode batch %3d:  ", batch);
	else
		printf("  prefill %4d tok:  ", ctx);
	printf("fast %8.1f tok/s  ref %8.1f tok/s  ref/fast %.3f   (per CPU-s: fast %.1f ref %.1f "
	       "ratio %.3f)\n",
	       tf, tr, tr / tf, cf, cr, cr / cf);
	printf("{\"bench\":\"cpu_%s\",\"preset\":\"%s\",\"threads\":%d,\"batch\":%d,\"ctx\":%d,"
	       "\"tokens\":%d,\"fast_tok_s\":%.2f,\"ref_tok_s\":%.2f,\"ratio_ref_fast\":%.4f,"
	       "\"fast_tok_cpu_s\":%.2f,\"ref_tok_cpu_s\":%.2f,\"ratio_cpu_ref_fast\":%.4f}\n",
	       kind, preset, threads, batch > 0 ? batch : 1, ctx, tokens, tf, tr, tr / tf, cf, cr,
	       cr / cf);
}

int main(int argc, char **argv)
{
	const char *preset = "small", *batches = "1,8,32";
	int threads = 0, ctx = 128, steps = 8, reps = 2;
	for (int i = 1; i < argc; i += 2) { /* --option value pairs */
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "bench_cpu: %s needs a value\n", a);
			return 2;
		}
		if (!strcmp(a, "--preset"))
			preset = v;
		else if (!strcmp(a, "--threads"))
			threads = atoi(v);
		else if (!strcmp(a, "--ctx"))
			ctx = atoi(v);
		else if (!strcmp(a, "--steps"))
			steps = atoi(v);
		else if (!strcmp(a, "--reps"))
			reps = atoi(v);
		else if (!strcmp(a, "--batches"))
			batches = v;
		else {
			fprintf(stderr, "bench_cpu: unknown option %s\n", a);
			return 2;
		}
	}
	if (ctx < 1 || steps < 1 || reps < 1) {
		fprintf(stderr, "bench_cpu: --ctx, --steps and --reps must be >= 1\n");
		return 2;
	}

	struct ds_model_config cfg;
	struct ds_model *m = NULL;
	struct ds_err err;
	if (ds_model_preset(preset, &cfg) != DS_OK) {
		fprintf(stderr, "bench_cpu: unknown preset %s\n", preset);
		return 2;
	}
	if (ds_model_synth(&cfg, 1, &m, &err) != DS_OK) {
		fprintf(stderr, "bench_cpu: %s\n", err.msg);
		return 1;
	}
	struct bench bn = {.vocab = cfg.vocab_size, .ctx = ctx, .steps = steps};
	bn.nb_seq = (ctx + steps + BENCH_BS - 1) / BENCH_BS;
	int rc = 1;
	bn.blocks = malloc((size_t)BENCH_MAX_BATCH * bn.nb_seq * sizeof(int32_t));
	bn.tokens = malloc((size_t)ctx * sizeof(int32_t));
	if (!bn.blocks || !bn.tokens)
		goto out;
	for (int i = 0; i < BENCH_MAX_BATCH * bn.nb_seq; i++)
		bn.blocks[i] = i;
	for (int i = 0; i < ctx; i++)
		bn.tokens[i] = (int32_t)(ds_hash3(3, 0, (uint64_t)i) % (uint64_t)cfg.vocab_size);
	if (ds_backend_cpu_init(&bn.be, m, threads, &err) != DS_OK ||
	    ds_backend_kv_init(&bn.be, BENCH_MAX_BATCH * bn.nb_seq, BENCH_BS, &err) != DS_OK) {
		fprintf(stderr, "bench_cpu: %s\n", err.msg);
		goto out;
	}
	char desc[128];
	ds_backend_describe(&bn.be, desc, sizeof(desc));
	printf("bench_cpu: preset %s (hidden %d, layers %d, vocab %d), %s, ctx %d, steps %d\n",
	       preset, cfg.hidden, cfg.n_layer, cfg.vocab_size, desc, ctx, steps);

	/* prefill (also writes the shared context into sequence 0's blocks) */
	struct span best[2] = {{1e30, 1e30}, {1e30, 1e30}};
	for (int r = 0; r < reps; r++)
		for (int p = 0; p < 2; p++) {
			struct span t = time_prefill(&bn, (enum ds_path)p);
			if (t.wall < 0)
				goto out;
			span_min(&best[p], t);
		}
	int nthr = 0;
	sscanf(desc, "cpu (%d", &nthr);
	report("prefill", preset, nthr, 0, ctx, ctx, best);

	/* every decoding sequence starts from the same prefilled context (copied blocks) */
	int ctx_blocks = (ctx + BENCH_BS - 1) / BENCH_BS;
	for (int i = 1; i < BENCH_MAX_BATCH; i++)
		for (int j = 0; j < ctx_blocks; j++)
			if (ds_backend_kv_copy_block(&bn.be, bn.blocks[j],
			                             bn.blocks[(size_t)i * bn.nb_seq + j],
			                             &err) != DS_OK) {
				fprintf(stderr, "bench_cpu: %s\n", err.msg);
				goto out;
			}

	int probe = probe_invariance(&bn, preset, nthr);
	if (probe < 0)
		goto out;

	for (const char *p = batches; *p;) {
		int B = atoi(p);
		if (B < 1 || B > BENCH_MAX_BATCH) {
			fprintf(stderr, "bench_cpu: batch %d outside 1..%d\n", B, BENCH_MAX_BATCH);
			goto out;
		}
		best[0] = best[1] = (struct span){1e30, 1e30};
		for (int r = 0; r < reps; r++)
			for (int q = 0; q < 2; q++) {
				struct span t = time_decode(&bn, (enum ds_path)q, B);
				if (t.wall < 0)
					goto out;
				span_min(&best[q], t);
			}
		report("decode", preset, nthr, B, ctx, B * steps, best);
		while (*p && *p != ',')
			p++;
		if (*p == ',')
			p++;
	}
	rc = probe; /* 1 when the reference path lost its invariance */
out:
	if (bn.be.iface)
		ds_backend_free(&bn.be);
	free(bn.blocks);
	free(bn.tokens);
	ds_model_free(m);
	return rc;
}
