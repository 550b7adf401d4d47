/* cpu_backend.c - the CPU backend: KV pool, the Llama-family forward driver, sampling.
 *
 * Key decision: one driver runs the layer sequence for both paths and hands the three reducing
 * steps (matmul, RMSNorm, attention) to the path's kernel table (cpu_internal.h). Everything
 * the driver does itself is element-wise per row (embedding, bias, RoPE from a per-position
 * table, SwiGLU, residual adds, bf16 KV writes), so a row's values are a function of its own
 * inputs and the reference path's invariance rests on refpath/cpu_ref.c alone.
 *
 * KV is stored in bf16 (rounded on write) for both paths, as a GPU server would; an f32 model
 * (model.h wtype) gets an f32 KV pool by default (ds_backend_cpu_init_as picks either). A pass
 * first writes the K/V of all its rows, then runs attention, which reads positions [0, pos] of each
 * row's sequence from the pool: cached and fresh KV take the same code path.
 *
 * One forward at a time per backend: a pass uses the context's scratch and thread pool, so
 * callers (the scheduler's step thread) must not call forward concurrently on one backend. */
#include "cpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- scratch and CPU features ---- */

enum ds_cpu_isa ds_cpu_isa_detect(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return DS_CPU_ISA_BASE;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
		return DS_CPU_ISA_AVX512;
	return DS_CPU_ISA_AVX2;
#else
	return DS_CPU_ISA_BASE;
#endif
}

void *ds_cpu_ws_get(struct ds_cpu_ctx *c, enum ds_cpu_ws slot, size_t bytes)
{
	if (bytes <= c->ws_cap[slot])
		return c->ws[slot];
	size_t cap = DS_MAX(bytes, c->ws_cap[slot] + c->ws_cap[slot] / 2);
	void *p = realloc(c->ws[slot], cap);
	if (!p)
		return NULL;
	c->ws[slot] = p;
	c->ws_cap[slot] = cap;
	return p;
}

static enum ds_status cpu_threads_setup(struct ds_cpu_ctx *c, int n_threads, struct ds_err *err)
{
	if (n_threads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		n_threads = n > 0 ? (int)DS_MIN(n, 256) : 1;
	}
	struct ds_threadpool *tp;
	enum ds_status rv = ds_threadpool_init(&tp, n_threads, err);
	if (rv != DS_OK)
		return rv;
	size_t len = DS_MAX(ds_cpu_fast_thread_floats(&c->cfg), ds_cpu_ref_thread_floats(&c->cfg));
	len = (len + 15) & ~(size_t)15; /* keep each thread's buffer 64-byte apart */
	float *buf = malloc((size_t)n_threads * len * sizeof(float));
	if (!buf) {
		ds_threadpool_free(tp);
		return ds_errf(err, DS_ERR_NOMEM, "cpu: out of memory for thread scratch");
	}
	ds_threadpool_free(c->tp);
	free(c->thread_buf);
	c->tp = tp;
	c->n_threads = n_threads;
	c->thread_buf = buf;
	c->thread_buf_len = len;
	return DS_OK;
}

/* HF Llama rotary embedding, optionally with Llama-3 scaling of the inverse frequencies.
 * Pairs are (i, i + head_dim/2) (rotate_half). Computed in double, stored as f32. */
static enum ds_status cpu_rope_init(struct ds_cpu_ctx *c, struct ds_err *err)
{
	const struct ds_model_config *cfg = &c->cfg;
	int half = cfg->head_dim / 2;
	size_t n = (size_t)cfg->max_pos * half;
	c->rope_cos = malloc(n * sizeof(float));
	c->rope_sin = malloc(n * sizeof(float));
	double *inv = malloc((size_t)half * sizeof(double));
	if (!c->rope_cos || !c->rope_sin || !inv) {
		free(inv);
		return ds_errf(err, DS_ERR_NOMEM, "cpu: out of memory for the RoPE table");
	}
	for (int i = 0; i < half; i++) {
		double f = 1.0 / pow((double)cfg->rope_theta, (2.0 * i) / cfg->head_dim);
		if (cfg->rope_scaling == DS_ROPE_LLAMA3) {
			double factor = cfg->rope_factor, lo = cfg->rope_low_freq_factor;
			double hi = cfg->rope_high_freq_factor, old = cfg->rope_orig_max_pos;
			double wavelen = 2.0 * M_PI / f;
			if (wavelen > old / lo) {
				f = f / factor;
			} else if (wavelen >= old / hi) {
				double smooth = (old / wavelen - lo) / (hi - lo);
				f = (1.0 - smooth) * f / factor + smooth * f;
			}
		}
		inv[i] = f;
	}
	for (int p = 0; p < cfg->max_pos; p++)
		for (int i = 0; i < half; i++) {
			double ang = (double)p * inv[i];
			c->rope_cos[(size_t)p * half + i] = (float)cos(ang);
			c->rope_sin[(size_t)p * half + i] = (float)sin(ang);
		}
	free(inv);
	return DS_OK;
}

/* ---- element-wise steps shared by both paths ---- */

static void cpu_add_bias(const struct ds_cpu_ctx *c, float *y, const uint16_t *bias, int M, int N)
{
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++)
			y[(size_t)m * N + n] += c->wtype == DS_DTYPE_F32 ? ds_model_w_f32(bias)[n]
			                                                 : ds_bf16_to_f32(bias[n]);
}

/* Rotates every head of x (M, n_heads*head_dim) in place at its row's position. */
static void cpu_rope(const struct ds_cpu_ctx *c, float *x, int n_heads, const struct ds_cpu_pass *p)
{
	int hd = c->cfg.head_dim, half = hd / 2;
	for (int m = 0; m < p->M; m++) {
		const float *cs = c->rope_cos + (size_t)p->row_pos[m] * half;
		const float *sn = c->rope_sin + (size_t)p->row_pos[m] * half;
		for (int h = 0; h < n_heads; h++) {
			float *v = x + ((size_t)m * n_heads + h) * hd;
			for (int i = 0; i < half; i++) {
				float x0 = v[i], x1 = v[i + half];
				v[i] = x0 * cs[i] - x1 * sn[i];
				v[i + half] = x1 * cs[i] + x0 * sn[i];
			}
		}
	}
}

static void cpu_kv_write(struct ds_cpu_ctx *c, int l, const struct ds_cpu_pass *p, const float *k,
                         const float *v)
{
	int kvd = c->cfg.n_kv_head * c->cfg.head_dim;
	for (int m = 0; m < p->M; m++) {
		const int32_t *blocks = p->b->seqs[p->row_seq[m]].blocks;
		void *kd = ds_cpu_kv_at(c, c->kv_k, l, blocks, p->row_pos[m]);
		void *vd = ds_cpu_kv_at(c, c->kv_v, l, blocks, p->row_pos[m]);
		if (c->kvtype == DS_DTYPE_F32) {
			memcpy(kd, k + (size_t)m * kvd, (size_t)kvd * sizeof(float));
			memcpy(vd, v + (size_t)m * kvd, (size_t)kvd * sizeof(float));
			continue;
		}
		for (int i = 0; i < kvd; i++) {
			((uint16_t *)kd)[i] = ds_f32_to_bf16(k[(size_t)m * kvd + i]);
			((uint16_t *)vd)[i] = ds_f32_to_bf16(v[(size_t)m * kvd + i]);
		}
	}
}

static float cpu_silu(float g)
{
	return g / (1.0f + expf(-g));
}

/* ---- sampling ---- */

struct cpu_sample {
	struct ds_cpu_ctx *c;
	const struct ds_fwd_batch *b;
	const float *logits; /* (n_out, vocab) */
	const int *out_seq;  /* (n_out) */
	const int *out_r;    /* (n_out) row within its sequence */
	uint8_t *scratch;    /* (n_threads, scratch_len) */
	size_t scratch_len;
};

static void cpu_sample_task(void *arg, int o, int thread)
{
	struct cpu_sample *a = arg;
	const struct ds_fwd_seq *s = &a->b->seqs[a->out_seq[o]];
	int V = a->c->cfg.vocab_size;
	struct ds_sample_result res;
	ds_sample(a->logits + (size_t)o * V, V, &s->sp, (int64_t)s->pos0 + a->out_r[o] + 1,
	          a->scratch + (size_t)thread * a->scratch_len, &res);
	a->b->rows[o].token = res.token;
	a->b->rows[o].logprob = res.logprob;
	a->b->rows[o].margin = res.margin;
}

/* ---- the forward pass ---- */

#define WS(slot, type, count)                                                                      \
	do {                                                                                       \
		slot##_p = ds_cpu_ws_get(c, DS_WS_##slot, (size_t)(count) * sizeof(type));         \
		if (!slot##_p)                                                                     \
			return ds_errf(err, DS_ERR_NOMEM, "cpu: out of memory for a %d-row pass",  \
			               M);                                                         \
	} while (0)

#define CHECK(expr)                                                                                \
	do {                                                                                       \
		if ((expr) != DS_OK)                                                               \
			return ds_errf(err, DS_ERR_NOMEM, "cpu: out of memory in %s", #expr);      \
	} while (0)

static enum ds_status cpu_forward(void *vctx, const struct ds_fwd_batch *b, struct ds_err *err)
{
	struct ds_cpu_ctx *c = vctx;
	const struct ds_model_config *cfg = &c->cfg;
	const struct ds_model_weights *w = &c->model->w;
	const struct ds_cpu_kernels *kn =
	    b->path == DS_PATH_REF ? &ds_cpu_ref_kernels : &ds_cpu_fast_kernels;
	const int H = cfg->hidden, QD = ds_model_q_dim(cfg), KVD = ds_model_kv_dim(cfg);
	const int F = cfg->ffn, V = cfg->vocab_size, hd = cfg->head_dim;
	const float eps = cfg->rms_eps;

	int M = 0;
	for (int i = 0; i < b->n_seqs; i++)
		M += b->seqs[i].n_tokens;
	int n_out = ds_fwd_batch_out_rows(b);

	int *ROWS_p;
	float *X_p, *XN_p, *Q_p, *K_p, *V_p, *ATT_p, *TMP_p, *GATE_p, *UP_p, *OUT_p, *LOGITS_p;
	WS(ROWS, int, 2 * M + 3 * n_out);
	WS(X, float, (size_t)M *H);
	WS(XN, float, (size_t)M *H);
	WS(Q, float, (size_t)M *QD);
	WS(K, float, (size_t)M *KVD);
	WS(V, float, (size_t)M *KVD);
	WS(ATT, float, (size_t)M *QD);
	WS(TMP, float, (size_t)M *H);
	WS(GATE, float, (size_t)M *F);
	WS(UP, float, (size_t)M *F);
	WS(OUT, float, (size_t)n_out *H);
	if (b->logits)
		LOGITS_p = b->logits;
	else
		WS(LOGITS, float, (size_t)n_out *V);
	size_t scratch_len = (ds_sample_scratch_size(V) + 63) & ~(size_t)63;
	uint8_t *SAMPLE_p;
	WS(SAMPLE, uint8_t, (size_t)c->n_threads * scratch_len);

	int *row_seq = ROWS_p, *row_pos = row_seq + M;
	int *out_row = row_pos + M, *out_seq = out_row + n_out, *out_r = out_seq + n_out;
	for (int i = 0, m = 0, o = 0; i < b->n_seqs; i++) {
		const struct ds_fwd_seq *s = &b->seqs[i];
		for (int r = 0; r < s->n_tokens; r++, m++) {
			row_seq[m] = i;
			row_pos[m] = s->pos0 + r;
			if (s->all_rows || r == s->n_tokens - 1) {
				out_row[o] = m;
				out_seq[o] = i;
				out_r[o] = r;
				o++;
			}
		}
	}
	struct ds_cpu_pass p = {.b = b, .M = M, .row_seq = row_seq, .row_pos = row_pos};

	float *x = X_p, *xn = XN_p, *q = Q_p, *k = K_p, *v = V_p, *att = ATT_p, *tmp = TMP_p;
	for (int i = 0, m = 0; i < b->n_seqs; i++)
		for (int r = 0; r < b->seqs[i].n_tokens; r++, m++)
			ds_cpu_row_f32(x + (size_t)m * H, c->wtype, w->tok_embd,
			               (size_t)b->seqs[i].tokens[r] * H, H);

	for (int l = 0; l < cfg->n_layer; l++) {
		const struct ds_layer_weights *lw = &w->layers[l];
		CHECK(kn->rmsnorm(c, x, lw->attn_norm, xn, M, H, eps));
		const struct ds_cpu_mm qkv[3] = {
		    {lw->wq, q, QD}, {lw->wk, k, KVD}, {lw->wv, v, KVD}};
		CHECK(kn->matmul(c, xn, M, H, qkv, 3));
		if (lw->bq)
			cpu_add_bias(c, q, lw->bq, M, QD);
		if (lw->bk)
			cpu_add_bias(c, k, lw->bk, M, KVD);
		if (lw->bv)
			cpu_add_bias(c, v, lw->bv, M, KVD);
		if (lw->q_norm)
			CHECK(kn->rmsnorm(c, q, lw->q_norm, q, M * cfg->n_head, hd, eps));
		if (lw->k_norm)
			CHECK(kn->rmsnorm(c, k, lw->k_norm, k, M * cfg->n_kv_head, hd, eps));
		cpu_rope(c, q, cfg->n_head, &p);
		cpu_rope(c, k, cfg->n_kv_head, &p);
		cpu_kv_write(c, l, &p, k, v);
		CHECK(kn->attention(c, &p, l, q, att));
		const struct ds_cpu_mm o_proj = {lw->wo, tmp, H};
		CHECK(kn->matmul(c, att, M, QD, &o_proj, 1));
		for (size_t i = 0; i < (size_t)M * H; i++)
			x[i] += tmp[i];
		CHECK(kn->rmsnorm(c, x, lw->ffn_norm, xn, M, H, eps));
		const struct ds_cpu_mm gate_up[2] = {{lw->w_gate, GATE_p, F}, {lw->w_up, UP_p, F}};
		CHECK(kn->matmul(c, xn, M, H, gate_up, 2));
		for (size_t i = 0; i < (size_t)M * F; i++)
			GATE_p[i] = cpu_silu(GATE_p[i]) * UP_p[i];
		const struct ds_cpu_mm down = {lw->w_down, tmp, H};
		CHECK(kn->matmul(c, GATE_p, M, F, &down, 1));
		for (size_t i = 0; i < (size_t)M * H; i++)
			x[i] += tmp[i];
	}

	for (int o = 0; o < n_out; o++)
		memcpy(OUT_p + (size_t)o * H, x + (size_t)out_row[o] * H,
		       (size_t)H * sizeof(float));
	CHECK(kn->rmsnorm(c, OUT_p, w->out_norm, OUT_p, n_out, H, eps));
	const struct ds_cpu_mm head = {w->lm_head, LOGITS_p, V};
	CHECK(kn->matmul(c, OUT_p, n_out, H, &head, 1));

	struct cpu_sample sa = {.c = c,
	                        .b = b,
	                        .logits = LOGITS_p,
	                        .out_seq = out_seq,
	                        .out_r = out_r,
	                        .scratch = SAMPLE_p,
	                        .scratch_len = scratch_len};
	ds_threadpool_run(c->tp, n_out, cpu_sample_task, &sa);
	return DS_OK;
}

#undef WS
#undef CHECK

/* ---- the rest of the table ---- */

static enum ds_status cpu_kv_init(void *vctx, int n_blocks, int block_size, struct ds_err *err)
{
	struct ds_cpu_ctx *c = vctx;
	if (c->kv_k)
		return ds_errf(err, DS_ERR_INVALID, "cpu: kv cache already initialised");
	size_t n = (size_t)c->cfg.n_layer * (size_t)n_blocks * (size_t)block_size *
	           (size_t)ds_model_kv_dim(&c->cfg);
	c->kv_k = calloc(n, ds_cpu_dtype_size(c->kvtype));
	c->kv_v = calloc(n, ds_cpu_dtype_size(c->kvtype));
	if (!c->kv_k || !c->kv_v) {
		free(c->kv_k);
		free(c->kv_v);
		c->kv_k = c->kv_v = NULL;
		return ds_errf(err, DS_ERR_NOMEM,
		               "cpu: cannot allocate a KV pool of %d x %d positions", n_blocks,
		               block_size);
	}
	c->n_blocks = n_blocks;
	c->block_size = block_size;
	return DS_OK;
}

static enum ds_status cpu_kv_copy_block(void *vctx, int src, int dst, struct ds_err *err)
{
	(void)err;
	struct ds_cpu_ctx *c = vctx;
	size_t blk = (size_t)c->block_size * (size_t)ds_model_kv_dim(&c->cfg) *
	             ds_cpu_dtype_size(c->kvtype); /* bytes */
	char *kp = c->kv_k, *vp = c->kv_v;
	for (int l = 0; l < c->cfg.n_layer; l++) {
		size_t s = ((size_t)l * c->n_blocks + (size_t)src) * blk;
		size_t d = ((size_t)l * c->n_blocks + (size_t)dst) * blk;
		memcpy(kp + d, kp + s, blk);
		memcpy(vp + d, vp + s, blk);
	}
	return DS_OK;
}

static enum ds_status cpu_set_threads(void *vctx, int n_threads, struct ds_err *err)
{
	return cpu_threads_setup(vctx, n_threads, err);
}

static void cpu_describe(void *vctx, char *buf, size_t len)
{
	struct ds_cpu_ctx *c = vctx;
	static const char *const isa[] = {"x86-64", "avx2", "avx512"};
	if (c->wtype == DS_DTYPE_BF16 && c->kvtype == DS_DTYPE_BF16)
		snprintf(buf, len, "cpu (%d threads, %s)", c->n_threads, isa[c->isa]);
	else
		snprintf(buf, len, "cpu (%d threads, %s, %s weights, %s KV)", c->n_threads,
		         isa[c->isa], ds_dtype_name(c->wtype), ds_dtype_name(c->kvtype));
}

static void cpu_free(void *vctx)
{
	struct ds_cpu_ctx *c = vctx;
	if (!c)
		return;
	ds_threadpool_free(c->tp);
	free(c->thread_buf);
	free(c->kv_k);
	free(c->kv_v);
	free(c->rope_cos);
	free(c->rope_sin);
	for (int i = 0; i < DS_WS_COUNT; i++)
		free(c->ws[i]);
	free(c);
}

static const struct ds_backend_i cpu_iface = {
    .name = "cpu",
    .kv_init = cpu_kv_init,
    .forward = cpu_forward,
    .kv_copy_block = cpu_kv_copy_block,
    .set_threads = cpu_set_threads,
    .describe = cpu_describe,
    .free = cpu_free,
};

enum ds_status ds_backend_cpu_init(struct ds_backend *be, const struct ds_model *m, int n_threads,
                                   struct ds_err *err)
{
	memset(be, 0, sizeof(*be));
	if (!m)
		return ds_errf(err, DS_ERR_INVALID, "cpu: no model");
	return ds_backend_cpu_init_as(be, m, n_threads, m->wtype, err);
}

enum ds_status ds_backend_cpu_init_as(struct ds_backend *be, const struct ds_model *m,
                                      int n_threads, enum ds_dtype kv_dtype, struct ds_err *err)
{
	memset(be, 0, sizeof(*be));
	if (!m)
		return ds_errf(err, DS_ERR_INVALID, "cpu: no model");
	if ((m->wtype != DS_DTYPE_BF16 && m->wtype != DS_DTYPE_F32) ||
	    (kv_dtype != DS_DTYPE_BF16 && kv_dtype != DS_DTYPE_F32))
		return ds_errf(err, DS_ERR_INVALID, "cpu: unknown weight (%d) or KV (%d) type",
		               (int)m->wtype, (int)kv_dtype);
	if (m->deferred && m->wtype != DS_DTYPE_BF16)
		return ds_errf(err, DS_ERR_INVALID,
		               "cpu: a deferred synthetic model is generated in bf16, not %s",
		               ds_dtype_name(m->wtype));
	enum ds_status rv = ds_model_config_check(&m->cfg, err);
	if (rv != DS_OK)
		return rv;
	/* A deferred synthetic model has no host weights yet; filling them in place is what
	 * model.h asks of the CPU backend. Models are never defined const, only passed as such. */
	if (m->deferred && (rv = ds_model_materialize((struct ds_model *)m, err)) != DS_OK)
		return rv;
	struct ds_cpu_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return ds_errf(err, DS_ERR_NOMEM, "cpu: out of memory");
	c->model = m;
	c->cfg = m->cfg;
	c->wtype = m->wtype;
	c->kvtype = kv_dtype;
	c->isa = ds_cpu_isa_detect();
	/* DS_CPU_ISA=base|avx2 caps the kernel variants (benchmarks, odd machines); the reference
	 * path gives the same bits at every level, so this never changes deterministic output */
	const char *cap = getenv("DS_CPU_ISA");
	if (cap && strcmp(cap, "base") == 0)
		c->isa = DS_CPU_ISA_BASE;
	else if (cap && strcmp(cap, "avx2") == 0 && c->isa > DS_CPU_ISA_AVX2)
		c->isa = DS_CPU_ISA_AVX2;
	if ((rv = cpu_threads_setup(c, n_threads, err)) != DS_OK)
		goto fail;
	if ((rv = cpu_rope_init(c, err)) != DS_OK)
		goto fail;
	be->iface = &cpu_iface;
	be->ctx = c;
	be->model = m;
	return DS_OK;
fail:
	cpu_free(c);
	return rv;
}
