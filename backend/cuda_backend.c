/* cuda_backend.c - the CUDA backend: device set-up, the paged KV pool, and the forward driver.
 *
 * A forward call is cut into passes that fit the preallocated buffers (cap_tokens tokens,
 * cap_rows output rows); a sequence may be split across passes, which is safe because every
 * pass writes its KV before the next reads it. Each pass uploads its metadata, runs the layers
 * through the path's ops (fastpath/cuda_fast.c or refpath/cuda_ref.c), samples on the device and
 * copies back only the rows (and the logits when asked). Fast-path decode batches and reference
 * passes of up to 512 rows go through per-bucket CUDA graphs instead (DS_CUDA_GRAPHS=0: none). */
#include "cuda_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CAP_TOKENS 4096
#define CAP_ROWS 1024
#define PART_BYTES ((size_t)256 << 20)

/* ---- pass execution ---- */

cudaError_t ds_cuda_sample(struct ds_cuda_ctx *c, bool fast, int R, int pdl)
{
	/* the fast path spreads the rows over about one block an SM (a block of 1024 threads takes
	 * an SM; at batch 32 one block a row took 57 us, bench/results/gpu-20261130-e572c35-trace)
	 * with fp32 Gumbel noise and top-p weights (17.7 us at batch 32,
	 * gpu-20261130-2f13592-sample2); the reference path keeps one block per row, so its tokens
	 * and logprobs stay the same bits at every batch size */
	int V = c->cfg.vocab_size;
	if (fast) {
		int nb = DS_MAX(1, DS_MIN(ds_k_sample_split_blocks(V), c->n_sm / DS_MAX(R, 1)));
		return ds_k_sample_split_pdl(c->logits, R, V, nb, c->dm.sp, c->dm.out, c->sample_ws,
		                             c->cap_rows, pdl, c->stream);
	}
	return ds_k_sample_pdl(c->logits, R, V, c->dm.sp, c->dm.out, pdl, c->stream);
}

/* Every layer of pass p, kernel by kernel, then the final norm of the output rows and the LM
 * head into c->logits. */
static enum ds_status pass_layers(struct ds_cuda_ctx *c, const struct ds_cuda_path_ops *ops,
                                  const struct ds_cuda_pass *p, int n_split, int pdl,
                                  struct ds_err *err)
{
	const struct ds_model_config *cfg = &c->cfg;
	int T = p->T, H = cfg->hidden, qd = ds_model_q_dim(cfg), kvd = ds_model_kv_dim(cfg);
	int F = cfg->ffn;
	cudaStream_t st = c->stream;
	struct ds_k_tokmeta tm = ds_cuda_tokmeta(c);
	struct ds_k_dims d = ds_cuda_dims(c);
	enum ds_status rv;
	c->dlt_parts = 1;
	c->dlt_pstride = 0;
	for (int l = 0; l < cfg->n_layer; l++) {
		const struct ds_cuda_layer *L = &c->layers[l];
		uint16_t *kv = c->kv + (size_t)l * c->kv_layer_elems;
		DS_CUDA_TRY(ds_k_rmsnorm_parts_pdl(c->x, l ? c->dlt : NULL, l ? c->dlt_parts : 1,
		                                   c->dlt_pstride, NULL, L->attn_norm, T, H,
		                                   cfg->rms_eps, c->h, pdl, st),
		            err);
		if ((rv = ops->gemm(c, c->h, L->wqkv, c->big, T, qd + 2 * kvd, H, err)) != DS_OK)
			return rv;
		bool fused = false;
		if (ops->attention_qkv &&
		    (rv = ops->attention_qkv(c, p, L, kv, n_split, &fused, err)) != DS_OK)
			return rv;
		if (!fused) {
			DS_CUDA_TRY(ds_k_qkv_rope_pdl(c->big, L->bqkv, L->q_norm, L->k_norm,
			                              c->rope_cs, tm, T, d, c->q, kv, pdl, st),
			            err);
			if ((rv = ops->attention(c, p, kv, n_split, err)) != DS_OK)
				return rv;
		}
		c->dlt_parts = 1;
		if ((rv = ops->gemm(c, c->att, L->wo, c->dlt, T, H, qd, err)) != DS_OK)
			return rv;
		DS_CUDA_TRY(ds_k_rmsnorm_parts_pdl(c->x, c->dlt, c->dlt_parts, c->dlt_pstride, NULL,
		                                   L->ffn_norm, T, H, cfg->rms_eps, c->h, pdl, st),
		            err);
		/* the activation: SiLU*mul fused into the gate/up GEMM (into big's memory), else
		 * the gate/up GEMM into big and silu_mul into h, or fused into the down GEMM */
		bool gu_done = false;
		uint16_t *act = (uint16_t *)c->big;
		c->dlt_parts = 1;
		if (ops->gemm_gu_silu && (rv = ops->gemm_gu_silu(c, c->h, L->w_gu, act, T, F, H,
		                                                 &gu_done, err)) != DS_OK)
			return rv;
		if (!gu_done) {
			if ((rv = ops->gemm(c, c->h, L->w_gu, c->big, T, 2 * F, H, err)) != DS_OK)
				return rv;
			if (ops->gemm_silu) {
				if ((rv = ops->gemm_silu(c, c->big, c->h, L->w_down, c->dlt, T, H,
				                         F, err)) != DS_OK)
					return rv;
				continue;
			}
			DS_CUDA_TRY(ds_k_silu_mul_pdl(c->big, T, F, c->h, pdl, st), err);
			act = c->h;
		}
		if ((rv = ops->gemm(c, act, L->w_down, c->dlt, T, H, F, err)) != DS_OK)
			return rv;
	}
	/* final residual add and norm, only for the output rows */
	DS_CUDA_TRY(ds_k_rmsnorm_parts_pdl(c->x, c->dlt, c->dlt_parts, c->dlt_pstride,
	                                   c->dm.out_tok, c->out_norm, p->R, H, cfg->rms_eps, c->h,
	                                   pdl, st),
	            err);
	return ops->gemm(c, c->h, c->lm_head, c->logits, p->R, cfg->vocab_size, H, err);
}

enum ds_status ds_cuda_pass_run(struct ds_cuda_ctx *c, const struct ds_cuda_path_ops *ops,
                                const struct ds_cuda_pass *p, int n_split, struct ds_err *err)
{
	enum ds_status rv;
	bool fast = ops == &ds_cuda_fast_ops;
	/* the fast path may chain its kernels with programmatic dependent launch (DS_CUDA_PDL=0:
	 * off); the embedding follows the metadata copies and is launched plainly */
	int pdl = fast && c->fast.pdl;

	DS_CUDA_TRY(ds_k_embed(c->tok_embd, c->dm.ids, p->T, c->cfg.hidden, c->x, c->stream), err);
	/* the fast path may run every layer, the final norm and the LM head in one kernel */
	bool fused = false;
	if (fast && (rv = ds_cuda_fast_mega(c, p, &fused, err)) != DS_OK)
		return rv;
	if (!fused && (rv = pass_layers(c, ops, p, n_split, pdl, err)) != DS_OK)
		return rv;
	DS_CUDA_TRY(ds_cuda_sample(c, fast, p->R, pdl), err);
	return DS_OK;
}

enum ds_status ds_cuda_pass_graphed(struct ds_cuda_ctx *c, const struct ds_cuda_path_ops *ops,
                                    const struct ds_cuda_pass *p, int n_split, bool capture,
                                    cudaGraphExec_t *graph, bool *warm, struct ds_err *err)
{
	enum ds_status rv = ds_cuda_meta_upload(c, p, err);
	if (rv != DS_OK)
		return rv;
	if (*graph) {
		DS_CUDA_TRY(cudaGraphLaunch(*graph, c->stream), err);
		return DS_OK;
	}
	if (!capture || !*warm) {
		*warm = true;
		return ds_cuda_pass_run(c, ops, p, n_split, err);
	}
	cudaGraph_t g = NULL;
	DS_CUDA_TRY(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), err);
	rv = ds_cuda_pass_run(c, ops, p, n_split, err);
	cudaError_t e = cudaStreamEndCapture(c->stream, &g);
	if (rv != DS_OK) {
		if (g)
			cudaGraphDestroy(g);
		return rv;
	}
	DS_CUDA_TRY(e, err);
	e = cudaGraphInstantiate(graph, g, 0);
	cudaGraphDestroy(g);
	if (e != cudaSuccess) {
		*graph = NULL;
		DS_CUDA_TRY(e, err);
	}
	DS_CUDA_TRY(cudaGraphLaunch(*graph, c->stream), err);
	return DS_OK;
}

float ds_cuda_time_best(struct ds_cuda_ctx *c, ds_cuda_launch_fn launch, void *arg, int reps,
                        void *flush, size_t flush_bytes)
{
	cudaEvent_t e0, e1;
	float best = INFINITY;
	if (cudaEventCreate(&e0) != cudaSuccess)
		return best;
	if (cudaEventCreate(&e1) != cudaSuccess) {
		cudaEventDestroy(e0);
		return best;
	}
	for (int i = 0; i < reps; i++) {
		/* a read, not a memset: no dirty lines written back inside the run */
		if (flush && ds_k_l2_evict(flush, flush_bytes, c->stream) != cudaSuccess) {
			best = INFINITY;
			break;
		}
		cudaEventRecord(e0, c->stream);
		cudaError_t e = launch(c, arg);
		cudaEventRecord(e1, c->stream);
		if (e != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess) {
			best = INFINITY;
			break;
		}
		float ms;
		cudaEventElapsedTime(&ms, e0, e1);
		if (i > 0 && ms < best)
			best = ms;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaGetLastError();
	return best;
}

enum ds_status ds_cuda_meta_upload(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
                                   struct ds_err *err)
{
	cudaStream_t st = c->stream;
	size_t ti = (size_t)p->T * sizeof(int32_t);
#define UP(f, bytes)                                                                               \
	DS_CUDA_TRY(cudaMemcpyAsync(c->dm.f, c->hm.f, (bytes), cudaMemcpyHostToDevice, st), err)
	UP(ids, ti);
	UP(pos, ti);
	UP(seq, ti);
	UP(bt_off, (size_t)p->n_seq * sizeof(int32_t));
	UP(bt, (size_t)p->n_bt * sizeof(int32_t));
	UP(out_tok, (size_t)p->R * sizeof(int32_t));
	UP(sp, (size_t)p->R * sizeof(struct ds_k_sample_row));
	if (c->ref_attn_mma) {
		/* the mode (walk or split tiles) may follow the positions: same bits */
		ds_k_attn_ref_mma_plan_split(c->hm.pos, c->hm.seq, p->T, ds_cuda_dims(c),
		                             c->part_floats, c->ref_attn_split, c->hm.aplan);
		UP(aplan, DS_K_ATTN_MMA_PLAN_INTS(p->T) * sizeof(int32_t));
	}
#undef UP
	return DS_OK;
}

enum ds_status ds_cuda_attn_mma(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
                                const uint16_t *kv, int n_split, struct ds_err *err)
{
	struct ds_k_dims d = ds_cuda_dims(c);
	/* a graph (n_split < 0) replays at any position: grid for max_pos, combine always */
	int top = n_split < 0 ? c->cfg.max_pos - 1 : p->max_pos;
	bool combine = n_split < 0 || c->hm.aplan[1] != 0;
	int occ = ds_k_attn_ref_mma_occ(c->hm.aplan, p->T, d, top, c->n_sm);
	DS_CUDA_TRY(ds_k_attn_ref_mma_split(c->q, kv, ds_cuda_tokmeta(c), c->dm.aplan, p->T, d, top,
	                                    occ, c->part, combine, c->att, c->stream),
	            err);
	return DS_OK;
}

/* Runs one pass whose host metadata is filled, and copies its rows (and logits) out. */
static enum ds_status pass_exec(struct ds_cuda_ctx *c, const struct ds_fwd_batch *b,
                                struct ds_cuda_pass *p, bool decode, int row_base,
                                struct ds_err *err)
{
	enum ds_status rv;
	if (decode) {
		rv = ds_cuda_fast_decode(c, p, err);
	} else if (b->path == DS_PATH_REF && c->ref_graphs &&
	           ds_cuda_ref_bucket(c, DS_MAX(p->T, p->R)) >= 0) {
		rv = ds_cuda_ref_graphed(c, p, err);
	} else {
		const struct ds_cuda_path_ops *ops =
		    b->path == DS_PATH_REF ? &ds_cuda_ref_ops : &ds_cuda_fast_ops;
		int n_split =
		    b->path == DS_PATH_FAST ? ds_cuda_fast_split(c, p->T, p->max_pos + 1) : 0;
		if ((rv = ds_cuda_meta_upload(c, p, err)) != DS_OK)
			return rv;
		rv = ds_cuda_pass_run(c, ops, p, n_split, err);
	}
	if (rv != DS_OK)
		return rv;
	int R = p->R, V = c->cfg.vocab_size;
	DS_CUDA_TRY(cudaMemcpyAsync(c->hm.out, c->dm.out, (size_t)R * sizeof(*c->hm.out),
	                            cudaMemcpyDeviceToHost, c->stream),
	            err);
	if (b->logits)
		DS_CUDA_TRY(cudaMemcpyAsync(b->logits + (size_t)row_base * V, c->logits,
		                            (size_t)R * V * sizeof(float), cudaMemcpyDeviceToHost,
		                            c->stream),
		            err);
	DS_CUDA_TRY(cudaStreamSynchronize(c->stream), err);
	for (int r = 0; r < R; r++) {
		b->rows[row_base + r].token = c->hm.out[r].token;
		b->rows[row_base + r].logprob = c->hm.out[r].logprob;
		b->rows[row_base + r].margin = c->hm.out[r].margin;
	}
	return DS_OK;
}

static enum ds_status cuda_forward(void *ctx, const struct ds_fwd_batch *b, struct ds_err *err)
{
	struct ds_cuda_ctx *c = ctx;
	if (!c->kv)
		return ds_errf(err, DS_ERR_INVALID, "cuda: forward before kv_init");
	bool decode = b->path == DS_PATH_FAST && b->n_seqs <= DS_CUDA_MAX_DECODE;
	for (int i = 0; decode && i < b->n_seqs; i++)
		decode = b->seqs[i].n_tokens == 1;

	int bs = c->block_size, si = 0, ti = 0, row_base = 0;
	while (si < b->n_seqs) {
		struct ds_cuda_pass p = {0, 0, 0, 0, 0, decode};
		while (si < b->n_seqs && p.T < c->cap_tokens && p.R < c->cap_rows) {
			const struct ds_fwd_seq *s = &b->seqs[si];
			int take = DS_MIN(s->n_tokens - ti, c->cap_tokens - p.T);
			if (s->all_rows)
				take = DS_MIN(take, c->cap_rows - p.R);
			int need = (s->pos0 + ti + take + bs - 1) / bs;
			if (p.n_bt + need > c->cap_bt) {
				if (p.T == 0)
					return ds_errf(err, DS_ERR_TOO_LONG,
					               "cuda: sequence %d needs %d blocks > %d", si,
					               need, c->cap_bt);
				break;
			}
			c->hm.bt_off[p.n_seq] = p.n_bt;
			memcpy(c->hm.bt + p.n_bt, s->blocks, (size_t)need * sizeof(int32_t));
			p.n_bt += need;
			for (int j = 0; j < take; j++) {
				int t = p.T + j, pos = s->pos0 + ti + j;
				c->hm.ids[t] = s->tokens[ti + j];
				c->hm.pos[t] = pos;
				c->hm.seq[t] = p.n_seq;
				p.max_pos = DS_MAX(p.max_pos, pos);
				bool out = s->all_rows || ti + j == s->n_tokens - 1;
				if (out) {
					struct ds_k_sample_row *r = &c->hm.sp[p.R];
					c->hm.out_tok[p.R] = t;
					r->temperature = s->sp.temperature;
					r->top_k = s->sp.top_k;
					r->top_p = s->sp.top_p;
					r->pad = 0;
					r->seed = s->sp.seed;
					r->pos = (int64_t)pos + 1;
					p.R++;
				}
			}
			p.T += take;
			p.n_seq++;
			ti += take;
			if (ti == s->n_tokens) {
				si++;
				ti = 0;
			}
		}
		enum ds_status rv = pass_exec(c, b, &p, decode, row_base, err);
		if (rv != DS_OK)
			return rv;
		row_base += p.R;
	}
	return DS_OK;
}

/* ---- KV pool and buffers ---- */

static void buffers_free(struct ds_cuda_ctx *c)
{
	void *dev[] = {c->kv,     c->x,      c->dlt,       c->big,      c->h,
	               c->q,      c->att,    c->logits,    c->part,     c->dm.ids,
	               c->dm.pos, c->dm.seq, c->dm.bt_off, c->dm.bt,    c->dm.out_tok,
	               c->dm.sp,  c->dm.out, c->dm.aplan,  c->sample_ws};
	for (size_t i = 0; i < DS_ARRAY_LEN(dev); i++)
		if (dev[i])
			cudaFree(dev[i]);
	void *host[] = {c->hm.ids,     c->hm.pos, c->hm.seq, c->hm.bt_off, c->hm.bt,
	                c->hm.out_tok, c->hm.sp,  c->hm.out, c->hm.aplan};
	for (size_t i = 0; i < DS_ARRAY_LEN(host); i++)
		if (host[i])
			cudaFreeHost(host[i]);
}

static enum ds_status cuda_kv_init(void *ctx, int n_blocks, int block_size, struct ds_err *err)
{
	struct ds_cuda_ctx *c = ctx;
	const struct ds_model_config *cfg = &c->cfg;
	if (c->kv)
		return ds_errf(err, DS_ERR_INVALID, "cuda: kv_init called twice");
	c->n_blocks = n_blocks;
	c->block_size = block_size;
	c->kv_layer_elems = (size_t)n_blocks * 2 * cfg->n_kv_head * block_size * cfg->head_dim;
	size_t kv_bytes = c->kv_layer_elems * cfg->n_layer * sizeof(uint16_t);
	cudaError_t e = cudaMalloc((void **)&c->kv, kv_bytes);
	if (e != cudaSuccess) {
		c->kv = NULL;
		cudaGetLastError();
		return ds_errf(err, DS_ERR_NOMEM, "cuda: cannot allocate %.2f GB of KV cache (%s)",
		               (double)kv_bytes / 1e9, cudaGetErrorString(e));
	}
	int T = c->cap_tokens = CAP_TOKENS, R = c->cap_rows = CAP_ROWS;
	c->cap_bt = T + DS_CUDA_MAX_DECODE * ((cfg->max_pos + block_size - 1) / block_size);
	size_t H = (size_t)cfg->hidden, qd = (size_t)ds_model_q_dim(cfg);
	size_t kvd = (size_t)ds_model_kv_dim(cfg), F = (size_t)cfg->ffn;
	size_t wide = DS_MAX(qd + 2 * kvd, 2 * F);
	c->part_floats = PART_BYTES / sizeof(float);
	enum ds_status rv = DS_OK;
#define DEV(ptr, bytes) DS_CUDA_GOTO(cudaMalloc((void **)&(ptr), (bytes)), err, rv)
#define HOST(ptr, bytes)                                                                           \
	DS_CUDA_GOTO(cudaHostAlloc((void **)&(ptr), (bytes), cudaHostAllocDefault), err, rv)
	DEV(c->x, (size_t)T * H * sizeof(float));
	DEV(c->dlt, (size_t)T * H * sizeof(float));
	DEV(c->big, (size_t)T * wide * sizeof(float));
	DEV(c->h, (size_t)T * DS_MAX(DS_MAX(H, F), qd) * sizeof(uint16_t));
	DEV(c->q, (size_t)T * qd * sizeof(uint16_t));
	DEV(c->att, (size_t)T * qd * sizeof(uint16_t));
	DEV(c->logits, (size_t)R * cfg->vocab_size * sizeof(float));
	DEV(c->part, PART_BYTES);
	size_t ws_bytes = ds_k_sample_ws_bytes(R, cfg->vocab_size);
	DEV(c->sample_ws, ws_bytes);
	DS_CUDA_GOTO(cudaMemset(c->sample_ws, 0, ws_bytes), err, rv);
	size_t ti = (size_t)T * sizeof(int32_t);
	DEV(c->dm.ids, ti);
	DEV(c->dm.pos, ti);
	DEV(c->dm.seq, ti);
	DEV(c->dm.bt_off, ti);
	DEV(c->dm.bt, (size_t)c->cap_bt * sizeof(int32_t));
	DEV(c->dm.out_tok, (size_t)R * sizeof(int32_t));
	DEV(c->dm.sp, (size_t)R * sizeof(struct ds_k_sample_row));
	DEV(c->dm.out, (size_t)R * sizeof(struct ds_k_sample_out));
	HOST(c->hm.ids, ti);
	HOST(c->hm.pos, ti);
	HOST(c->hm.seq, ti);
	HOST(c->hm.bt_off, ti);
	HOST(c->hm.bt, (size_t)c->cap_bt * sizeof(int32_t));
	HOST(c->hm.out_tok, (size_t)R * sizeof(int32_t));
	HOST(c->hm.sp, (size_t)R * sizeof(struct ds_k_sample_row));
	HOST(c->hm.out, (size_t)R * sizeof(struct ds_k_sample_out));
	DEV(c->dm.aplan, DS_K_ATTN_MMA_PLAN_INTS(T) * sizeof(int32_t));
	HOST(c->hm.aplan, DS_K_ATTN_MMA_PLAN_INTS(T) * sizeof(int32_t));
#undef DEV
#undef HOST
	DS_CUDA_GOTO(ds_k_attn_setup(ds_cuda_dims(c)), err, rv);
	if (c->ref_attn_mma)
		DS_CUDA_GOTO(ds_k_attn_ref_mma_setup(ds_cuda_dims(c)), err, rv);
	return DS_OK;
fail:
	buffers_free(c);
	memset(&c->hm, 0, sizeof(c->hm));
	memset(&c->dm, 0, sizeof(c->dm));
	c->kv = NULL;
	c->x = c->dlt = c->big = c->part = c->logits = NULL;
	c->h = c->q = c->att = NULL;
	c->sample_ws = NULL;
	return rv;
}

static enum ds_status cuda_kv_copy_block(void *ctx, int src, int dst, struct ds_err *err)
{
	struct ds_cuda_ctx *c = ctx;
	size_t blk = c->kv_layer_elems / (size_t)c->n_blocks * sizeof(uint16_t);
	size_t pitch = c->kv_layer_elems * sizeof(uint16_t);
	DS_CUDA_TRY(cudaMemcpy2DAsync((uint8_t *)c->kv + (size_t)dst * blk, pitch,
	                              (uint8_t *)c->kv + (size_t)src * blk, pitch, blk,
	                              (size_t)c->cfg.n_layer, cudaMemcpyDeviceToDevice, c->stream),
	            err);
	DS_CUDA_TRY(cudaStreamSynchronize(c->stream), err);
	return DS_OK;
}

static void cuda_describe(void *ctx, char *buf, size_t len)
{
	struct ds_cuda_ctx *c = ctx;
	snprintf(buf, len, "cuda: %s (device %d, %d SMs)", c->dev_name, c->device, c->n_sm);
}

static void cuda_free(void *ctx)
{
	struct ds_cuda_ctx *c = ctx;
	if (!c)
		return;
	cudaSetDevice(c->device);
	if (c->stream)
		cudaStreamSynchronize(c->stream);
	ds_cuda_fast_free(c);
	ds_cuda_ref_free(c);
	buffers_free(c);
	ds_cuda_weights_free(c);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
}

/* The reference path's graph buckets (the fast path's decode buckets are powers of two). */
static int cuda_warm_sizes(void *ctx, enum ds_path path, int *sizes, int cap)
{
	struct ds_cuda_ctx *c = ctx;
	if (path != DS_PATH_REF || !c->ref_graphs)
		return 0;
	int n = DS_MIN(cap, c->ref.n_buckets);
	for (int i = 0; i < n; i++)
		sizes[i] = c->ref.bucket_rows[i];
	return n;
}

static const struct ds_backend_i cuda_iface = {
    .name = "cuda",
    .kv_init = cuda_kv_init,
    .forward = cuda_forward,
    .kv_copy_block = cuda_kv_copy_block,
    .set_threads = NULL,
    .warm_sizes = cuda_warm_sizes,
    .describe = cuda_describe,
    .free = cuda_free,
};

enum ds_status ds_backend_cuda_init(struct ds_backend *be, const struct ds_model *m, int device,
                                    struct ds_err *err)
{
	memset(be, 0, sizeof(*be));
	const struct ds_model_config *cfg = &m->cfg;
	if (cfg->head_dim % 8 != 0 || cfg->hidden % 8 != 0 || cfg->ffn % 8 != 0)
		return ds_errf(err, DS_ERR_UNSUPPORTED,
		               "cuda: hidden %d, ffn %d and head_dim %d must be multiples of 8",
		               cfg->hidden, cfg->ffn, cfg->head_dim);
	if (cfg->head_dim > 512)
		return ds_errf(err, DS_ERR_UNSUPPORTED, "cuda: head_dim %d > 512", cfg->head_dim);
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
		cudaGetLastError();
		return ds_errf(err, DS_ERR_UNSUPPORTED, "cuda: no CUDA device");
	}
	if (device < 0 || device >= n_dev)
		return ds_errf(err, DS_ERR_INVALID, "cuda: device %d out of range (%d devices)",
		               device, n_dev);
	struct ds_cuda_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return ds_errf(err, DS_ERR_NOMEM, "cuda: out of memory");
	c->model = m;
	c->cfg = *cfg;
	c->device = device;
	enum ds_status rv = DS_OK;
	struct cudaDeviceProp prop;
	DS_CUDA_GOTO(cudaSetDevice(device), err, rv);
	DS_CUDA_GOTO(cudaGetDeviceProperties(&prop, device), err, rv);
	c->n_sm = prop.multiProcessorCount;
	snprintf(c->dev_name, sizeof(c->dev_name), "%.100s", prop.name);
	DS_CUDA_GOTO(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err, rv);
	DS_CUDA_GOTO(ds_k_gemm_ref_setup(), err, rv);
	/* the reference attention kernel is part of the reference path's definition: chosen once,
	 * by head_dim support and DS_REF_ATTN=old only, never by a pass's shape */
	const char *ra = getenv("DS_REF_ATTN");
	struct ds_k_dims rd = {cfg->n_head, cfg->n_kv_head, cfg->head_dim, 16, 1, cfg->rms_eps};
	c->ref_attn_mma = ds_k_attn_ref_mma_supported(rd) && !(ra && strcmp(ra, "old") == 0);
	const char *rs = getenv("DS_REF_ATTN_SPLIT");
	c->ref_attn_split = rs && (strcmp(rs, "0") == 0 || strcmp(rs, "1") == 0) ? atoi(rs) : -1;
	if ((rv = ds_cuda_weights_init(c, err)) != DS_OK)
		goto fail;
	if ((rv = ds_cuda_fast_init(c, err)) != DS_OK)
		goto fail;
	if ((rv = ds_cuda_ref_init(c, err)) != DS_OK)
		goto fail;
	const char *g = getenv("DS_CUDA_GRAPHS");
	c->ref_graphs = !(g && strcmp(g, "0") == 0);
	be->iface = &cuda_iface;
	be->ctx = c;
	be->model = m;
	return DS_OK;
fail:
	cuda_free(c);
	return rv;
}
