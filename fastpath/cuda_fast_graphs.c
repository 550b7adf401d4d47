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
 * the H200 cost 6-7 us a layer at batch 8 (bench/results/gpu-20261130-e572c35-trace). */
const struct ds_cuda_step_cfg ds_cuda_fast_step_cfgs[DS_CUDA_N_STEP_CFGS] = {
    {true, true, true, 0, false, false},   {false, true, true, 0, false, false},
    {true, false, true, 0, false, false},  {false, false, true, 0, false, false},
    {true, true, false, 0, false, false},  {false, true, false, 0, false, false},
    {true, false, false, 0, false, false}, {false, false, false, 0, false, false},
    {true, true, true, 1, false, false},   {true, true, true, 2, false, false},
    {true, true, true, 3, false, false},   {true, true, false, 1, false, false},
    {true, true, false, 2, false, false},  {true, true, false, 3, false, false},
    {true, true, true, 0, true, false},    {true, false, true, 0, true, false},
    {true, true, true, 0, false, true},    {false, true, true, 0, false, true},
    {true, true, true, 2, false, true},    {true, true, true, 3, false, true}};

static cudaError_t graph_launch_fn(struct ds_cuda_ctx *c, void *arg)
{
	return cudaGraphLaunch(*(cudaGraphExec_t *)arg, c->stream);
}

/* First use of bucket bi with graphs and tuning on: one eager pass (the GEMM choices are
 * timed outside capture), then the pass captured under every step configuration the
 * environment allows (DS_CUDA_SKINNY=0 / DS_CUDA_PDL=0 / DS_FAST_FUSE_QKV=0 /
 * DS_FAST_SKINNY_STAGE=0 rule theirs out), each replay timed
 * (best of 3 after one), and the fastest graph kept and launched once more, so this pass's
 * outputs and KV writes are that graph's. Replaying a pass is idempotent: the same inputs give
 * the same outputs and KV. */
static enum ds_status fast_decode_tune(struct ds_cuda_ctx *c, const struct ds_cuda_pass *pb,
                                       int n_split, int bi, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	enum ds_status rv = ds_cuda_meta_upload(c, pb, err);
	if (rv == DS_OK)
		rv = ds_cuda_pass_run(c, &ds_cuda_fast_ops, pb, n_split, err);
	if (rv != DS_OK)
		return rv;
	bool skinny0 = f->skinny, pdl0 = f->pdl, fuse0 = f->fuse_qkv, mega0 = f->mega;
	bool merge0 = f->attn_merge;
	int stage0 = f->skinny_stage;
	cudaGraphExec_t best = NULL;
	float best_ms = INFINITY;
	int best_i = -1;
	for (int i = 0; i < DS_CUDA_N_STEP_CFGS && rv == DS_OK; i++) {
		const struct ds_cuda_step_cfg *sc = &ds_cuda_fast_step_cfgs[i];
		f->graph_ms[bi][i] = INFINITY;
		if ((sc->skinny && !skinny0) || (sc->pdl && !pdl0) || (sc->fuse && !fuse0) ||
		    (sc->stage && !f->stage_tune) ||
		    (sc->mega && !(f->mega_tune && ds_cuda_fast_mega_fits(c, pb))) ||
		    (sc->merge && !f->merge_tune) || (!sc->merge && merge0))
			continue;
		f->skinny = sc->skinny;
		f->pdl = sc->pdl;
		f->fuse_qkv = sc->fuse;
		f->skinny_stage = sc->stage;
		f->mega = sc->mega;
		f->attn_merge = sc->merge;
		cudaGraphExec_t g = NULL;
		bool warm = true;
		rv = ds_cuda_pass_graphed(c, &ds_cuda_fast_ops, pb, n_split, true, &g, &warm, err);
		if (rv != DS_OK)
			break;
		float ms = ds_cuda_time_best(c, graph_launch_fn, &g, 4, NULL, 0);
		f->graph_ms[bi][i] = ms;
		if (ms < best_ms) {
			if (best)
				cudaGraphExecDestroy(best);
			best = g;
			best_ms = ms;
			best_i = i;
		} else {
			cudaGraphExecDestroy(g);
		}
	}
	f->skinny = skinny0;
	f->pdl = pdl0;
	f->fuse_qkv = fuse0;
	f->skinny_stage = stage0;
	f->mega = mega0;
	f->attn_merge = merge0;
	if (rv == DS_OK && !best)
		rv = ds_errf(err, DS_ERR_DEVICE, "cuda: no decode graph could be timed (bucket %d)",
		             1 << bi);
	if (rv != DS_OK) {
		if (best)
			cudaGraphExecDestroy(best);
		return rv;
	}
	f->graph[bi] = best;
	f->graph_cfg[bi] = best_i;
	f->warm[bi] = true;
	DS_CUDA_TRY(cudaGraphLaunch(best, c->stream), err);
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
