/* config.c - HF config.json: parsing into struct ds_model_config and formatting it back.
 *
 * Parsing follows the transformers defaults for each supported class, and anything that would
 * change the math but that we do not implement (another rope_scaling type, an activation other
 * than SiLU, an MLP bias) is refused with DS_ERR_UNSUPPORTED rather than silently ignored.
 * Formatting is hand-written rather than jansson's dump so that floats come out in their
 * shortest round-tripping form ("1e-05", "500000.0"), keys sorted, and bytes stable. */
#include "hf.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const struct {
	const char *arch, *model_type;
} hf_archs[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
};

static int hf_arch_index(const char *arch)
{
	for (size_t i = 0; i < DS_ARRAY_LEN(hf_archs); i++)
		if (strcmp(arch, hf_archs[i].arch) == 0)
			return (int)i;
	return -1;
}

enum ds_status ds_hf_config_set_arch(struct ds_model_config *cfg, const char *arch)
{
	for (size_t i = 0; i < DS_ARRAY_LEN(hf_archs); i++) {
		if (strcmp(arch, hf_archs[i].model_type) != 0)
			continue;
		snprintf(cfg->arch, sizeof(cfg->arch), "%s", hf_archs[i].arch);
		cfg->attn_bias = strcmp(arch, "qwen2") == 0;
		cfg->qk_norm = strcmp(arch, "qwen3") == 0;
		return DS_OK;
	}
	return DS_ERR_NOT_FOUND;
}

/* ---- parsing ---- */

struct hf_ctx {
	const char *path;
	json_t *root;
	struct ds_err *err;
};

static bool hf_absent(const json_t *v)
{
	return v == NULL || json_is_null(v);
}

static enum ds_status hf_int(struct hf_ctx *c, const json_t *obj, const char *key, bool required,
                             int def, int *out)
{
	json_t *v = json_object_get(obj, key);
	if (hf_absent(v)) {
		if (required)
			return ds_errf(c->err, DS_ERR_NOT_FOUND, "%s: missing required field %s",
			               c->path, key);
		*out = def;
		return DS_OK;
	}
	if (!json_is_integer(v) || json_integer_value(v) < INT_MIN ||
	    json_integer_value(v) > INT_MAX)
		return ds_errf(c->err, DS_ERR_FORMAT, "%s: field %s must be a 32-bit integer",
		               c->path, key);
	*out = (int)json_integer_value(v);
	return DS_OK;
}

static enum ds_status hf_float(struct hf_ctx *c, const json_t *obj, const char *key, bool required,
                               float def, float *out)
{
	json_t *v = json_object_get(obj, key);
	if (hf_absent(v)) {
		if (required)
			return ds_errf(c->err, DS_ERR_NOT_FOUND, "%s: missing required field %s",
			               c->path, key);
		*out = def;
		return DS_OK;
	}
	if (!json_is_number(v))
		return ds_errf(c->err, DS_ERR_FORMAT, "%s: field %s must be a number", c->path,
		               key);
	*out = (float)json_number_value(v);
	return DS_OK;
}

static enum ds_status hf_bool(struct hf_ctx *c, const char *key, bool def, bool *out)
{
	json_t *v = json_object_get(c->root, key);
	if (hf_absent(v)) {
		*out = def;
		return DS_OK;
	}
	if (!json_is_boolean(v))
		return ds_errf(c->err, DS_ERR_FORMAT, "%s: field %s must be true or false", c->path,
		               key);
	*out = json_is_true(v);
	return DS_OK;
}

static enum ds_status hf_arch(struct hf_ctx *c, struct ds_model_config *cfg)
{
	json_t *archs = json_object_get(c->root, "architectures");
	json_t *mt = json_object_get(c->root, "model_type");
	const char *name = NULL;
	if (json_is_array(archs) && json_array_size(archs) > 0) {
		if (!json_is_string(json_array_get(archs, 0)))
			return ds_errf(c->err, DS_ERR_FORMAT,
			               "%s: architectures[0] must be a string", c->path);
		name = json_string_value(json_array_get(archs, 0));
		if (hf_arch_index(name) >= 0) {
			snprintf(cfg->arch, sizeof(cfg->arch), "%s", name);
			return DS_OK;
		}
	} else if (json_is_string(mt)) {
		name = json_string_value(mt);
		for (size_t i = 0; i < DS_ARRAY_LEN(hf_archs); i++) {
			if (strcmp(name, hf_archs[i].model_type) == 0) {
				snprintf(cfg->arch, sizeof(cfg->arch), "%s", hf_archs[i].arch);
				return DS_OK;
			}
		}
	} else {
		return ds_errf(
		    c->err, DS_ERR_NOT_FOUND,
		    "%s: missing architectures and model_type: cannot tell the architecture",
		    c->path);
	}
	return ds_errf(
	    c->err, DS_ERR_UNSUPPORTED,
	    "%s: unknown architecture %s (supported: LlamaForCausalLM, MistralForCausalLM, "
	    "Qwen2ForCausalLM, Qwen3ForCausalLM)",
	    c->path, name);
}

static enum ds_status hf_rope_scaling(struct hf_ctx *c, struct ds_model_config *cfg)
{
	json_t *rs = json_object_get(c->root, "rope_scaling");
	if (hf_absent(rs))
		return DS_OK;
	if (!json_is_object(rs))
		return ds_errf(c->err, DS_ERR_FORMAT,
		               "%s: field rope_scaling must be an object or null", c->path);
	json_t *ty = json_object_get(rs, "rope_type");
	if (hf_absent(ty))
		ty = json_object_get(rs, "type");
	if (!json_is_string(ty))
		return ds_errf(c->err, DS_ERR_FORMAT, "%s: rope_scaling needs a string rope_type",
		               c->path);
	const char *t = json_string_value(ty);
	if (strcmp(t, "default") == 0)
		return DS_OK;
	if (strcmp(t, "llama3") != 0)
		return ds_errf(c->err, DS_ERR_UNSUPPORTED,
		               "%s: rope_scaling type %s is not supported (only llama3)", c->path,
		               t);
	enum ds_status rv;
	cfg->rope_scaling = DS_ROPE_LLAMA3;
	if ((rv = hf_float(c, rs, "factor", true, 0.0f, &cfg->rope_factor)) != DS_OK ||
	    (rv = hf_float(c, rs, "low_freq_factor", false, 1.0f, &cfg->rope_low_freq_factor)) !=
	        DS_OK ||
	    (rv = hf_float(c, rs, "high_freq_factor", false, 4.0f, &cfg->rope_high_freq_factor)) !=
	        DS_OK ||
	    (rv = hf_int(c, rs, "original_max_position_embeddings", true, 0,
	                 &cfg->rope_orig_max_pos)) != DS_OK)
		return rv;
	if (!(cfg->rope_factor > 0.0f) ||
	    !(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor) ||
	    cfg->rope_orig_max_pos <= 0)
		return ds_errf(c->err, DS_ERR_INVALID,
		               "%s: rope_scaling llama3 needs factor > 0, high_freq_factor > "
		               "low_freq_factor and original_max_position_embeddings > 0",
		               c->path);
	return DS_OK;
}

static enum ds_status hf_tokens(struct hf_ctx *c, struct ds_model_config *cfg)
{
	enum ds_status rv = hf_int(c, c->root, "bos_token_id", false, -1, &cfg->bos_id);
	if (rv != DS_OK)
		return rv;
	json_t *eos = json_object_get(c->root, "eos_token_id");
	if (hf_absent(eos))
		return DS_OK;
	if (json_is_integer(eos)) {
		json_t *one = json_array();
		if (!one || json_array_append(one, eos) != 0) {
			json_decref(one);
			return ds_errf(c->err, DS_ERR_NOMEM, "%s: out of memory", c->path);
		}
		eos = one;
	} else if (json_is_array(eos)) {
		json_incref(eos);
	} else {
		return ds_errf(c->err, DS_ERR_FORMAT,
		               "%s: field eos_token_id must be an integer or a list", c->path);
	}
	rv = DS_OK;
	size_t n = json_array_size(eos);
	if (n > DS_MAX_EOS) {
		rv = ds_errf(c->err, DS_ERR_UNSUPPORTED,
		             "%s: eos_token_id lists %zu ids (at most %d)", c->path, n, DS_MAX_EOS);
	} else {
		for (size_t i = 0; i < n && rv == DS_OK; i++) {
			json_t *v = json_array_get(eos, i);
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > INT_MAX)
				rv = ds_errf(c->err, DS_ERR_FORMAT,
				             "%s: eos_token_id[%zu] must be a non-negative integer",
				             c->path, i);
			else
				cfg->eos_ids[cfg->n_eos++] = (int)json_integer_value(v);
		}
	}
	json_decref(eos);
	return rv;
}

/* Upper bounds far above any real model, so sizes and counts derived from the config (tensor
 * counts, q_dim, byte sizes) cannot overflow and a corrupt value fails here, not in calloc. */
static enum ds_status hf_limits(struct hf_ctx *c, const struct ds_model_config *cfg)
{
	const struct {
		const char *key;
		int v, max;
	} lim[] = {
	    {"vocab_size", cfg->vocab_size, 1 << 24},
	    {"hidden_size", cfg->hidden, 1 << 20},
	    {"num_hidden_layers", cfg->n_layer, 1024},
	    {"num_attention_heads", cfg->n_head, 1024},
	    {"num_key_value_heads", cfg->n_kv_head, 1024},
	    {"head_dim", cfg->head_dim, 4096},
	    {"intermediate_size", cfg->ffn, 1 << 22},
	    {"max_position_embeddings", cfg->max_pos, 1 << 24},
	};
	for (size_t i = 0; i < DS_ARRAY_LEN(lim); i++)
		if (lim[i].v > lim[i].max)
			return ds_errf(c->err, DS_ERR_UNSUPPORTED, "%s: %s %d exceeds the limit %d",
			               c->path, lim[i].key, lim[i].v, lim[i].max);
	return DS_OK;
}

static enum ds_status hf_parse_root(struct hf_ctx *c, struct ds_model_config *cfg)
{
	enum ds_status rv;
	json_t *r = c->root;
	if ((rv = hf_arch(c, cfg)) != DS_OK)
		return rv;
	bool qwen2 = strcmp(cfg->arch, "Qwen2ForCausalLM") == 0;
	bool qwen3 = strcmp(cfg->arch, "Qwen3ForCausalLM") == 0;
	bool mistral = strcmp(cfg->arch, "MistralForCausalLM") == 0;

	if ((rv = hf_int(c, r, "vocab_size", true, 0, &cfg->vocab_size)) != DS_OK ||
	    (rv = hf_int(c, r, "hidden_size", true, 0, &cfg->hidden)) != DS_OK ||
	    (rv = hf_int(c, r, "num_hidden_layers", true, 0, &cfg->n_layer)) != DS_OK ||
	    (rv = hf_int(c, r, "num_attention_heads", true, 0, &cfg->n_head)) != DS_OK ||
	    (rv = hf_int(c, r, "num_key_value_heads", false, cfg->n_head, &cfg->n_kv_head)) !=
	        DS_OK ||
	    (rv = hf_int(c, r, "intermediate_size", true, 0, &cfg->ffn)) != DS_OK ||
	    (rv = hf_int(c, r, "max_position_embeddings", false, 2048, &cfg->max_pos)) != DS_OK ||
	    (rv = hf_float(c, r, "rms_norm_eps", false, 1e-6f, &cfg->rms_eps)) != DS_OK ||
	    (rv = hf_float(c, r, "rope_theta", false, 10000.0f, &cfg->rope_theta)) != DS_OK ||
	    (rv = hf_bool(c, "tie_word_embeddings", false, &cfg->tie_embeddings)) != DS_OK ||
	    (rv = hf_bool(c, "attention_bias", false, &cfg->attn_bias)) != DS_OK)
		return rv;
	if (cfg->n_head <= 0 || cfg->hidden % cfg->n_head != 0) {
		if (hf_absent(json_object_get(r, "head_dim")))
			return ds_errf(
			    c->err, DS_ERR_INVALID,
			    "%s: hidden_size %d is not a multiple of num_attention_heads %d "
			    "and head_dim is not given",
			    c->path, cfg->hidden, cfg->n_head);
	}
	int def_hd = cfg->n_head > 0 ? cfg->hidden / cfg->n_head : 0;
	if ((rv = hf_int(c, r, "head_dim", false, def_hd, &cfg->head_dim)) != DS_OK)
		return rv;
	/* Qwen2 always carries q/k/v bias (there is no key); Mistral never does */
	if (qwen2)
		cfg->attn_bias = true;
	if (mistral)
		cfg->attn_bias = false;
	cfg->qk_norm = qwen3;

	json_t *act = json_object_get(r, "hidden_act");
	if (!hf_absent(act) &&
	    (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
		return ds_errf(c->err, DS_ERR_UNSUPPORTED,
		               "%s: hidden_act %s is not supported (only silu)", c->path,
		               json_is_string(act) ? json_string_value(act) : "(not a string)");
	bool mlp_bias;
	if ((rv = hf_bool(c, "mlp_bias", false, &mlp_bias)) != DS_OK)
		return rv;
	if (mlp_bias)
		return ds_errf(c->err, DS_ERR_UNSUPPORTED, "%s: mlp_bias is not supported",
		               c->path);

	/* A sliding window no shorter than the context is full attention; a shorter one is exact
	 * full attention too if the context never exceeds it, so cap the context there. */
	bool use_sw = mistral;
	if (qwen2 || qwen3)
		if ((rv = hf_bool(c, "use_sliding_window", false, &use_sw)) != DS_OK)
			return rv;
	if (use_sw) {
		int sw;
		if ((rv = hf_int(c, r, "sliding_window", false, 0, &sw)) != DS_OK)
			return rv;
		if (sw > 0 && sw < cfg->max_pos)
			cfg->max_pos = sw;
	}
	if ((rv = hf_rope_scaling(c, cfg)) != DS_OK)
		return rv;
	if ((rv = hf_limits(c, cfg)) != DS_OK)
		return rv;
	return hf_tokens(c, cfg);
}

enum ds_status ds_hf_config_parse(const char *text, size_t len, const char *path,
                                  struct ds_model_config *cfg, struct ds_err *err)
{
	memset(cfg, 0, sizeof(*cfg));
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return ds_errf(err, DS_ERR_FORMAT, "%s: invalid JSON: %s (line %d, column %d)",
		               path, je.text, je.line, je.column);
	enum ds_status rv;
	if (!json_is_object(root)) {
		rv = ds_errf(err, DS_ERR_FORMAT, "%s: top level is not a JSON object", path);
	} else {
		struct hf_ctx c = {.path = path, .root = root, .err = err};
		rv = hf_parse_root(&c, cfg);
	}
	json_decref(root);
	return rv;
}

/* ---- formatting ---- */

/* Shortest decimal that reads back as the same float, Python-style ("8.0", "1e-05"). */
static void hf_fmt_float(char *buf, size_t cap, float f)
{
	if (f == truncf(f) && fabsf(f) < 1e16f) {
		snprintf(buf, cap, "%.1f", (double)f);
		return;
	}
	for (int prec = 1; prec <= 9; prec++) {
		snprintf(buf, cap, "%.*g", prec, (double)f);
		if ((float)strtod(buf, NULL) == f)
			return;
	}
}

struct hf_kv {
	const char *key;
	char val[256];
};

static int hf_kv_cmp(const void *a, const void *b)
{
	return strcmp(((const struct hf_kv *)a)->key, ((const struct hf_kv *)b)->key);
}

enum ds_status ds_hf_config_format(const struct ds_model_config *cfg, const char *torch_dtype,
                                   char **out, struct ds_err *err)
{
	*out = NULL;
	int ai = hf_arch_index(cfg->arch);
	if (ai < 0)
		return ds_errf(err, DS_ERR_INVALID, "config: unknown architecture %s", cfg->arch);
	const char *mt = hf_archs[ai].model_type;
	bool llama = strcmp(mt, "llama") == 0, mistral = strcmp(mt, "mistral") == 0;
	bool qwen2 = strcmp(mt, "qwen2") == 0, qwen3 = strcmp(mt, "qwen3") == 0;
	if (qwen2 && !cfg->attn_bias)
		return ds_errf(err, DS_ERR_INVALID,
		               "config: Qwen2ForCausalLM always has attention bias");
	if (mistral && cfg->attn_bias)
		return ds_errf(err, DS_ERR_INVALID,
		               "config: MistralForCausalLM has no attention bias");
	if (cfg->qk_norm != qwen3)
		return ds_errf(err, DS_ERR_INVALID,
		               "config: q/k norm is exactly Qwen3ForCausalLM's");
	if (!isfinite(cfg->rms_eps) || !isfinite(cfg->rope_theta) || !isfinite(cfg->rope_factor) ||
	    !isfinite(cfg->rope_low_freq_factor) || !isfinite(cfg->rope_high_freq_factor))
		return ds_errf(err, DS_ERR_INVALID, "config: non-finite float field");

	struct hf_kv kv[32];
	int n = 0;
#define KV(k, ...)                                                                                 \
	do {                                                                                       \
		kv[n].key = k;                                                                     \
		snprintf(kv[n].val, sizeof(kv[n].val), __VA_ARGS__);                               \
		n++;                                                                               \
	} while (0)
	char f1[32], f2[32], f3[32];
	KV("architectures", "[\n    \"%s\"\n  ]", cfg->arch);
	if (!qwen2 && !mistral)
		KV("attention_bias", "%s", cfg->attn_bias ? "true" : "false");
	KV("attention_dropout", "0.0");
	if (cfg->bos_id >= 0)
		KV("bos_token_id", "%d", cfg->bos_id);
	else
		KV("bos_token_id", "null");
	if (cfg->n_eos == 0) {
		KV("eos_token_id", "null");
	} else if (cfg->n_eos == 1) {
		KV("eos_token_id", "%d", cfg->eos_ids[0]);
	} else {
		char list[200];
		size_t l = (size_t)snprintf(list, sizeof(list), "[");
		for (int i = 0; i < cfg->n_eos && l < sizeof(list); i++)
			l += (size_t)snprintf(list + l, sizeof(list) - l, "%s\n    %d",
			                      i ? "," : "", cfg->eos_ids[i]);
		KV("eos_token_id", "%s\n  ]", list);
	}
	KV("head_dim", "%d", cfg->head_dim);
	KV("hidden_act", "\"silu\"");
	KV("hidden_size", "%d", cfg->hidden);
	KV("intermediate_size", "%d", cfg->ffn);
	KV("max_position_embeddings", "%d", cfg->max_pos);
	if (llama)
		KV("mlp_bias", "false");
	KV("model_type", "\"%s\"", mt);
	KV("num_attention_heads", "%d", cfg->n_head);
	KV("num_hidden_layers", "%d", cfg->n_layer);
	KV("num_key_value_heads", "%d", cfg->n_kv_head);
	hf_fmt_float(f1, sizeof(f1), cfg->rms_eps);
	KV("rms_norm_eps", "%s", f1);
	if (cfg->rope_scaling == DS_ROPE_LLAMA3) {
		hf_fmt_float(f1, sizeof(f1), cfg->rope_factor);
		hf_fmt_float(f2, sizeof(f2), cfg->rope_high_freq_factor);
		hf_fmt_float(f3, sizeof(f3), cfg->rope_low_freq_factor);
		KV("rope_scaling",
		   "{\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n    "
		   "\"low_freq_factor\": "
		   "%s,\n    \"original_max_position_embeddings\": %d,\n    \"rope_type\": "
		   "\"llama3\"\n  }",
		   f1, f2, f3, cfg->rope_orig_max_pos);
	} else {
		KV("rope_scaling", "null");
	}
	hf_fmt_float(f1, sizeof(f1), cfg->rope_theta);
	KV("rope_theta", "%s", f1);
	if (mistral || qwen2 || qwen3)
		KV("sliding_window", "null");
	KV("tie_word_embeddings", "%s", cfg->tie_embeddings ? "true" : "false");
	KV("torch_dtype", "\"%s\"", torch_dtype);
	KV("use_cache", "true");
	if (qwen2 || qwen3)
		KV("use_sliding_window", "false");
	KV("vocab_size", "%d", cfg->vocab_size);
#undef KV
	qsort(kv, (size_t)n, sizeof(kv[0]), hf_kv_cmp);

	size_t cap = 16;
	for (int i = 0; i < n; i++)
		cap += strlen(kv[i].key) + strlen(kv[i].val) + 8;
	char *s = malloc(cap);
	if (!s)
		return ds_errf(err, DS_ERR_NOMEM, "config: out of memory");
	size_t l = (size_t)snprintf(s, cap, "{\n");
	for (int i = 0; i < n; i++)
		l += (size_t)snprintf(s + l, cap - l, "  \"%s\": %s%s\n", kv[i].key, kv[i].val,
		                      i + 1 < n ? "," : "");
	snprintf(s + l, cap - l, "}\n");
	*out = s;
	return DS_OK;
}
