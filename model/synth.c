/* synth.c - seeded synthetic models in memory (see synth.h). */
#include "synth.h"
#include "model_internal.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

uint64_t ds_synth_key(const char *name)
{
	return XXH64(name, strlen(name), 0);
}

void ds_synth_fill(uint16_t *dst, size_t n, size_t first, uint64_t seed, uint64_t key,
		   float scale, float offset)
{
	for (size_t i = 0; i < n; i++) {
		float u = ds_hash_unit_pm1(ds_hash3(seed, key, (uint64_t)(first + i)));
		dst[i] = ds_f32_to_bf16(offset + scale * u);
	}
}

float ds_synth_tied_embd_scale(const struct ds_model_config *cfg)
{
	/* tied: the embedding doubles as lm_head; give it the logit gain of the untied head */
	return 3.0f * sqrtf(3.0f / (float)cfg->hidden);
}

/* XXH128 over the canonical config fields and every tensor descriptor, then the seed.
 * Shared with the loader, which gives deferred synthetic directories the same identity. */
void ds_synth_identity(struct ds_model *m, const struct ds_tensor_desc *ts, int n)
{
	XXH3_state_t *st = XXH3_createState();
	DS_ASSERT(st != NULL);
	XXH3_128bits_reset(st);
	XXH3_128bits_update(st, "detserve-synth-v1", 17);
	XXH3_128bits_update(st, &m->cfg, sizeof(m->cfg));
	for (int i = 0; i < n; i++) {
		XXH3_128bits_update(st, ts[i].name, strlen(ts[i].name));
		XXH3_128bits_update(st, ts[i].shape, sizeof(ts[i].shape));
	}
	XXH3_128bits_update(st, &m->synth_seed, sizeof(m->synth_seed));
	XXH128_hash_t h = XXH3_128bits_digest(st);
	XXH3_freeState(st);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	memcpy(m->identity, c.digest, 16);
}

enum ds_status ds_model_synth(const struct ds_model_config *cfg, uint64_t seed,
			      struct ds_model **out, struct ds_err *err)
{
	*out = NULL;
	enum ds_status rv = ds_model_config_check(cfg, err);
	if (rv != DS_OK)
		return rv;
	struct ds_model *m;
	if ((rv = ds_model_new(cfg, &m, err)) != DS_OK)
		return rv;
	m->synthetic = true;
	m->synth_seed = seed;
	snprintf(m->source, sizeof(m->source), "synthetic:%llu", (unsigned long long)seed);

	int n = ds_tensor_count(cfg);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	if (!ts) {
		ds_model_free(m);
		return ds_errf(err, DS_ERR_NOMEM, "synth: out of memory");
	}
	ds_tensor_list(cfg, ts);
	for (int i = 0; i < n; i++) {
		size_t numel = (size_t)ds_tensor_numel(&ts[i]);
		uint16_t *buf = ds_model_alloc(m, numel * sizeof(uint16_t));
		if (!buf) {
			ds_errf(err, DS_ERR_NOMEM, "synth: out of memory for %s", ts[i].name);
			free(ts);
			ds_model_free(m);
			return DS_ERR_NOMEM;
		}
		float scale = ts[i].synth_scale;
		if (ts[i].field == DS_T_TOK_EMBD && cfg->tie_embeddings)
			scale = ds_synth_tied_embd_scale(cfg);
		ds_synth_fill(buf, numel, 0, seed, ds_synth_key(ts[i].name), scale, ts[i].synth_offset);
		*ds_tensor_slot(&m->w, &ts[i]) = buf;
	}
	if (cfg->tie_embeddings)
		m->w.lm_head = m->w.tok_embd;
	ds_synth_identity(m, ts, n);
	free(ts);
	*out = m;
	return DS_OK;
}
