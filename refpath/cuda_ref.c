/* cuda_ref.c - the CUDA reference path: our own invariant GEMM and fixed-tile attention.
 *
 * Nothing here looks at the batch to choose how to reduce. The GEMM has one tile configuration
 * and no split-K (kernels/gemm_ref.cu). Attention uses 64-position tiles aligned to absolute
 * positions; whether the tiles are spread over blocks (then merged by a combine kernel) or
 * walked by one block depends only on whether the partials fit the workspace, and both give
 * the same bits because the merge order and formula are the same (kernels/attn.cu). */
#include "cuda_internal.h"

static enum ds_status ref_gemm(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
			       float *C, int M, int N, int K, struct ds_err *err)
{
	DS_CUDA_TRY(ds_k_gemm_ref(A, W, C, M, N, K, c->stream), err);
	return DS_OK;
}

static enum ds_status ref_attention(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
				    const uint16_t *kv, int n_split, struct ds_err *err)
{
	(void)n_split;
	int chunks = p->max_pos / DS_K_ATTN_TILE + 1;
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
