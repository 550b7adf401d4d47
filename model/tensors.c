/* tensors.c - canonical tensor list (see tensors.h). */
#include "tensors.h"

#include <math.h>
#include <stdio.h>

static void put(struct ds_tensor_desc *out, int *n, const char *name, enum ds_tensor_field f,
		int layer, int64_t d0, int64_t d1, float scale, float offset)
{
	if (out) {
		struct ds_tensor_desc *d = &out[*n];
		memset(d, 0, sizeof(*d));
		snprintf(d->name, sizeof(d->name), "%s", name);
		d->field = f;
		d->layer = layer;
		d->ndim = d1 > 0 ? 2 : 1;
		d->shape[0] = d0;
		d->shape[1] = d1 > 0 ? d1 : 0;
		d->synth_scale = scale;
		d->synth_offset = offset;
	}
	(*n)++;
}

/* Uniform [-a, a) has variance a^2/3; a = sqrt(3/fan_in) gives unit-variance outputs. */
static float lin_scale(int64_t fan_in)
{
	return sqrtf(3.0f / (float)fan_in);
}

/* The synthetic lm_head is scaled so logits have a standard deviation near 3: top-1/top-2
 * gaps are then spread (neither all near-ties nor all huge). */
#define DS_SYNTH_LOGIT_GAIN 3.0f

static int build(const struct ds_model_config *c, struct ds_tensor_desc *out)
{
	int n = 0;
	int64_t h = c->hidden, q = ds_model_q_dim(c), kv = ds_model_kv_dim(c), f = c->ffn;
	char name[96];
	put(out, &n, "model.embed_tokens.weight", DS_T_TOK_EMBD, -1, c->vocab_size, h, 1.0f, 0.0f);
	for (int l = 0; l < c->n_layer; l++) {
#define P(suffix, field, d0, d1, sc, off)                                           \
	do {                                                                        \
		snprintf(name, sizeof(name), "model.layers.%d.%s", l, suffix);      \
		put(out, &n, name, field, l, d0, d1, sc, off);                      \
	} while (0)
		P("input_layernorm.weight", DS_T_ATTN_NORM, h, 0, 0.2f, 1.0f);
		P("self_attn.q_proj.weight", DS_T_WQ, q, h, lin_scale(h), 0.0f);
		P("self_attn.k_proj.weight", DS_T_WK, kv, h, lin_scale(h), 0.0f);
		P("self_attn.v_proj.weight", DS_T_WV, kv, h, lin_scale(h), 0.0f);
		if (c->attn_bias) {
			P("self_attn.q_proj.bias", DS_T_BQ, q, 0, 0.1f, 0.0f);
			P("self_attn.k_proj.bias", DS_T_BK, kv, 0, 0.1f, 0.0f);
			P("self_attn.v_proj.bias", DS_T_BV, kv, 0, 0.1f, 0.0f);
		}
		if (c->qk_norm) {
			P("self_attn.q_norm.weight", DS_T_Q_NORM, c->head_dim, 0, 0.2f, 1.0f);
			P("self_attn.k_norm.weight", DS_T_K_NORM, c->head_dim, 0, 0.2f, 1.0f);
		}
		P("self_attn.o_proj.weight", DS_T_WO, h, q, lin_scale(q), 0.0f);
		P("post_attention_layernorm.weight", DS_T_FFN_NORM, h, 0, 0.2f, 1.0f);
		P("mlp.gate_proj.weight", DS_T_W_GATE, f, h, lin_scale(h), 0.0f);
		P("mlp.up_proj.weight", DS_T_W_UP, f, h, lin_scale(h), 0.0f);
		P("mlp.down_proj.weight", DS_T_W_DOWN, h, f, lin_scale(f), 0.0f);
#undef P
	}
	put(out, &n, "model.norm.weight", DS_T_OUT_NORM, -1, h, 0, 0.2f, 1.0f);
	if (!c->tie_embeddings)
		put(out, &n, "lm_head.weight", DS_T_LM_HEAD, -1, c->vocab_size, h,
		    DS_SYNTH_LOGIT_GAIN * lin_scale(h), 0.0f);
	return n;
}

int ds_tensor_count(const struct ds_model_config *cfg)
{
	return build(cfg, NULL);
}

void ds_tensor_list(const struct ds_model_config *cfg, struct ds_tensor_desc *out)
{
	build(cfg, out);
}

const uint16_t **ds_tensor_slot(struct ds_model_weights *w, const struct ds_tensor_desc *d)
{
	struct ds_layer_weights *L = d->layer >= 0 ? &w->layers[d->layer] : NULL;
	switch (d->field) {
	case DS_T_TOK_EMBD: return &w->tok_embd;
	case DS_T_OUT_NORM: return &w->out_norm;
	case DS_T_LM_HEAD: return &w->lm_head;
	case DS_T_ATTN_NORM: return &L->attn_norm;
	case DS_T_WQ: return &L->wq;
	case DS_T_WK: return &L->wk;
	case DS_T_WV: return &L->wv;
	case DS_T_BQ: return &L->bq;
	case DS_T_BK: return &L->bk;
	case DS_T_BV: return &L->bv;
	case DS_T_Q_NORM: return &L->q_norm;
	case DS_T_K_NORM: return &L->k_norm;
	case DS_T_WO: return &L->wo;
	case DS_T_FFN_NORM: return &L->ffn_norm;
	case DS_T_W_GATE: return &L->w_gate;
	case DS_T_W_UP: return &L->w_up;
	case DS_T_W_DOWN: return &L->w_down;
	}
	DS_ABORT("bad tensor field %d", (int)d->field);
}
