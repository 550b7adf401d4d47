/* model.c - model lifetime, presets and config checks. Loaders live in their own files. */
#include "model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

enum ds_status ds_model_new(const struct ds_model_config *cfg, struct ds_model **out,
			    struct ds_err *err)
{
	struct ds_model *m = calloc(1, sizeof(*m));
	struct ds_model_storage *st = calloc(1, sizeof(*st));
	struct ds_layer_weights *layers = calloc((size_t)DS_MAX(cfg->n_layer, 1), sizeof(*layers));
	if (!m || !st || !layers) {
		free(m);
		free(st);
		free(layers);
		return ds_errf(err, DS_ERR_NOMEM, "model: out of memory");
	}
	m->cfg = *cfg;
	m->storage = st;
	st->layers = layers;
	m->w.layers = layers;
	*out = m;
	return DS_OK;
}

void *ds_model_alloc(struct ds_model *m, size_t bytes)
{
	struct ds_model_storage *st = m->storage;
	if (st->n_owned == st->cap_owned) {
		int cap = st->cap_owned ? st->cap_owned * 2 : 64;
		void **p = realloc(st->owned, (size_t)cap * sizeof(*p));
		if (!p)
			return NULL;
		st->owned = p;
		st->cap_owned = cap;
	}
	void *buf = malloc(bytes ? bytes : 1);
	if (buf)
		st->owned[st->n_owned++] = buf;
	return buf;
}

enum ds_status ds_model_add_map(struct ds_model *m, void *addr, size_t len)
{
	struct ds_model_storage *st = m->storage;
	if (st->n_maps == st->cap_maps) {
		int cap = st->cap_maps ? st->cap_maps * 2 : 8;
		struct ds_model_map *p = realloc(st->maps, (size_t)cap * sizeof(*p));
		if (!p)
			return DS_ERR_NOMEM;
		st->maps = p;
		st->cap_maps = cap;
	}
	st->maps[st->n_maps].addr = addr;
	st->maps[st->n_maps].len = len;
	st->n_maps++;
	return DS_OK;
}

void ds_model_free(struct ds_model *m)
{
	if (!m)
		return;
	struct ds_model_storage *st = m->storage;
	if (st) {
		for (int i = 0; i < st->n_owned; i++)
			free(st->owned[i]);
		for (int i = 0; i < st->n_maps; i++)
			munmap(st->maps[i].addr, st->maps[i].len);
		free(st->owned);
		free(st->maps);
		free(st->layers);
		free(st);
	}
	free(m);
}

void ds_model_identity_hex(const struct ds_model *m, char buf[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(buf + 2 * i, 3, "%02x", m->identity[i]);
}

/* ---- presets ---- */

static void preset_common(struct ds_model_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->arch, sizeof(c->arch), "LlamaForCausalLM");
	c->rms_eps = 1e-5f;
	c->rope_theta = 10000.0f;
	c->bos_id = 256;
	c->eos_ids[0] = 257;
	c->n_eos = 1;
}

enum ds_status ds_model_preset(const char *name, struct ds_model_config *c)
{
	preset_common(c);
	if (strcmp(name, "tiny") == 0) {
		/* byte-level vocab: 256 bytes + <|bos|> <|eos|> <|pad|> */
		c->vocab_size = 259;
		c->hidden = 64;
		c->n_layer = 2;
		c->n_head = 4;
		c->n_kv_head = 2;
		c->head_dim = 16;
		c->ffn = 160;
		c->max_pos = 1024;
		return DS_OK;
	}
	if (strcmp(name, "small") == 0) {
		c->vocab_size = 4096;
		c->hidden = 512;
		c->n_layer = 8;
		c->n_head = 8;
		c->n_kv_head = 4;
		c->head_dim = 64;
		c->ffn = 1536;
		c->max_pos = 4096;
		return DS_OK;
	}
	if (strcmp(name, "llama3-8b") == 0) {
		c->vocab_size = 128256;
		c->hidden = 4096;
		c->n_layer = 32;
		c->n_head = 32;
		c->n_kv_head = 8;
		c->head_dim = 128;
		c->ffn = 14336;
		c->max_pos = 8192;
		c->rope_theta = 500000.0f;
		c->rope_scaling = DS_ROPE_LLAMA3;
		c->rope_factor = 8.0f;
		c->rope_low_freq_factor = 1.0f;
		c->rope_high_freq_factor = 4.0f;
		c->rope_orig_max_pos = 8192;
		c->bos_id = 128000;
		c->eos_ids[0] = 128001;
		c->eos_ids[1] = 128009;
		c->n_eos = 2;
		return DS_OK;
	}
	return DS_ERR_NOT_FOUND;
}

enum ds_status ds_model_config_check(const struct ds_model_config *c, struct ds_err *err)
{
#define POS(f) \
	if (c->f <= 0) \
		return ds_errf(err, DS_ERR_INVALID, "config: %s must be positive (got %d)", #f, c->f)
	POS(vocab_size);
	POS(hidden);
	POS(n_layer);
	POS(n_head);
	POS(n_kv_head);
	POS(head_dim);
	POS(ffn);
	POS(max_pos);
#undef POS
	if (c->n_head % c->n_kv_head != 0)
		return ds_errf(err, DS_ERR_INVALID,
			       "config: num_attention_heads %d is not a multiple of num_key_value_heads %d",
			       c->n_head, c->n_kv_head);
	if (c->head_dim % 2 != 0)
		return ds_errf(err, DS_ERR_INVALID, "config: head_dim %d must be even for RoPE",
			       c->head_dim);
	if (!(c->rms_eps > 0.0f) || !(c->rope_theta > 0.0f))
		return ds_errf(err, DS_ERR_INVALID, "config: rms_norm_eps and rope_theta must be > 0");
	if (c->n_eos < 0 || c->n_eos > DS_MAX_EOS)
		return ds_errf(err, DS_ERR_INVALID, "config: too many eos ids");
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab_size)
			return ds_errf(err, DS_ERR_INVALID, "config: eos id %d outside vocab %d",
				       c->eos_ids[i], c->vocab_size);
	if (c->bos_id >= c->vocab_size)
		return ds_errf(err, DS_ERR_INVALID, "config: bos id %d outside vocab %d", c->bos_id,
			       c->vocab_size);
	return DS_OK;
}
