/* tensors.h - the one list of tensors a config implies, with HF names and shapes.
 *
 * The safetensors loader checks files against it, detserve-mkmodel writes it, the synthetic
 * generator fills it, and the GGUF loader maps llama.cpp names onto it. */
#ifndef DS_TENSORS_H
#define DS_TENSORS_H

#include "model.h"

enum ds_tensor_field {
	DS_T_TOK_EMBD, DS_T_OUT_NORM, DS_T_LM_HEAD,
	DS_T_ATTN_NORM, DS_T_WQ, DS_T_WK, DS_T_WV, DS_T_BQ, DS_T_BK, DS_T_BV,
	DS_T_Q_NORM, DS_T_K_NORM, DS_T_WO, DS_T_FFN_NORM, DS_T_W_GATE, DS_T_W_UP, DS_T_W_DOWN,
};

struct ds_tensor_desc {
	char name[96];             /* HF name, e.g. "model.layers.3.self_attn.q_proj.weight" */
	enum ds_tensor_field field;
	int layer;                 /* -1 for global tensors */
	int ndim;                  /* 1 or 2 */
	int64_t shape[2];          /* HF order: (out, in) for linear weights */
	float synth_scale;         /* synthetic value = synth_offset + synth_scale * U[-1, 1) */
	float synth_offset;
};

/* Number of tensors cfg implies (lm_head omitted when tied). */
int ds_tensor_count(const struct ds_model_config *cfg);

/* Fills out[0..ds_tensor_count(cfg)) in a fixed canonical order. */
void ds_tensor_list(const struct ds_model_config *cfg, struct ds_tensor_desc *out);

/* Element count of a descriptor. */
static inline int64_t ds_tensor_numel(const struct ds_tensor_desc *d)
{
	return d->ndim == 1 ? d->shape[0] : d->shape[0] * d->shape[1];
}

/* Where a descriptor's data pointer lives inside w. */
const uint16_t **ds_tensor_slot(struct ds_model_weights *w, const struct ds_tensor_desc *d);

#endif
