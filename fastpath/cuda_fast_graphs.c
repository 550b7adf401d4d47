/* cuda_fast_graphs.c - the fast path's decode graphs: one CUDA graph per batch-size bucket
 * (padded to a power of two), captured on the bucket's first use.
 *
 * Key decision: the graph is tuned on the whole step. The GEMM choices (cuda_fast.c) are timed one
 * GEMM at a time, but inside a captured step the kernels around a GEMM change what is fastest,
 * so the step is captured under each step configuration (skinny GEMMs, PDL, the fused q/k/v
 * epilogue: each on or off; staged weights for skinny GEMMs under PDL), every replay is timed,
 * and the fastest graph is kept. */
#include "cuda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Skinny GEMMs (and the GEMV), PDL and the fused q/k/v epilogue, each on or off (on the H200,
 * GEMV/cuBLASLt only beat the per-GEMM picks by 3% inside the batch-1 step, PDL off beat on by
 * 2% at batch 8: bench/results/gpu-20261129-1083075); then skinny GEMMs under PDL staging 1, 2
 * or 3 iterations of weights before their wait; the fused layers; then four of those with the
 * decode attention merging its own splits (attn_merge) instead of the combine kernel, which on
 * the H200 cost 6-7 us a layer at batch 8 (bench/results/gpu-20261130-e572c35-trace); then, only
 * with DS_FAST_STREAM=tune and for buckets of up to 8 rows, the streaming GEMM under PDL, with
 * the combine kernel or the merge (5-8% slower than configuration 2 at batch 8 on the H200,
 * bench/results/gpu-20261201-b11d21b-final). */
const struct ds_cuda_step_cfg ds_cuda_fast_step_cfgs[DS_CUDA_N_STEP_CFGS] = {
    {true, true, true, 0, false, false, false},   {false, true, true, 0, false, false, false},
    {true, false, true, 0, false, false, false},  {false, false, true, 0, false, false, false},
    {true, true, false, 0, false, false, false},  {false, true, false, 0, false, false, false},
    {true, false, false, 0, false, false, false}, {false, false, false, 0, false, false, false},
    {true, true, true, 1, false, false, false},   {true, true, true, 2, false, false, false},
    {true, true, true, 3, false, false, false},   {true, true, false, 1, false, false, false},
    {true, true, false, 2, false, false, false},  {true, true, false, 3, false, false, false},
    {true, true, true, 0, true, false, false},    {true, false, true, 0, true, false, false},
    {true, true, true, 0, false, true, false},    {false, true, true, 0, false, true, false},
    {true, true, true, 2, false, true, false},    {true, true, true, 3, false, true, false},
    {true, true, true, 0, false, false, true},    {true, true, true, 0, false, true, true}};

/* e as a status: DS_OK or a device error naming what failed. */
static enum ds_status tune_status(cudaError_t e, const char *what, struct ds_err *err)
{
	if (e == cudaSuccess)
		return DS_OK;
	return ds_errf(err, DS_ERR_DEVICE, "%s: %s", what, cudaGetErrorString(e));
}

/* Mean ms of one replay of graph g over a burst of TUNE_BURST back-to-back replays (INFINITY
 * on a launch or event error). Back to back, as decode steps run, not each from an idle GPU. */
#define TUNE_BURST 3
static float tune_burst_ms(struct ds_cuda_ctx *c, cudaGraphExec_t g, cudaEvent_t e0, cudaEvent_t e1)
{
	cudaError_t e = cudaEventRecord(e0, c->stream);
	for (int k = 0; k < TUNE_BURST && e == cudaSuccess; k++)
		e = cudaGraphLaunch(g, c->stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(e1, c->stream);
	if (e == cudaSuccess)
		e = cudaEventSynchronize(e1);
	float ms = INFINITY;
	if (e == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
		return ms / TUNE_BURST;
	return INFINITY;
}

/* Captures the pass under step configuration sc (the fast path's switches set for it and put
 * back after); *g is NULL when sc is not allowed (the environment rules it out). */
static enum ds_status tune_capture(struct ds_cuda_ctx *c, const struct ds_cuda_pass *pb,
                                   int n_split, const struct ds_cuda_step_cfg *sc,
                                   cudaGraphExec_t *g, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	*g = NULL;
	if ((sc->skinny && !f->skinny) || (sc->pdl && !f->pdl) || (sc->fuse && !f->fuse_qkv) ||
	    (sc->stage && !f->stage_tune) ||
	    (sc->mega && !(f->mega_tune && ds_cuda_fast_mega_fits(c, pb))) ||
	    (sc->merge && !f->merge_tune) || (!sc->merge && f->attn_merge) ||
	    (sc->stream && !(f->stream_tune && pb->T <= DS_K_STREAM_MAX_M)) ||
	    (!sc->stream && f->stream))
		return DS_OK;
	bool skinny0 = f->skinny, pdl0 = f->pdl, fuse0 = f->fuse_qkv, mega0 = f->mega;
	bool merge0 = f->attn_merge, stream0 = f->stream;
	int stage0 = f->skinny_stage;
	f->skinny = sc->skinny;
	f->pdl = sc->pdl;
	f->fuse_qkv = sc->fuse;
	f->skinny_stage = sc->stage;
	f->mega = sc->mega;
	f->attn_merge = sc->merge;
	f->stream = sc->stream;
	bool warm = true;
	enum ds_status rv =
	    ds_cuda_pass_graphed(c, &ds_cuda_fast_ops, pb, n_split, true, g, &warm, err);
	f->skinny = skinny0;
	f->pdl = pdl0;
	f->fuse_qkv = fuse0;
	f->skinny_stage = stage0;
	f->mega = mega0;
	f->attn_merge = merge0;
	f->stream = stream0;
	return rv;
}

/* First use of bucket bi with graphs and tuning on: one eager pass (the GEMM choices are
 * timed outside capture), then the pass captured under every step configuration the
 * environment allows (DS_CUDA_SKINNY=0 / DS_CUDA_PDL=0 / DS_FAST_FUSE_QKV=0 /
 * DS_FAST_SKINNY_STAGE=0 rule theirs out), and the fastest graph kept and launched once more,
 * so this pass's outputs and KV writes are that graph's. Replaying a pass is idempotent: the
 * same inputs give the same outputs and KV.
 *
 * Key decision: the graphs are timed in interleaved rounds (DS_FAST_TUNE_ROUNDS, default 3):
 * each round replays every graph in a burst, starting the round at a different configuration,
 * and a configuration's time is its fastest burst. Timing each graph alone, best of 3 single
 * replays, kept a different configuration in nearly every process on the H200 (configurations
 * 1, 2, 3, 8, 9, 10, 13, 16, 19 at batch 8 across the twenty-fifth session's calls,
 * bench/results/gpu-20261201-ab90e53-parts*), and the kept step's time moved by up to 1.6
 * points of the roofline between processes on one machine. DS_FAST_TUNE_LOG=1 prints every
 * burst. */
static enum ds_status fast_decode_tune(struct ds_cuda_ctx *c, const struct ds_cuda_pass *pb,
                                       int n_split, int bi, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	enum ds_status rv = ds_cuda_meta_upload(c, pb, err);
	if (rv == DS_OK)
		rv = ds_cuda_pass_run(c, &ds_cuda_fast_ops, pb, n_split, err);
	if (rv != DS_OK)
		return rv;
	cudaGraphExec_t g[DS_CUDA_N_STEP_CFGS] = {NULL};
	for (int i = 0; i < DS_CUDA_N_STEP_CFGS; i++)
		f->graph_ms[bi][i] = INFINITY;
	for (int i = 0; i < DS_CUDA_N_STEP_CFGS && rv == DS_OK; i++)
		rv = tune_capture(c, pb, n_split, &ds_cuda_fast_step_cfgs[i], &g[i], err);
	cudaEvent_t e0 = NULL, e1 = NULL;
	if (rv == DS_OK) {
		cudaError_t e = cudaEventCreate(&e0);
		if (e == cudaSuccess)
			e = cudaEventCreate(&e1);
		rv = tune_status(e, "cuda: tuning events", err);
	}
	const char *tr = getenv("DS_FAST_TUNE_ROUNDS"), *tl = getenv("DS_FAST_TUNE_LOG");
	int rounds = tr ? DS_MAX(atoi(tr), 1) : 3;
	bool log = tl && strcmp(tl, "1") == 0;
	/* one untimed replay each (first launches upload the graphs) */
	for (int i = 0; i < DS_CUDA_N_STEP_CFGS && rv == DS_OK; i++)
		if (g[i])
			rv = tune_status(cudaGraphLaunch(g[i], c->stream), "cuda: tuning replay",
			                 err);
	for (int r = 0; r < rounds && rv == DS_OK; r++)
		for (int j = 0; j < DS_CUDA_N_STEP_CFGS; j++) {
			/* round r starts 7 r configurations further on (7 is prime to 20) */
			int i = (j + 7 * r) % DS_CUDA_N_STEP_CFGS;
			if (!g[i])
				continue;
			float ms = tune_burst_ms(c, g[i], e0, e1);
			if (log)
				fprintf(
				    stderr,
				    "graph tune: bucket %d round %d configuration %d: %.4f ms\n",
				    1 << bi, r, i, ms);
			if (ms < f->graph_ms[bi][i])
				f->graph_ms[bi][i] = ms;
		}
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	int best_i = -1;
	for (int i = 0; i < DS_CUDA_N_STEP_CFGS; i++)
		if (g[i] && isfinite(f->graph_ms[bi][i]) &&
		    (best_i < 0 || f->graph_ms[bi][i] < f->graph_ms[bi][best_i]))
			best_i = i;
	if (rv == DS_OK && best_i < 0)
		rv = ds_errf(err, DS_ERR_DEVICE, "cuda: no decode graph could be timed (bucket %d)",
		             1 << bi);
	for (int i = 0; i < DS_CUDA_N_STEP_CFGS; i++)
		if (g[i] && (rv != DS_OK || i != best_i))
			cudaGraphExecDestroy(g[i]);
	if (rv != DS_OK)
		return rv;
	f->graph[bi] = g[best_i];
	f->graph_cfg[bi] = best_i;
	f->warm[bi] = true;
	DS_CUDA_TRY(cudaGraphLaunch(g[best_i], c->stream), err);
	return DS_OK;
}

enum ds_status ds_cuda_fast_decode(struct ds_cuda_ctx *c, struct ds_cuda_pass *p,
                                   struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	int n = p->T, bi = ds_cuda_fast_bucket(n);
	int B = 1 << bi;
	DS_ASSERT(bi < DS_CUDA_N_BUCKETS && p->R == n);
	for (int r = n; r < B; r++) {
		c->hm.ids[r] = 0;
		c->hm.pos[r] = -1;
		c->hm.seq[r] = 0;
		c->hm.out_tok[r] = r;
		memset(&c->hm.sp[r], 0, sizeof(c->hm.sp[r]));
		c->hm.sp[r].top_p = 1.0f;
	}
	struct ds_cuda_pass pb = *p;
	pb.T = pb.R = B;
	int n_split = ds_cuda_fast_split(c, B, c->cfg.max_pos);
	if (f->use_graphs && f->graph_tune && !f->graph[bi])
		return fast_decode_tune(c, &pb, n_split, bi, err);
	return ds_cuda_pass_graphed(c, &ds_cuda_fast_ops, &pb, n_split, f->use_graphs,
	                            &f->graph[bi], &f->warm[bi], err);
}

void ds_cuda_fast_graphs_reset(struct ds_cuda_ctx *c)
{
	struct ds_cuda_fast *f = &c->fast;
	for (int i = 0; i < DS_CUDA_N_BUCKETS; i++) {
		if (f->graph[i])
			cudaGraphExecDestroy(f->graph[i]);
		f->graph[i] = NULL;
		f->warm[i] = false;
		f->graph_cfg[i] = -1;
	}
}
