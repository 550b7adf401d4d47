/* backend.c - argument checks and counters around the backend table. */
#include "backend.h"

#include <stdio.h>

int ds_fwd_batch_out_rows(const struct ds_fwd_batch *b)
{
	int n = 0;
	for (int i = 0; i < b->n_seqs; i++)
		n += b->seqs[i].all_rows ? b->seqs[i].n_tokens : 1;
	return n;
}

enum ds_status ds_backend_kv_init(struct ds_backend *be, int n_blocks, int block_size,
				  struct ds_err *err)
{
	if (n_blocks <= 0 || block_size <= 0)
		return ds_errf(err, DS_ERR_INVALID, "kv: n_blocks %d and block_size %d must be > 0",
			       n_blocks, block_size);
	enum ds_status rv = be->iface->kv_init(be->ctx, n_blocks, block_size, err);
	if (rv == DS_OK) {
		be->n_blocks = n_blocks;
		be->block_size = block_size;
	}
	return rv;
}

enum ds_status ds_backend_forward(struct ds_backend *be, const struct ds_fwd_batch *b,
				  struct ds_err *err)
{
	const struct ds_model_config *c = &be->model->cfg;
	if (be->block_size == 0)
		return ds_errf(err, DS_ERR_INVALID, "forward: kv cache not initialised");
	if (b->n_seqs <= 0 || !b->seqs || !b->rows)
		return ds_errf(err, DS_ERR_INVALID, "forward: empty batch");
	if (b->path != DS_PATH_FAST && b->path != DS_PATH_REF)
		return ds_errf(err, DS_ERR_INVALID, "forward: bad path %d", (int)b->path);
	int64_t rows = 0;
	for (int i = 0; i < b->n_seqs; i++) {
		const struct ds_fwd_seq *s = &b->seqs[i];
		if (s->n_tokens <= 0 || s->pos0 < 0 || !s->tokens || !s->blocks)
			return ds_errf(err, DS_ERR_INVALID, "forward: seq %d is empty", i);
		if ((int64_t)s->pos0 + s->n_tokens > c->max_pos)
			return ds_errf(err, DS_ERR_INVALID, "forward: seq %d reaches position %d > context %d",
				       i, s->pos0 + s->n_tokens, c->max_pos);
		if ((int64_t)s->n_blocks * be->block_size < (int64_t)s->pos0 + s->n_tokens)
			return ds_errf(err, DS_ERR_INVALID, "forward: seq %d block table too short", i);
		for (int j = 0; j < s->n_tokens; j++)
			if (s->tokens[j] < 0 || s->tokens[j] >= c->vocab_size)
				return ds_errf(err, DS_ERR_INVALID, "forward: seq %d token %d out of vocab",
					       i, s->tokens[j]);
		for (int j = 0; j < s->n_blocks; j++)
			if (s->blocks[j] < 0 || s->blocks[j] >= be->n_blocks)
				return ds_errf(err, DS_ERR_INVALID, "forward: seq %d block %d out of pool",
					       i, s->blocks[j]);
		rows += s->n_tokens;
	}
	be->counters.calls[b->path]++;
	be->counters.rows[b->path] += (uint64_t)rows;
	return be->iface->forward(be->ctx, b, err);
}

enum ds_status ds_backend_kv_copy_block(struct ds_backend *be, int src, int dst,
					struct ds_err *err)
{
	if (!be->iface->kv_copy_block)
		return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: kv_copy_block not supported",
			       be->iface->name);
	if (src < 0 || dst < 0 || src >= be->n_blocks || dst >= be->n_blocks)
		return ds_errf(err, DS_ERR_INVALID, "kv_copy_block: block out of pool");
	return be->iface->kv_copy_block(be->ctx, src, dst, err);
}

void ds_backend_describe(struct ds_backend *be, char *buf, size_t len)
{
	if (be->iface->describe)
		be->iface->describe(be->ctx, buf, len);
	else if (len)
		snprintf(buf, len, "%s", be->iface->name);
}

int ds_backend_warm_sizes(struct ds_backend *be, enum ds_path path, int *sizes, int cap)
{
	if (!be->iface->warm_sizes || cap <= 0)
		return 0;
	int n = be->iface->warm_sizes(be->ctx, path, sizes, cap);
	return DS_MAX(0, DS_MIN(n, cap));
}

void ds_backend_free(struct ds_backend *be)
{
	if (be && be->iface) {
		be->iface->free(be->ctx);
		be->iface = NULL;
		be->ctx = NULL;
	}
}
