/* model.h - model configuration, immutable weights, and how to get them.
 *
 * A model is three things kept apart (STYLE.md): the config, the weights (bf16, row-major,
 * HF layout: a linear layer's weight is (out_features, in_features)), and private storage
 * (mmaps and owned buffers). Weights are immutable and shared by every backend and sequence;
 * per-sequence state (KV) lives in the backend. */
#ifndef DS_MODEL_H
#define DS_MODEL_H

#include "ds_common.h"

#define DS_MAX_EOS 8

enum ds_rope_scaling { DS_ROPE_NONE = 0, DS_ROPE_LLAMA3 = 1 };

/* Element type of a model's weights (struct ds_model.wtype) or of a KV cache. bf16 is the
 * default everywhere; f32 is an opt-in precision for the CPU backend (checks against fp32
 * reference implementations). */
enum ds_dtype { DS_DTYPE_BF16 = 0, DS_DTYPE_F32 = 1 };

/* "bf16" / "f32". */
const char *ds_dtype_name(enum ds_dtype t);

/* Parses "bf16" or "f32" (also "fp32"); DS_ERR_INVALID naming the value otherwise. */
enum ds_status ds_dtype_parse(const char *s, enum ds_dtype *out, struct ds_err *err);

struct ds_model_config {
	char arch[64];   /* HF architectures[0], e.g. "LlamaForCausalLM" */
	int vocab_size;
	int hidden;      /* d_model */
	int n_layer;
	int n_head;
	int n_kv_head;
	int head_dim;
	int ffn;         /* intermediate_size */
	int max_pos;     /* max_position_embeddings: the context length */
	float rms_eps;
	float rope_theta;
	enum ds_rope_scaling rope_scaling;
	float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
	int rope_orig_max_pos;
	bool tie_embeddings;
	bool attn_bias; /* Qwen2: q/k/v projections carry a bias */
	bool qk_norm;   /* Qwen3: per-head RMSNorm on q and k */
	int bos_id;     /* -1 when none */
	int eos_ids[DS_MAX_EOS];
	int n_eos;
};

struct ds_layer_weights {
	const uint16_t *attn_norm; /* (hidden) */
	const uint16_t *wq;        /* (n_head*head_dim, hidden) */
	const uint16_t *wk;        /* (n_kv_head*head_dim, hidden) */
	const uint16_t *wv;        /* (n_kv_head*head_dim, hidden) */
	const uint16_t *bq;        /* (n_head*head_dim) or NULL */
	const uint16_t *bk;        /* (n_kv_head*head_dim) or NULL */
	const uint16_t *bv;        /* (n_kv_head*head_dim) or NULL */
	const uint16_t *q_norm;    /* (head_dim) or NULL */
	const uint16_t *k_norm;    /* (head_dim) or NULL */
	const uint16_t *wo;        /* (hidden, n_head*head_dim) */
	const uint16_t *ffn_norm;  /* (hidden) */
	const uint16_t *w_gate;    /* (ffn, hidden) */
	const uint16_t *w_up;      /* (ffn, hidden) */
	const uint16_t *w_down;    /* (hidden, ffn) */
};

struct ds_model_weights {
	const uint16_t *tok_embd;        /* (vocab, hidden) */
	struct ds_layer_weights *layers; /* (n_layer) */
	const uint16_t *out_norm;        /* (hidden) */
	const uint16_t *lm_head;         /* (vocab, hidden); == tok_embd when tied */
};

struct ds_model_storage; /* private: model_internal.h */

struct ds_model {
	struct ds_model_config cfg;
	struct ds_model_weights w;
	uint8_t identity[16];   /* XXH128 of the config and tensor headers (DESIGN.md 4) */
	char source[256];       /* path or "synthetic:<preset>:<seed>" */
	uint64_t synth_seed;    /* seed when synthetic, else 0 */
	bool synthetic;
	bool deferred;          /* synthetic and not materialized on the host: weight pointers are
				 * NULL; the CUDA backend generates them on the device, the CPU
				 * backend calls ds_model_materialize() */
	struct ds_model_storage *storage;
	/* Element type of every tensor in w. DS_DTYPE_BF16 (the default, and what every
	 * constructor but ds_model_load_as makes): the pointers address bf16 values as declared.
	 * DS_DTYPE_F32: they address float values (read them through ds_model_w_f32); only the CPU
	 * backend runs such a model, every other consumer must refuse it (DS_ERR_INVALID). */
	enum ds_dtype wtype;
};

/* A weight pointer of an f32 model (m->wtype == DS_DTYPE_F32) as what it addresses. */
static inline const float *ds_model_w_f32(const uint16_t *p)
{
	return (const float *)(const void *)p;
}

/* ---- configs ---- */

/* Fills cfg with a named preset: "tiny", "small" or "llama3-8b".
 * Returns DS_ERR_NOT_FOUND for an unknown name. */
enum ds_status ds_model_preset(const char *name, struct ds_model_config *cfg);

/* Checks internal consistency (positive sizes, n_head % n_kv_head == 0, ...).
 * Returns DS_ERR_INVALID with a message naming the field. */
enum ds_status ds_model_config_check(const struct ds_model_config *cfg, struct ds_err *err);

/* Number of q/k/v/o output features, for convenience. */
static inline int ds_model_q_dim(const struct ds_model_config *c) { return c->n_head * c->head_dim; }
static inline int ds_model_kv_dim(const struct ds_model_config *c) { return c->n_kv_head * c->head_dim; }

/* ---- construction ---- */

/* Loads an HF model directory (config.json + model.safetensors or model.safetensors.index.json)
 * or a .gguf file. On failure returns a status and a message naming the file and tensor;
 * *out is left NULL. */
enum ds_status ds_model_load(const char *path, struct ds_model **out, struct ds_err *err);

/* ds_model_load with a weight type. DS_DTYPE_BF16 is ds_model_load. DS_DTYPE_F32 keeps every
 * weight in f32: GGUF tensors are dequantized straight to f32 (Q4_1's d*q + m and F32 norms are
 * not bf16-exact), safetensors F32 are copied and BF16/F16 widened (exactly); the identity then
 * also covers the weight type. A synthetic directory without weight files gives
 * DS_ERR_UNSUPPORTED (its weights are generated in bf16). */
enum ds_status ds_model_load_as(const char *path, enum ds_dtype wtype, struct ds_model **out,
				struct ds_err *err);

/* Builds a synthetic model in memory from cfg and seed, with the same values
 * detserve-mkmodel writes (model/synth.h documents the generator). */
enum ds_status ds_model_synth(const struct ds_model_config *cfg, uint64_t seed,
			      struct ds_model **out, struct ds_err *err);

/* Fills a deferred synthetic model's weights on the host (no-op when not deferred). */
enum ds_status ds_model_materialize(struct ds_model *m, struct ds_err *err);

/* Frees the model, its buffers and its mappings. NULL is a no-op. */
void ds_model_free(struct ds_model *m);

/* Writes the identity as 32 lowercase hex chars plus NUL into buf (33 bytes). */
void ds_model_identity_hex(const struct ds_model *m, char buf[33]);

#endif
