/* decode_fix.h - a CUDA backend with prompts already in its KV, ready for decode steps: the fixture
 * the gpu suite's decode-chain tests share (test_gpu_skinny.c, test_gpu_mega.c). Helpers fail the
 * running cmocka test themselves. */
#ifndef DS_DECODE_FIX_H
#define DS_DECODE_FIX_H

#include "backend.h"
#include "cuda_internal.h"
#include "gpu_model.h"
#include "gpu_util.h"

#include <stdlib.h>
#include <string.h>

#define BS 16

static inline void fwd_ok(struct ds_backend *be, enum ds_path path, struct ds_fwd_seq *s, int n,
                   float *logits, struct ds_fwd_row *rows)
{
	struct ds_fwd_batch b = {path, s, n, rows, logits};
	struct ds_err err;
	if (ds_backend_forward(be, &b, &err) != DS_OK)
		fail_msg("forward: %s", err.msg);
}

/* A CUDA backend on a deferred model of preset (weights seed model_seed) whose B_max sequences
 * hold a prompt of L tokens (token i of the prompts: ds_hash3(ha, hb, i) % vocab), already run
 * through the reference path: ready for decode steps of up to B_max rows. */
struct decode_fix {
	struct ds_model *m;
	struct ds_backend be;
	struct ds_cuda_ctx *c;
	int B_max, L, nb, V;
	int32_t *tok, *blk;      /* (B_max, L + 1) tokens, (B_max, nb) block tables */
	struct ds_fwd_seq *ss;   /* (B_max) */
	struct ds_fwd_row *rows; /* (B_max * L) */
	size_t rowb;             /* bytes of one row of logits */
	float *lg0, *lg;         /* (B_max, V) logits: the baseline and the run compared to it */
};

static inline void decode_fix_init(struct decode_fix *f, const char *preset, uint64_t model_seed,
                            uint64_t ha, uint64_t hb, int B_max, int L)
{
	struct ds_err err;
	memset(f, 0, sizeof(*f));
	f->m = model_deferred(preset, model_seed);
	assert_non_null(f->m);
	f->B_max = B_max;
	f->L = L;
	f->nb = (L + 1 + BS - 1) / BS;
	if (ds_backend_cuda_init(&f->be, f->m, 0, &err) != DS_OK)
		fail_msg("cuda init: %s", err.msg);
	if (ds_backend_kv_init(&f->be, B_max * f->nb, BS, &err) != DS_OK)
		fail_msg("kv init: %s", err.msg);
	f->c = f->be.ctx;
	f->V = f->m->cfg.vocab_size;
	f->tok = malloc((size_t)B_max * (L + 1) * 4);
	f->blk = malloc((size_t)B_max * f->nb * 4);
	for (int i = 0; i < B_max * (L + 1); i++)
		f->tok[i] = (int32_t)(ds_hash3(ha, hb, (uint64_t)i) % (uint64_t)f->V);
	for (int i = 0; i < B_max * f->nb; i++)
		f->blk[i] = i;
	f->ss = calloc((size_t)B_max, sizeof(*f->ss));
	f->rows = malloc((size_t)B_max * L * sizeof(*f->rows));
	/* prompts of L tokens through the reference path fill the KV */
	for (int i = 0; i < B_max; i++)
		f->ss[i] = (struct ds_fwd_seq){f->tok + (size_t)i * (L + 1), L,     0,
		                               f->blk + (size_t)i * f->nb,   f->nb, false,
		                               {0.0f, 0, 1.0f, 1},           false};
	fwd_ok(&f->be, DS_PATH_REF, f->ss, B_max, NULL, f->rows);
	f->rowb = (size_t)f->V * 4;
	f->lg0 = malloc((size_t)B_max * f->rowb);
	f->lg = malloc((size_t)B_max * f->rowb);
}

/* ss[0 .. B) become one decode step: each sequence's token L at position L. */
static inline void decode_fix_step(struct decode_fix *f, int B)
{
	int L = f->L;
	for (int i = 0; i < B; i++)
		f->ss[i] = (struct ds_fwd_seq){f->tok + (size_t)i * (L + 1) + L,
		                               1,
		                               L,
		                               f->blk + (size_t)i * f->nb,
		                               f->nb,
		                               false,
		                               {0.0f, 0, 1.0f, 1},
		                               false};
}

/* reps fast forwards of the decode step of B rows, each with the bits of lg0 */
static inline void decode_fix_expect_lg0(struct decode_fix *f, int B, int reps)
{
	for (int k = 0; k < reps; k++) {
		fwd_ok(&f->be, DS_PATH_FAST, f->ss, B, f->lg, f->rows);
		assert_memory_equal(f->lg0, f->lg, (size_t)B * f->rowb);
	}
}

static inline void decode_fix_free(struct decode_fix *f)
{
	free(f->tok);
	free(f->blk);
	free(f->ss);
	free(f->rows);
	free(f->lg0);
	free(f->lg);
	ds_backend_free(&f->be);
	ds_model_free(f->m);
}

#endif
