/* cuda_weights.c - the CUDA backend's weights: layout, upload or on-device generation, RoPE.
 *
 * All weights live in one device allocation, laid out per layer so the q/k/v projections form
 * one (q_dim + 2 kv_dim, hidden) matrix and gate/up one (2 ffn, hidden) matrix: each becomes a
 * single GEMM. Deferred synthetic models (llama3-8b) are generated in place with the counter-
 * based formula of model/synth.h, so a 16 GB model needs neither a file nor host memory. Host
 * models are copied through two pinned staging buffers, with a progress line for large ones. */
#include "cuda_internal.h"
#include "synth.h"
#include "tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define STAGE_BYTES ((size_t)64 << 20)

static size_t align256(size_t x)
{
	return (x + 255) & ~(size_t)255;
}

/* The device address of descriptor d's data (after weights_layout). */
static uint16_t *weights_slot(struct ds_cuda_ctx *c, const struct ds_tensor_desc *d)
{
	const struct ds_model_config *cfg = &c->cfg;
	size_t h = (size_t)cfg->hidden, qd = (size_t)ds_model_q_dim(cfg);
	size_t kvd = (size_t)ds_model_kv_dim(cfg), f = (size_t)cfg->ffn;
	struct ds_cuda_layer *L = d->layer >= 0 ? &c->layers[d->layer] : NULL;
	switch (d->field) {
	case DS_T_TOK_EMBD:
		return c->tok_embd;
	case DS_T_OUT_NORM:
		return c->out_norm;
	case DS_T_LM_HEAD:
		return c->lm_head;
	case DS_T_ATTN_NORM:
		return L->attn_norm;
	case DS_T_WQ:
		return L->wqkv;
	case DS_T_WK:
		return L->wqkv + qd * h;
	case DS_T_WV:
		return L->wqkv + (qd + kvd) * h;
	case DS_T_BQ:
		return L->bqkv;
	case DS_T_BK:
		return L->bqkv ? L->bqkv + qd : NULL;
	case DS_T_BV:
		return L->bqkv ? L->bqkv + qd + kvd : NULL;
	case DS_T_Q_NORM:
		return L->q_norm;
	case DS_T_K_NORM:
		return L->k_norm;
	case DS_T_WO:
		return L->wo;
	case DS_T_FFN_NORM:
		return L->ffn_norm;
	case DS_T_W_GATE:
		return L->w_gu;
	case DS_T_W_UP:
		return L->w_gu ? L->w_gu + f * h : NULL;
	case DS_T_W_DOWN:
		return L->w_down;
	}
	return NULL;
}

/* Assigns every slot its place in base and returns the total size (base == NULL: sizing only,
 * slots are set to NULL). */
static size_t weights_layout(struct ds_cuda_ctx *c, uint8_t *base)
{
	const struct ds_model_config *cfg = &c->cfg;
	size_t h = (size_t)cfg->hidden, qd = (size_t)ds_model_q_dim(cfg);
	size_t kvd = (size_t)ds_model_kv_dim(cfg), f = (size_t)cfg->ffn, D = (size_t)cfg->head_dim;
	size_t off = 0;
#define TAKE(ptr, elems)                                                                           \
	do {                                                                                       \
		(ptr) = base ? (uint16_t *)(base + off) : NULL;                                    \
		off += align256((size_t)(elems) * sizeof(uint16_t));                               \
	} while (0)
	TAKE(c->tok_embd, (size_t)cfg->vocab_size * h);
	TAKE(c->out_norm, h);
	c->lm_head = NULL;
	if (!cfg->tie_embeddings)
		TAKE(c->lm_head, (size_t)cfg->vocab_size * h);
	for (int l = 0; l < cfg->n_layer; l++) {
		struct ds_cuda_layer *L = &c->layers[l];
		memset(L, 0, sizeof(*L));
		TAKE(L->attn_norm, h);
		TAKE(L->wqkv, (qd + 2 * kvd) * h);
		if (cfg->attn_bias)
			TAKE(L->bqkv, qd + 2 * kvd);
		if (cfg->qk_norm) {
			TAKE(L->q_norm, D);
			TAKE(L->k_norm, D);
		}
		TAKE(L->wo, h * qd);
		TAKE(L->ffn_norm, h);
		TAKE(L->w_gu, 2 * f * h);
		TAKE(L->w_down, h * f);
	}
#undef TAKE
	if (base && cfg->tie_embeddings)
		c->lm_head = c->tok_embd;
	return off;
}

static enum ds_status rope_init(struct ds_cuda_ctx *c, struct ds_err *err)
{
	const struct ds_model_config *cfg = &c->cfg;
	int half = cfg->head_dim / 2;
	size_t n = (size_t)cfg->max_pos * half * 2;
	float *cs = malloc(n * sizeof(float));
	if (!cs)
		return ds_errf(err, DS_ERR_NOMEM, "cuda: out of memory for the RoPE table");
	/* the same table as the CPU backend: inverse frequencies and angles in double */
	for (int i = 0; i < half; i++) {
		double f = 1.0 / pow((double)cfg->rope_theta, (2.0 * i) / cfg->head_dim);
		if (cfg->rope_scaling == DS_ROPE_LLAMA3) {
			double factor = cfg->rope_factor, lo = cfg->rope_low_freq_factor;
			double hi = cfg->rope_high_freq_factor, old = cfg->rope_orig_max_pos;
			double wavelen = 2.0 * M_PI / f;
			if (wavelen > old / lo)
				f = f / factor;
			else if (wavelen >= old / hi) {
				double smooth = (old / wavelen - lo) / (hi - lo);
				f = (1.0 - smooth) * f / factor + smooth * f;
			}
		}
		for (int p = 0; p < cfg->max_pos; p++) {
			double ang = (double)p * f;
			cs[((size_t)p * half + i) * 2] = (float)cos(ang);
			cs[((size_t)p * half + i) * 2 + 1] = (float)sin(ang);
		}
	}
	enum ds_status rv = DS_OK;
	DS_CUDA_GOTO(cudaMalloc((void **)&c->rope_cs, n * sizeof(float)), err, rv);
	DS_CUDA_GOTO(cudaMemcpy(c->rope_cs, cs, n * sizeof(float), cudaMemcpyHostToDevice), err,
	             rv);
fail:
	free(cs);
	return rv;
}

/* Copies n bytes from host src to device dst through the two pinned buffers. */
static enum ds_status upload(struct ds_cuda_ctx *c, void *dst, const void *src, size_t n,
                             void *stage[2], cudaEvent_t ev[2], int *turn, struct ds_err *err)
{
	for (size_t done = 0; done < n;) {
		size_t len = DS_MIN(STAGE_BYTES, n - done);
		int i = *turn;
		*turn ^= 1;
		DS_CUDA_TRY(cudaEventSynchronize(ev[i]), err);
		memcpy(stage[i], (const uint8_t *)src + done, len);
		DS_CUDA_TRY(cudaMemcpyAsync((uint8_t *)dst + done, stage[i], len,
		                            cudaMemcpyHostToDevice, c->stream),
		            err);
		DS_CUDA_TRY(cudaEventRecord(ev[i], c->stream), err);
		done += len;
	}
	return DS_OK;
}

enum ds_status ds_cuda_weights_init(struct ds_cuda_ctx *c, struct ds_err *err)
{
	const struct ds_model *m = c->model;
	const struct ds_model_config *cfg = &c->cfg;
	enum ds_status rv = DS_OK;
	struct ds_tensor_desc *ts = NULL;
	void *stage[2] = {NULL, NULL};
	cudaEvent_t ev[2] = {NULL, NULL};

	/* our kernels read bf16 weights; an f32 model (model.h wtype) is a CPU-backend option */
	if (m->wtype != DS_DTYPE_BF16)
		return ds_errf(err, DS_ERR_INVALID,
		               "cuda: model %s has %s weights; the CUDA backend runs bf16 only "
		               "(f32 precision is for the CPU backend)",
		               m->source, ds_dtype_name(m->wtype));

	c->layers = calloc((size_t)cfg->n_layer, sizeof(*c->layers));
	int n = ds_tensor_count(cfg);
	ts = calloc((size_t)n, sizeof(*ts));
	if (!c->layers || !ts) {
		rv = ds_errf(err, DS_ERR_NOMEM, "cuda: out of memory for the weight table");
		goto fail;
	}
	ds_tensor_list(cfg, ts);
	c->wbytes = weights_layout(c, NULL);
	DS_CUDA_GOTO(cudaMalloc(&c->wbuf, c->wbytes), err, rv);
	weights_layout(c, c->wbuf);

	bool big = c->wbytes > ((size_t)1 << 30);
	if (!m->deferred) {
		for (int i = 0; i < 2; i++) {
			DS_CUDA_GOTO(cudaHostAlloc(&stage[i], STAGE_BYTES, cudaHostAllocDefault),
			             err, rv);
			DS_CUDA_GOTO(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming), err,
			             rv);
			DS_CUDA_GOTO(cudaEventRecord(ev[i], c->stream), err, rv);
		}
	}
	size_t done = 0;
	int turn = 0, last_gb = -1;
	for (int i = 0; i < n; i++) {
		uint16_t *dst = weights_slot(c, &ts[i]);
		size_t numel = (size_t)ds_tensor_numel(&ts[i]);
		if (!dst) {
			rv = ds_errf(err, DS_ERR_INTERNAL, "cuda: no device slot for %s",
			             ts[i].name);
			goto fail;
		}
		if (m->deferred) {
			float scale = ts[i].synth_scale;
			if (ts[i].field == DS_T_TOK_EMBD && cfg->tie_embeddings)
				scale = ds_synth_tied_embd_scale(cfg);
			DS_CUDA_GOTO(ds_k_synth_fill(dst, numel, 0, m->synth_seed,
			                             ds_synth_key(ts[i].name), scale,
			                             ts[i].synth_offset, c->stream),
			             err, rv);
		} else {
			struct ds_model_weights w = m->w;
			const uint16_t *src = *ds_tensor_slot(&w, &ts[i]);
			if (!src) {
				rv = ds_errf(err, DS_ERR_NOT_FOUND,
				             "cuda: model has no data for tensor %s", ts[i].name);
				goto fail;
			}
			rv = upload(c, dst, src, numel * sizeof(uint16_t), stage, ev, &turn, err);
			if (rv != DS_OK)
				goto fail;
		}
		done += numel * sizeof(uint16_t);
		if (big && (int)(done >> 30) != last_gb) {
			last_gb = (int)(done >> 30);
			fprintf(stderr, "\rcuda: %s weights %.1f / %.1f GB",
			        m->deferred ? "generating" : "loading", (double)done / 1e9,
			        (double)c->wbytes / 1e9);
		}
	}
	DS_CUDA_GOTO(cudaStreamSynchronize(c->stream), err, rv);
	if (big)
		fprintf(stderr, "\n");
	rv = rope_init(c, err);
fail:
	for (int i = 0; i < 2; i++) {
		if (ev[i])
			cudaEventDestroy(ev[i]);
		if (stage[i])
			cudaFreeHost(stage[i]);
	}
	free(ts);
	return rv;
}

void ds_cuda_weights_free(struct ds_cuda_ctx *c)
{
	if (c->wbuf)
		cudaFree(c->wbuf);
	if (c->rope_cs)
		cudaFree(c->rope_cs);
	free(c->layers);
	c->wbuf = NULL;
	c->rope_cs = NULL;
	c->layers = NULL;
}
