/* kv_blocks.h - the paged KV block manager and the prefix cache (host-side bookkeeping only;
 * the KV tensors live in the backend).
 *
 * Blocks are reference counted. A block whose count drops to zero goes to one of two free
 * lists: plain (reused first) or cached (still findable by its prefix hash, evicted least
 * recently freed first). Prefix caching covers FULL blocks only, keyed by a hash chain over
 * token ids (hash_i = H(hash_{i-1}, tokens of block i)); each cached block records whether the
 * reference path wrote it, because deterministic requests may reuse only those (DESIGN.md 3).
 * Lookups compare the parent hash and the tokens too, so a 64-bit collision can't alias. */
#ifndef DS_KV_BLOCKS_H
#define DS_KV_BLOCKS_H

#include "ds_common.h"

struct ds_kv_pool;

enum ds_status ds_kv_pool_init(struct ds_kv_pool **out, int n_blocks, int block_size,
                               struct ds_err *err);
void ds_kv_pool_free(struct ds_kv_pool *p);

int ds_kv_pool_n_blocks(const struct ds_kv_pool *p);
int ds_kv_pool_block_size(const struct ds_kv_pool *p);
/* Blocks that an allocation can take now (refcount 0, cached or not). */
int ds_kv_pool_n_free(const struct ds_kv_pool *p);
/* Blocks with refcount > 0. */
int ds_kv_pool_n_used(const struct ds_kv_pool *p);
/* Blocks registered in the prefix cache (any refcount). */
int ds_kv_pool_n_cached(const struct ds_kv_pool *p);
/* Checks every internal invariant (lists, counts, hash chains); DS_ERR_INTERNAL with detail. */
enum ds_status ds_kv_pool_check(const struct ds_kv_pool *p, struct ds_err *err);

/* ---- blocks ---- */

/* Takes a free block (plain first, else evicts the oldest cached one) with refcount 1;
 * -1 when every block is in use. */
int ds_kv_block_alloc(struct ds_kv_pool *p);
void ds_kv_block_ref(struct ds_kv_pool *p, int id);
void ds_kv_block_unref(struct ds_kv_pool *p, int id);
int ds_kv_block_refcount(const struct ds_kv_pool *p, int id);
bool ds_kv_block_is_cached(const struct ds_kv_pool *p, int id);
bool ds_kv_block_is_ref(const struct ds_kv_pool *p, int id);

/* ---- prefix cache ---- */

/* Chain hash of one full block of tokens after a parent hash (0 for the first block). */
uint64_t ds_kv_block_hash(uint64_t parent, const int32_t *tokens, int block_size);
/* Finds the cached block for (parent, tokens); need_ref restricts the hit to reference-written
 * blocks. On a hit the block's refcount is incremented and its id returned; else -1. */
int ds_kv_cache_lookup(struct ds_kv_pool *p, uint64_t parent, const int32_t *tokens, bool need_ref);
/* Registers block id (refcount > 0, full, with KV that is final) under (parent, tokens).
 * When an entry exists already, a reference-written block replaces a fast-written one and
 * otherwise the existing entry stays. Returns true when id is now the cached block. */
bool ds_kv_cache_insert(struct ds_kv_pool *p, int id, uint64_t parent, const int32_t *tokens,
                        bool ref_written);

/* ---- per-sequence block tables ---- */

struct ds_kv_seq {
	int32_t *blocks; /* (n) block ids, position i*block_size starts block i */
	int n, cap;
	int n_cached;   /* leading blocks known to be registered in the cache (or hits) */
	uint64_t chain; /* chain hash after block n_cached-1 (0 when none) */
};

/* Grows the table to cover positions [0, n_pos); false (table unchanged past what it had)
 * when the pool runs out. Allocation failure of the table itself aborts (tiny, bounded). */
bool ds_kv_seq_reserve(struct ds_kv_pool *p, struct ds_kv_seq *s, int n_pos);
/* Drops blocks past the first keep. */
void ds_kv_seq_truncate(struct ds_kv_pool *p, struct ds_kv_seq *s, int keep);
/* Drops every block and frees the table. */
void ds_kv_seq_release(struct ds_kv_pool *p, struct ds_kv_seq *s);
/* On an empty table: takes cached blocks for the longest prefix of tokens[0, n) made of full
 * blocks, at most max_blocks of them. Returns the number of positions covered. */
int ds_kv_seq_match(struct ds_kv_pool *p, struct ds_kv_seq *s, const int32_t *tokens, int n,
                    int max_blocks, bool need_ref);
/* Registers the table's full blocks covering positions [0, n_stable) whose tokens are in
 * tokens[] and whose KV is final. */
void ds_kv_seq_publish(struct ds_kv_pool *p, struct ds_kv_seq *s, const int32_t *tokens,
                       int n_stable, bool ref_written);

#endif
