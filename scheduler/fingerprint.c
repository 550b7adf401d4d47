/* fingerprint.c - streaming XXH3-128 request fingerprint (see fingerprint.h). */
#include "fingerprint.h"

#include <stdio.h>
#include <stdlib.h>

static void put_u32(struct ds_fp *fp, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	XXH3_128bits_update(fp->st, b, sizeof(b));
}

static void put_u64(struct ds_fp *fp, uint64_t v)
{
	put_u32(fp, (uint32_t)v);
	put_u32(fp, (uint32_t)(v >> 32));
}

static void put_f32(struct ds_fp *fp, float f)
{
	uint32_t u;
	if (f == 0.0f)
		f = 0.0f; /* -0 and +0 are the same parameter */
	memcpy(&u, &f, sizeof(u));
	put_u32(fp, u);
}

static void put_tokens(struct ds_fp *fp, uint32_t tag, const int32_t *t, int n)
{
	put_u32(fp, tag);
	put_u32(fp, (uint32_t)n);
	for (int i = 0; i < n; i++)
		put_u32(fp, (uint32_t)t[i]);
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

enum ds_status ds_fp_init(struct ds_fp *fp, const uint8_t identity[16], const int32_t *prompt,
                          int n_prompt, const struct ds_fp_params *p, int vocab)
{
	fp->st = XXH3_createState();
	if (!fp->st)
		return DS_ERR_NOMEM;
	XXH3_128bits_reset(fp->st);
	XXH3_128bits_update(fp->st, "detserve-fp1", 12);
	XXH3_128bits_update(fp->st, identity, 16);
	put_tokens(fp, 0x50524f4d /* PROM */, prompt, n_prompt);

	struct ds_sample_params s = p->sampling;
	bool greedy = !(s.temperature > 0.0f);
	if (s.top_k >= vocab || s.top_k < 0)
		s.top_k = 0;
	if (greedy) {
		s.temperature = 0.0f;
		s.top_k = 0;
		s.top_p = 1.0f;
		s.seed = 0;
	}
	put_u32(fp, 0x53414d50 /* SAMP */);
	put_f32(fp, s.temperature);
	put_u32(fp, (uint32_t)s.top_k);
	put_f32(fp, s.top_p);
	put_u64(fp, s.seed);
	put_u32(fp, (uint32_t)p->max_tokens);
	put_u32(fp, p->ignore_eos ? 1u : 0u);

	/* stop ids are a set */
	int32_t small[64];
	int32_t *ids = p->n_stop_ids <= 64 ? small : malloc((size_t)p->n_stop_ids * sizeof(*ids));
	int n = 0;
	if (ids) {
		if (p->n_stop_ids)
			memcpy(ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof(*ids));
		qsort(ids, (size_t)p->n_stop_ids, sizeof(*ids), cmp_i32);
		for (int i = 0; i < p->n_stop_ids; i++)
			if (n == 0 || ids[n - 1] != ids[i])
				ids[n++] = ids[i];
		put_tokens(fp, 0x53544f50 /* STOP */, ids, n);
		if (ids != small)
			free(ids);
	} else {
		/* out of memory: hash them unsorted rather than fail (still a pure function) */
		put_tokens(fp, 0x53544f55, p->stop_ids, p->n_stop_ids);
	}
	put_u32(fp, (uint32_t)p->n_stop_seqs);
	for (int i = 0; i < p->n_stop_seqs; i++)
		put_tokens(fp, 0x53455153 /* SEQS */, p->stop_seqs[i], p->stop_seq_lens[i]);
	put_u32(fp, 0x4f555450 /* OUTP */);
	return DS_OK;
}

void ds_fp_free(struct ds_fp *fp)
{
	if (fp->st)
		XXH3_freeState(fp->st);
	fp->st = NULL;
}

void ds_fp_update(struct ds_fp *fp, const int32_t *tokens, int n)
{
	for (int i = 0; i < n; i++)
		put_u32(fp, (uint32_t)tokens[i]);
}

void ds_fp_hex(const struct ds_fp *fp, char out[33])
{
	XXH128_hash_t h = XXH3_128bits_digest(fp->st);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}
