/* synth.h - the seeded synthetic weight generator.
 *
 * Element i of tensor `name` is bf16(offset + scale * U), U = ds_hash_unit_pm1(ds_hash3(seed,
 * key, i)) and key = XXH64(name, 0). It is counter-based, so a GPU kernel generates the same
 * bytes in parallel (the llama3-8b preset is never written to disk). */
#ifndef DS_SYNTH_H
#define DS_SYNTH_H

#include "tensors.h"

uint64_t ds_synth_key(const char *name);

/* Fills dst[0..n) with elements [first, first+n) of the tensor. */
void ds_synth_fill(uint16_t *dst, size_t n, size_t first, uint64_t seed, uint64_t key,
		   float scale, float offset);

/* When tied, the synthetic lm_head gain is folded into the embedding instead, so the
 * embedding scale for tied models is returned here. */
float ds_synth_tied_embd_scale(const struct ds_model_config *cfg);

#endif
