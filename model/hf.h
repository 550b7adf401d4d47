/* hf.h - the Hugging Face model directory format: config.json and the synthetic writer.
 *
 * A directory holds config.json plus model.safetensors, or shards named
 * model-0000i-of-0000K.safetensors listed in model.safetensors.index.json. A directory with
 * config.json, detserve_synth.json ({"seed": N}) and no weight files is a deferred synthetic
 * model: the weights are a pure function of (config, seed) and are generated where they are
 * used (model/synth.h). ds_model_load (model.h) reads all of these. */
#ifndef DS_HF_H
#define DS_HF_H

#include "model.h"

#define DS_HF_CONFIG "config.json"
#define DS_HF_WEIGHTS "model.safetensors"
#define DS_HF_INDEX "model.safetensors.index.json"
#define DS_HF_SYNTH "detserve_synth.json"

/* Parses config.json text[0..len) into cfg (zeroed first, so equal configs compare equal with
 * memcmp). `path` names the file in messages. Supports LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM (q/k/v bias) and Qwen3ForCausalLM (q/k norm).
 * Returns DS_ERR_FORMAT for invalid JSON or a field of the wrong type, DS_ERR_NOT_FOUND for a
 * missing required field, DS_ERR_UNSUPPORTED for an unknown architecture, rope_scaling type,
 * activation or MLP bias; every message names the file and the field. The result has not been
 * through ds_model_config_check. */
enum ds_status ds_hf_config_parse(const char *text, size_t len, const char *path,
                                  struct ds_model_config *cfg, struct ds_err *err);

/* Formats cfg as HF config.json: sorted keys, two-space indent, floats in their shortest
 * round-tripping form, trailing newline. torch_dtype is "bfloat16", "float16" or "float32".
 * *out is malloc'd (caller frees). Returns DS_ERR_INVALID when cfg cannot be expressed for its
 * architecture (e.g. Qwen2 without bias, or an unknown arch), DS_ERR_NOMEM. */
enum ds_status ds_hf_config_format(const struct ds_model_config *cfg, const char *torch_dtype,
                                   char **out, struct ds_err *err);

/* Sets the architecture (arch = "llama", "mistral", "qwen2" or "qwen3") and the flags it implies
 * (Qwen2: attn_bias; Qwen3: qk_norm). Returns DS_ERR_NOT_FOUND for an unknown name. */
enum ds_status ds_hf_config_set_arch(struct ds_model_config *cfg, const char *arch);

enum ds_hf_dtype { DS_HF_BF16 = 0, DS_HF_F16, DS_HF_F32 };

struct ds_hf_write_opts {
	enum ds_hf_dtype dtype; /* file dtype; values are the bf16 synthetic values, converted */
	int n_shards;           /* <= 1: model.safetensors; K > 1: K shards plus the index */
	bool deferred;          /* write config.json + detserve_synth.json only, no weights */
};

/* Writes the synthetic model (cfg, seed) into dir (created if missing) in HF layout, with the
 * values ds_model_synth builds (ds_synth_fill; tied embeddings use ds_synth_tied_embd_scale).
 * Output is a pure function of (cfg, seed, opts): the same inputs give byte-identical files.
 * Each file is written to a temporary name and renamed; config.json is written last, so its
 * presence means the directory is complete. Stale weight files of the other layout (single vs
 * sharded vs deferred) are removed. The byte-level tokenizer (tokenizer.json and
 * tokenizer_config.json, ds_tokenizer_write_bytelevel_json) is written too. seed must be < 2^63 (it is stored as a JSON integer).
 * Returns DS_ERR_INVALID (bad cfg/opts), DS_ERR_IO naming the file, DS_ERR_NOMEM. */
enum ds_status ds_model_write_hf(const struct ds_model_config *cfg, uint64_t seed, const char *dir,
                                 const struct ds_hf_write_opts *opts, struct ds_err *err);

/* Nearest IEEE half to f (round to nearest even; overflow to infinity). Used by the writer. */
uint16_t ds_f32_to_f16(float f);

#endif
