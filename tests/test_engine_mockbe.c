/* test_engine_mockbe.c - the strict mock backend (see test_engine_mockbe.h). */
#include "test_engine_mockbe.h"

#include <stdlib.h>

struct slot {
	uint64_t h;
	bool written, fast;
};

struct mock_ctx {
	const struct ds_model *m;
	struct mockbe_opts o;
	int n_blocks, block_size;
	struct slot *kv;
	float *logits;
	void *scratch;
	uint64_t tainted, unwritten, calls;
};

static enum ds_status mock_kv_init(void *ctx, int n_blocks, int block_size, struct ds_err *err)
{
	struct mock_ctx *c = ctx;
	c->kv = calloc((size_t)n_blocks * block_size, sizeof(*c->kv));
	if (!c->kv)
		return ds_errf(err, DS_ERR_NOMEM, "mock: kv");
	c->n_blocks = n_blocks;
	c->block_size = block_size;
	return DS_OK;
}

static struct slot *slot_at(struct mock_ctx *c, const struct ds_fwd_seq *s, int pos)
{
	int b = s->blocks[pos / c->block_size];
	return &c->kv[(size_t)b * c->block_size + pos % c->block_size];
}

static enum ds_status mock_forward(void *ctx, const struct ds_fwd_batch *b, struct ds_err *err)
{
	struct mock_ctx *c = ctx;
	if (c->o.fail_every > 0 && (int)b->path == c->o.fail_path &&
	    ++c->calls % (uint64_t)c->o.fail_every == 0)
		return ds_errf(err, DS_ERR_DEVICE, "mock: injected failure on call %llu",
		               (unsigned long long)c->calls);
	int V = c->m->cfg.vocab_size;
	int total = 0;
	for (int i = 0; i < b->n_seqs; i++)
		total += b->seqs[i].n_tokens;
	int row = 0;
	for (int i = 0; i < b->n_seqs; i++) {
		const struct ds_fwd_seq *s = &b->seqs[i];
		for (int j = 0; j < s->n_tokens; j++) {
			int p = s->pos0 + j;
			/* fold every earlier slot, as attention reads them all */
			uint64_t prev = 0;
			bool taint = false;
			for (int q = 0; q < p; q++) {
				struct slot *qs = slot_at(c, s, q);
				prev = ds_mix64(prev ^ (qs->written ? qs->h : 0xdeadbeefull));
				if (!qs->written) {
					c->unwritten++;
					if (c->o.bad_reads)
						(*c->o.bad_reads)++;
				}
				if (b->path == DS_PATH_REF && !s->mixed_kv)
					taint |= !qs->written || qs->fast;
			}
			uint64_t h = ds_hash3(prev, (uint64_t)s->tokens[j], (uint64_t)p);
			struct slot *w = slot_at(c, s, p);
			w->h = h;
			w->written = true;
			w->fast = b->path == DS_PATH_FAST;
			if (!s->all_rows && j != s->n_tokens - 1)
				continue;
			if (taint) {
				c->tainted++;
				if (c->o.bad_reads)
					(*c->o.bad_reads)++;
			}
			uint64_t key = taint ? ds_mix64(h ^ 0x5a5a5a5aull) : h;
			for (int v = 0; v < V; v++) {
				float x = c->o.logit_scale *
				          ds_hash_unit_pm1(ds_hash3(key, (uint64_t)v, 7));
				if (b->path == DS_PATH_FAST)
					x += c->o.fast_noise *
					     ds_hash_unit_pm1(ds_hash3(h, (uint64_t)v,
					                               (uint64_t)total * 131 +
					                                   (uint64_t)b->n_seqs));
				c->logits[v] = x;
			}
			struct ds_sample_result r;
			ds_sample(c->logits, V, &s->sp, p + 1, c->scratch, &r);
			b->rows[row] = (struct ds_fwd_row){r.token, r.logprob, r.margin};
			if (b->logits)
				memcpy(b->logits + (size_t)row * V, c->logits,
				       (size_t)V * sizeof(float));
			row++;
		}
	}
	return DS_OK;
}

static void mock_free(void *ctx)
{
	struct mock_ctx *c = ctx;
	free(c->kv);
	free(c->logits);
	free(c->scratch);
	free(c);
}

static int mock_warm_sizes(void *ctx, enum ds_path path, int *sizes, int cap)
{
	struct mock_ctx *c = ctx;
	int n = path == DS_PATH_REF ? DS_MIN(cap, c->o.n_ref_warm_sizes) : 0;
	for (int i = 0; i < n; i++)
		sizes[i] = c->o.ref_warm_sizes[i];
	return n;
}

static const struct ds_backend_i mock_iface = {
    .name = "mock",
    .kv_init = mock_kv_init,
    .forward = mock_forward,
    .warm_sizes = mock_warm_sizes,
    .free = mock_free,
};

enum ds_status mockbe_init(struct ds_backend *be, const struct ds_model *m,
                           const struct mockbe_opts *o, struct ds_err *err)
{
	memset(be, 0, sizeof(*be));
	struct mock_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return ds_errf(err, DS_ERR_NOMEM, "mock: ctx");
	c->m = m;
	c->o = *o;
	c->logits = malloc((size_t)m->cfg.vocab_size * sizeof(float));
	c->scratch = malloc(ds_sample_scratch_size(m->cfg.vocab_size));
	if (!c->logits || !c->scratch) {
		mock_free(c);
		return ds_errf(err, DS_ERR_NOMEM, "mock: buffers");
	}
	be->iface = &mock_iface;
	be->ctx = c;
	be->model = m;
	return DS_OK;
}

uint64_t mockbe_tainted_reads(const struct ds_backend *be)
{
	return ((const struct mock_ctx *)be->ctx)->tainted;
}

uint64_t mockbe_unwritten_reads(const struct ds_backend *be)
{
	return ((const struct mock_ctx *)be->ctx)->unwritten;
}
