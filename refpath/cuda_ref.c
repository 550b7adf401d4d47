/* cuda_ref.c - the CUDA reference path: our own invariant GEMM and fixed-tile attention.
 *
 * Nothing here looks at the batch to choose how to reduce. The GEMM has one tile configuration
 * and no split-K (kernels/gemm_ref.cu). Attention uses 64-position tiles aligned to absolute
 * positions; whether the tiles are spread over blocks (then merged by a combine kernel) or
 * walked by one block depends only on whether the partials fit the workspace, and both give
 * the same bits because the merge order and formula are the same (kernels/attn.cu). Passes of
 * up to 512 rows (verify windows, decode in invariant mode) are padded to a power of two and
 * replayed from per-bucket CUDA graphs; padding rows are per-row work only, so they change
 * nothing for the real rows. */
#include "cuda_internal.h"

static enum ds_status ref_gemm(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
                               float *C, int M, int N, int K, struct ds_err *err)
{
	DS_CUDA_TRY(ds_k_gemm_ref(A, W, C, M, N, K, c->stream), err);
	return DS_OK;
}

/* The tensor-core kernel (kernels/attn_mma.cu) when c->ref_attn_mma (head_dim 64 or 128 and
 * not DS_REF_ATTN=old; fixed at init, never by the pass), with the row groups that
 * ds_cuda_meta_upload planned for this pass. Else the CUDA-core kernel: its tiles
 * are spread over blocks when the partials fit the workspace, else one block walks them all
 * (same bits); n_split < 0 (graph capture, where the grid may not depend on the positions):
 * plan for the longest context. */
static enum ds_status ref_attention(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
                                    const uint16_t *kv, int n_split, struct ds_err *err)
{
	if (c->ref_attn_mma) {
		DS_CUDA_TRY(ds_k_attn_ref_mma(c->q, kv, ds_cuda_tokmeta(c), c->dm.aplan, p->T,
		                              ds_cuda_dims(c), c->att, c->stream),
		            err);
		return DS_OK;
	}
	int top = n_split < 0 ? c->cfg.max_pos - 1 : p->max_pos;
	int chunks = top / DS_K_ATTN_TILE + 1;
	size_t need = (size_t)p->T * c->cfg.n_head * chunks * (c->cfg.head_dim + 2);
	int split = need <= c->part_floats ? chunks : 0;
	DS_CUDA_TRY(ds_k_attn_ref(c->q, kv, ds_cuda_tokmeta(c), p->T, ds_cuda_dims(c), split,
	                          c->part, c->att, c->stream),
	            err);
	return DS_OK;
}

const struct ds_cuda_path_ops ds_cuda_ref_ops = {
    .gemm = ref_gemm,
    .attention = ref_attention,
};

/* ---- graphs of padded reference passes ---- */

enum ds_status ds_cuda_ref_graphed(struct ds_cuda_ctx *c, struct ds_cuda_pass *p,
                                   struct ds_err *err)
{
	struct ds_cuda_ref *r = &c->ref;
	int n = DS_MAX(p->T, p->R), bi = 0;
	while ((DS_CUDA_REF_GRAPH_MIN << bi) < n)
		bi++;
	int B = DS_CUDA_REF_GRAPH_MIN << bi;
	DS_ASSERT(bi < DS_CUDA_REF_BUCKETS && B <= c->cap_tokens && B <= c->cap_rows);
	for (int t = p->T; t < B; t++) {
		c->hm.ids[t] = 0;
		c->hm.pos[t] = -1;
		c->hm.seq[t] = 0;
	}
	for (int o = p->R; o < B; o++) {
		c->hm.out_tok[o] = -1;
		memset(&c->hm.sp[o], 0, sizeof(c->hm.sp[o]));
		c->hm.sp[o].top_p = 1.0f;
	}
	struct ds_cuda_pass pb = *p;
	pb.T = pb.R = B;
	enum ds_status rv = ds_cuda_meta_upload(c, &pb, err);
	if (rv != DS_OK)
		return rv;
	if (r->graph[bi]) {
		DS_CUDA_TRY(cudaGraphLaunch(r->graph[bi], c->stream), err);
		return DS_OK;
	}
	if (!r->warm[bi]) {
		r->warm[bi] = true;
		return ds_cuda_pass_run(c, &ds_cuda_ref_ops, &pb, -1, err);
	}
	cudaGraph_t g = NULL;
	DS_CUDA_TRY(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), err);
	rv = ds_cuda_pass_run(c, &ds_cuda_ref_ops, &pb, -1, err);
	cudaError_t e = cudaStreamEndCapture(c->stream, &g);
	if (rv != DS_OK) {
		if (g)
			cudaGraphDestroy(g);
		return rv;
	}
	DS_CUDA_TRY(e, err);
	e = cudaGraphInstantiate(&r->graph[bi], g, 0);
	cudaGraphDestroy(g);
	if (e != cudaSuccess) {
		r->graph[bi] = NULL;
		DS_CUDA_TRY(e, err);
	}
	DS_CUDA_TRY(cudaGraphLaunch(r->graph[bi], c->stream), err);
	return DS_OK;
}

void ds_cuda_ref_free(struct ds_cuda_ctx *c)
{
	for (int i = 0; i < DS_CUDA_REF_BUCKETS; i++)
		if (c->ref.graph[i])
			cudaGraphExecDestroy(c->ref.graph[i]);
	memset(&c->ref, 0, sizeof(c->ref));
}
