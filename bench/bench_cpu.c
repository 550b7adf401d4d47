/* bench_cpu.c - tokens/s of the CPU backend's fast and reference paths.
 *
 * Decode: B sequences (B = 1, 8, 32) share a prefilled context of --ctx tokens (blocks copied
 * from one prefill, like a common system prompt) and each decodes --steps new tokens; the
 * same steps are timed on each path, alternating fast/ref for --reps rounds and keeping the best
 * round, so both see the same machine load. Prefill: one --ctx-token prompt in one pass.
 * Prints a table and one JSON line per measurement; ratio = ref tokens/s / fast tokens/s.
 *
 * usage: bench_cpu [--preset small] [--threads N] [--ctx 128] [--steps 8] [--reps 2]
 *                  [--batches 1,8,32] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend.h"
#include "rng.h"

#define BENCH_BS 16
#define BENCH_MAX_BATCH 256

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct bench {
	struct ds_backend be;
	int vocab, ctx, steps, nb_seq; /* blocks per sequence */
	int32_t *blocks;               /* (BENCH_MAX_BATCH, nb_seq) */
	int32_t *tokens;               /* (ctx) prompt */
};

static int run(struct bench *bn, enum ds_path path, struct ds_fwd_seq *seqs, int n)
{
	struct ds_fwd_row rows[BENCH_MAX_BATCH]; /* one output row per sequence */
	struct ds_fwd_batch b = {.path = path, .seqs = seqs, .n_seqs = n, .rows = rows};
	struct ds_err err;
	if (ds_backend_forward(&bn->be, &b, &err) != DS_OK) {
		fprintf(stderr, "bench_cpu: forward: %s\n", err.msg);
		return -1;
	}
	return 0;
}

/* Seconds for `steps` decode steps of batch B on one path. */
static double time_decode(struct bench *bn, enum ds_path path, int B)
{
	struct ds_fwd_seq seqs[BENCH_MAX_BATCH];
	int32_t tok[BENCH_MAX_BATCH];
	double t0 = now_s();
	for (int s = 0; s < bn->steps; s++) {
		for (int i = 0; i < B; i++) {
			tok[i] = (int32_t)(ds_hash3(7, (uint64_t)i, (uint64_t)s) % (uint64_t)bn->vocab);
			seqs[i] = (struct ds_fwd_seq){
				.tokens = &tok[i], .n_tokens = 1, .pos0 = bn->ctx + s,
				.blocks = bn->blocks + (size_t)i * bn->nb_seq, .n_blocks = bn->nb_seq,
				.sp = {.temperature = 0.0f, .top_p = 1.0f, .seed = 1}};
		}
		if (run(bn, path, seqs, B) != 0)
			return -1.0;
	}
	return now_s() - t0;
}

static double time_prefill(struct bench *bn, enum ds_path path)
{
	struct ds_fwd_seq s = {.tokens = bn->tokens, .n_tokens = bn->ctx, .pos0 = 0,
			       .blocks = bn->blocks, .n_blocks = bn->nb_seq,
			       .sp = {.temperature = 0.0f, .top_p = 1.0f, .seed = 1}};
	double t0 = now_s();
	if (run(bn, path, &s, 1) != 0)
		return -1.0;
	return now_s() - t0;
}

int main(int argc, char **argv)
{
	const char *preset = "small", *batches = "1,8,32";
	int threads = 0, ctx = 128, steps = 8, reps = 2;
	for (int i = 1; i < argc; i++) {
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
		i++;
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
	double best[2] = {1e30, 1e30};
	for (int r = 0; r < reps; r++)
		for (int p = 0; p < 2; p++) {
			double t = time_prefill(&bn, (enum ds_path)p);
			if (t < 0)
				goto out;
			best[p] = DS_MIN(best[p], t);
		}
	int nthr = 0;
	sscanf(desc, "cpu (%d", &nthr);
	printf("  prefill %4d tokens: fast %8.1f tok/s  ref %8.1f tok/s  ref/fast %.3f\n", ctx,
	       ctx / best[0], ctx / best[1], best[0] / best[1]);
	printf("{\"bench\":\"cpu_prefill\",\"preset\":\"%s\",\"threads\":%d,\"tokens\":%d,"
	       "\"fast_tok_s\":%.2f,\"ref_tok_s\":%.2f,\"ratio_ref_fast\":%.4f}\n",
	       preset, nthr, ctx, ctx / best[0], ctx / best[1], best[0] / best[1]);

	/* every decoding sequence starts from the same prefilled context (copied blocks) */
	int ctx_blocks = (ctx + BENCH_BS - 1) / BENCH_BS;
	for (int i = 1; i < BENCH_MAX_BATCH; i++)
		for (int j = 0; j < ctx_blocks; j++)
			if (ds_backend_kv_copy_block(&bn.be, bn.blocks[j],
						     bn.blocks[(size_t)i * bn.nb_seq + j], &err) != DS_OK) {
				fprintf(stderr, "bench_cpu: %s\n", err.msg);
				goto out;
			}

	for (const char *p = batches; *p;) {
		int B = atoi(p);
		if (B < 1 || B > BENCH_MAX_BATCH) {
			fprintf(stderr, "bench_cpu: batch %d outside 1..%d\n", B, BENCH_MAX_BATCH);
			goto out;
		}
		best[0] = best[1] = 1e30;
		for (int r = 0; r < reps; r++)
			for (int q = 0; q < 2; q++) {
				double t = time_decode(&bn, (enum ds_path)q, B);
				if (t < 0)
					goto out;
				best[q] = DS_MIN(best[q], t);
			}
		double tf = (double)B * steps / best[0], tr = (double)B * steps / best[1];
		printf("  decode batch %3d:    fast %8.1f tok/s  ref %8.1f tok/s  ref/fast %.3f\n", B,
		       tf, tr, tr / tf);
		printf("{\"bench\":\"cpu_decode\",\"preset\":\"%s\",\"threads\":%d,\"batch\":%d,"
		       "\"ctx\":%d,\"steps\":%d,\"fast_tok_s\":%.2f,\"ref_tok_s\":%.2f,"
		       "\"ratio_ref_fast\":%.4f}\n",
		       preset, nthr, B, ctx, steps, tf, tr, tr / tf);
		while (*p && *p != ',')
			p++;
		if (*p == ',')
			p++;
	}
	rc = 0;
out:
	if (bn.be.iface)
		ds_backend_free(&bn.be);
	free(bn.blocks);
	free(bn.tokens);
	ds_model_free(m);
	return rc;
}
