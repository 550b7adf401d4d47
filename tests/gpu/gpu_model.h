/* gpu_model.h - model helpers for the gpu suite: host or deferred synthetic models, and a
 * plain double-precision CPU twin of the CUDA backend's forward pass (same bf16 rounding
 * points: GEMM inputs, q, KV and attention output are bf16; everything else fp32/double). */
#ifndef DS_GPU_MODEL_H
#define DS_GPU_MODEL_H

#include "backend.h"
#include "model_internal.h"
#include "synth.h"
#include "tensors.h"

#include <math.h>
#include <stdlib.h>

/* A synthetic model whose weights are generated where used (deferred), as mkmodel would. */
static inline struct ds_model *model_deferred(const char *preset, uint64_t seed)
{
	struct ds_model_config cfg;
	struct ds_err err;
	if (ds_model_preset(preset, &cfg) != DS_OK)
		return NULL;
	struct ds_model *m = NULL;
	if (ds_model_new(&cfg, &m, &err) != DS_OK)
		return NULL;
	m->synthetic = true;
	m->deferred = true;
	m->synth_seed = seed;
	return m;
}

static inline struct ds_model *model_host(const char *preset, uint64_t seed)
{
	struct ds_model_config cfg;
	struct ds_err err;
	struct ds_model *m = NULL;
	if (ds_model_preset(preset, &cfg) != DS_OK || ds_model_synth(&cfg, seed, &m, &err) != DS_OK)
		return NULL;
	return m;
}

static inline float twin_bf(float x)
{
	return ds_bf16_to_f32(ds_f32_to_bf16(x));
}

/* y (N) = W (N, K) . x (K), double accumulation */
static inline void twin_matvec(const uint16_t *W, const float *x, int N, int K, float *y)
{
	for (int n = 0; n < N; n++) {
		double s = 0;
		const uint16_t *w = W + (size_t)n * K;
		for (int k = 0; k < K; k++)
			s += (double)ds_bf16_to_f32(w[k]) * x[k];
		y[n] = (float)s;
	}
}

static inline void twin_rmsnorm(const float *x, const uint16_t *w, int n, float eps, float *y)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	float inv = (float)(1.0 / sqrt(ss / n + eps));
	for (int i = 0; i < n; i++)
		y[i] = twin_bf(x[i] * inv * ds_bf16_to_f32(w[i]));
}

/* Runs tokens[0..n) one at a time from position 0 and writes logits (n, vocab). Host model
 * (weights present), no bias / qk-norm (Llama presets). */
static inline void twin_forward(const struct ds_model *m, const int32_t *tokens, int n,
                                float *logits)
{
	const struct ds_model_config *c = &m->cfg;
	int H = c->hidden, D = c->head_dim, half = D / 2, qd = ds_model_q_dim(c);
	int kvd = ds_model_kv_dim(c), F = c->ffn, G = c->n_head / c->n_kv_head;
	float *K = malloc((size_t)c->n_layer * n * kvd * 4),
	      *V = malloc((size_t)c->n_layer * n * kvd * 4);
	float *x = malloc((size_t)H * 4), *h = malloc((size_t)DS_MAX(H, F) * 4);
	float *q = malloc((size_t)qd * 4), *k = malloc((size_t)kvd * 4),
	      *v = malloc((size_t)kvd * 4);
	float *att = malloc((size_t)qd * 4), *o = malloc((size_t)H * 4);
	float *g = malloc((size_t)F * 4), *u = malloc((size_t)F * 4);
	double *s = malloc((size_t)n * sizeof(double));
	double *inv = malloc((size_t)half * sizeof(double));
	for (int i = 0; i < half; i++) {
		double f = 1.0 / pow((double)c->rope_theta, (2.0 * i) / D);
		if (c->rope_scaling == DS_ROPE_LLAMA3) {
			double factor = c->rope_factor, lo = c->rope_low_freq_factor;
			double hi = c->rope_high_freq_factor, old = c->rope_orig_max_pos;
			double wl = 2.0 * M_PI / f;
			if (wl > old / lo)
				f = f / factor;
			else if (wl >= old / hi) {
				double sm = (old / wl - lo) / (hi - lo);
				f = (1.0 - sm) * f / factor + sm * f;
			}
		}
		inv[i] = f;
	}
	for (int p = 0; p < n; p++) {
		const uint16_t *e = m->w.tok_embd + (size_t)tokens[p] * H;
		for (int i = 0; i < H; i++)
			x[i] = ds_bf16_to_f32(e[i]);
		for (int l = 0; l < c->n_layer; l++) {
			const struct ds_layer_weights *L = &m->w.layers[l];
			twin_rmsnorm(x, L->attn_norm, H, c->rms_eps, h);
			twin_matvec(L->wq, h, qd, H, q);
			twin_matvec(L->wk, h, kvd, H, k);
			twin_matvec(L->wv, h, kvd, H, v);
			for (int hh = 0; hh < c->n_head + c->n_kv_head; hh++) {
				float *r = hh < c->n_head ? q + hh * D : k + (hh - c->n_head) * D;
				for (int i = 0; i < half; i++) {
					float co = (float)cos(p * inv[i]),
					      si = (float)sin(p * inv[i]);
					float a = r[i], b = r[i + half];
					r[i] = twin_bf(a * co - b * si);
					r[i + half] = twin_bf(b * co + a * si);
				}
			}
			float *Kl = K + ((size_t)l * n + p) * kvd,
			      *Vl = V + ((size_t)l * n + p) * kvd;
			for (int i = 0; i < kvd; i++) {
				Kl[i] = k[i];
				Vl[i] = twin_bf(v[i]);
			}
			for (int hh = 0; hh < c->n_head; hh++) {
				int kh = hh / G;
				double m1 = -INFINITY, l1 = 0;
				for (int j = 0; j <= p; j++) {
					const float *kj = K + ((size_t)l * n + j) * kvd + kh * D;
					double a = 0;
					for (int i = 0; i < D; i++)
						a += (double)q[hh * D + i] * kj[i];
					s[j] = a / sqrt((double)D);
					m1 = fmax(m1, s[j]);
				}
				for (int i = 0; i < D; i++)
					att[hh * D + i] = 0;
				double acc[512] = {0};
				for (int j = 0; j <= p; j++) {
					double w = exp(s[j] - m1);
					l1 += w;
					const float *vj = V + ((size_t)l * n + j) * kvd + kh * D;
					for (int i = 0; i < D; i++)
						acc[i] += w * vj[i];
				}
				for (int i = 0; i < D; i++)
					att[hh * D + i] = twin_bf((float)(acc[i] / l1));
			}
			twin_matvec(L->wo, att, H, qd, o);
			for (int i = 0; i < H; i++)
				x[i] += o[i];
			twin_rmsnorm(x, L->ffn_norm, H, c->rms_eps, h);
			twin_matvec(L->w_gate, h, F, H, g);
			twin_matvec(L->w_up, h, F, H, u);
			for (int i = 0; i < F; i++)
				h[i] = twin_bf((float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]));
			twin_matvec(L->w_down, h, H, F, o);
			for (int i = 0; i < H; i++)
				x[i] += o[i];
		}
		twin_rmsnorm(x, m->w.out_norm, H, c->rms_eps, h);
		twin_matvec(m->w.lm_head, h, c->vocab_size, H, logits + (size_t)p * c->vocab_size);
	}
	free(K);
	free(V);
	free(x);
	free(h);
	free(q);
	free(k);
	free(v);
	free(att);
	free(o);
	free(g);
	free(u);
	free(s);
	free(inv);
}

#endif
