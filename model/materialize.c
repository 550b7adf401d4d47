/* materialize.c - fills a deferred synthetic model's weights on the host.
 *
 * A deferred model (a directory with detserve_synth.json and no weight files) carries only its
 * config and seed. This generates every tensor with the same generator and scales as
 * ds_model_synth, so the result is byte-identical to it; the CPU backend calls this, while the
 * CUDA backend generates the same bytes on the device instead. */
#include "model_internal.h"
#include "synth.h"

#include <stdlib.h>

enum ds_status ds_model_materialize(struct ds_model *m, struct ds_err *err)
{
	if (!m || !m->deferred)
		return DS_OK;
	const struct ds_model_config *cfg = &m->cfg;
	int n = ds_tensor_count(cfg);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	if (!ts)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", m->source);
	ds_tensor_list(cfg, ts);
	for (int i = 0; i < n; i++) {
		size_t numel = (size_t)ds_tensor_numel(&ts[i]);
		uint16_t *buf = ds_model_alloc(m, numel * sizeof(uint16_t));
		if (!buf) {
			enum ds_status rv = ds_errf(err, DS_ERR_NOMEM, "%s: out of memory for %s",
			                            m->source, ts[i].name);
			free(ts);
			/* stay a consistent deferred model: no half-filled pointers */
			memset(m->w.layers, 0, (size_t)cfg->n_layer * sizeof(*m->w.layers));
			m->w.tok_embd = m->w.out_norm = m->w.lm_head = NULL;
			return rv;
		}
		float scale = ts[i].synth_scale;
		if (ts[i].field == DS_T_TOK_EMBD && cfg->tie_embeddings)
			scale = ds_synth_tied_embd_scale(cfg);
		ds_synth_fill(buf, numel, 0, m->synth_seed, ds_synth_key(ts[i].name), scale,
		              ts[i].synth_offset);
		*ds_tensor_slot(&m->w, &ts[i]) = buf;
	}
	free(ts);
	if (cfg->tie_embeddings)
		m->w.lm_head = m->w.tok_embd;
	m->deferred = false;
	return DS_OK;
}
