/* model_internal.h - storage bookkeeping shared by the loaders (safetensors, GGUF, synth). */
#ifndef DS_MODEL_INTERNAL_H
#define DS_MODEL_INTERNAL_H

#include "model.h"

struct ds_model_map {
	void *addr;
	size_t len;
};

struct ds_model_storage {
	void **owned; /* malloc'd buffers */
	int n_owned, cap_owned;
	struct ds_model_map *maps; /* mmaps */
	int n_maps, cap_maps;
	struct ds_layer_weights *layers; /* owned (n_layer) */
};

/* Allocates an empty model with storage and a layers array for cfg->n_layer. */
enum ds_status ds_model_new(const struct ds_model_config *cfg, struct ds_model **out,
			    struct ds_err *err);

/* A buffer owned by the model (freed by ds_model_free); NULL on OOM. */
void *ds_model_alloc(struct ds_model *m, size_t bytes);

/* Registers an mmap so ds_model_free unmaps it. */
enum ds_status ds_model_add_map(struct ds_model *m, void *addr, size_t len);

/* Sets m->identity for a synthetic model from m->cfg, m->synth_seed and the tensor list ts[0..n)
 * (model/synth.c). ds_model_synth and deferred synthetic directories share it. */
struct ds_tensor_desc;
void ds_synth_identity(struct ds_model *m, const struct ds_tensor_desc *ts, int n);

/* added (f32 precision): ds_model_load_gguf with every weight dequantized to wtype (model.h
 * ds_model_load_as; model/gguf_model.c). */
/* XXH3 seed of an f32 model's identity: the same file loaded as f32 computes other logits, so
 * it is another model to fingerprints. bf16 uses seed 0, the unseeded hash. */
#define DS_MODEL_F32_ID_SEED 0x663332u
enum ds_status ds_model_load_gguf_as(const char *path, enum ds_dtype wtype, struct ds_model **out,
				     struct ds_err *err);

#endif
