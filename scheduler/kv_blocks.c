/* kv_blocks.c - block pool, free lists and the prefix-cache hash table (see kv_blocks.h).
 *
 * Free lists are intrusive doubly linked lists over block indices; the hash table chains
 * through a per-block next index. Everything is O(1) per block except hash-bucket walks. */
#include "kv_blocks.h"

#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

enum { LIST_NONE = 0, LIST_PLAIN = 1, LIST_CACHED = 2 };

struct kv_list {
	int head, tail, n;
};

struct kv_block {
	int refcnt;
	int list;       /* LIST_* while refcnt == 0 */
	int prev, next; /* free-list links */
	bool cached;    /* present in the hash table */
	bool ref;       /* written by the reference path (when cached) */
	int hnext;      /* hash chain */
	uint64_t hash, parent;
};

struct ds_kv_pool {
	int n_blocks, block_size;
	struct kv_block *b; /* (n_blocks) */
	int32_t *tokens;    /* (n_blocks, block_size): tokens of cached blocks */
	int *bucket;        /* (n_bucket) head block per bucket or -1 */
	int n_bucket;       /* power of two */
	struct kv_list plain, cached;
	int n_used, n_cached;
};

/* ---- free lists ---- */

static void list_push_back(struct ds_kv_pool *p, struct kv_list *l, int which, int id)
{
	struct kv_block *b = &p->b[id];
	b->list = which;
	b->next = -1;
	b->prev = l->tail;
	if (l->tail >= 0)
		p->b[l->tail].next = id;
	else
		l->head = id;
	l->tail = id;
	l->n++;
}

static void list_remove(struct ds_kv_pool *p, int id)
{
	struct kv_block *b = &p->b[id];
	struct kv_list *l = b->list == LIST_PLAIN ? &p->plain : &p->cached;
	DS_ASSERT(b->list != LIST_NONE);
	if (b->prev >= 0)
		p->b[b->prev].next = b->next;
	else
		l->head = b->next;
	if (b->next >= 0)
		p->b[b->next].prev = b->prev;
	else
		l->tail = b->prev;
	b->prev = b->next = -1;
	b->list = LIST_NONE;
	l->n--;
}

/* ---- hash table ---- */

static int bucket_of(const struct ds_kv_pool *p, uint64_t h)
{
	return (int)(h & (uint64_t)(p->n_bucket - 1));
}

static void hash_remove(struct ds_kv_pool *p, int id)
{
	struct kv_block *b = &p->b[id];
	DS_ASSERT(b->cached);
	int *link = &p->bucket[bucket_of(p, b->hash)];
	while (*link != id) {
		DS_ASSERT(*link >= 0);
		link = &p->b[*link].hnext;
	}
	*link = b->hnext;
	b->hnext = -1;
	b->cached = false;
	b->ref = false;
	p->n_cached--;
}

static int hash_find(const struct ds_kv_pool *p, uint64_t h, uint64_t parent, const int32_t *tokens)
{
	for (int id = p->bucket[bucket_of(p, h)]; id >= 0; id = p->b[id].hnext) {
		const struct kv_block *b = &p->b[id];
		if (b->hash == h && b->parent == parent &&
		    memcmp(p->tokens + (size_t)id * p->block_size, tokens,
		           (size_t)p->block_size * sizeof(int32_t)) == 0)
			return id;
	}
	return -1;
}

/* ---- pool ---- */

enum ds_status ds_kv_pool_init(struct ds_kv_pool **out, int n_blocks, int block_size,
                               struct ds_err *err)
{
	*out = NULL;
	if (n_blocks <= 0 || block_size <= 0 || n_blocks > (1 << 24) || block_size > (1 << 16))
		return ds_errf(err, DS_ERR_INVALID,
		               "kv pool: n_blocks %d / block_size %d out of range", n_blocks,
		               block_size);
	struct ds_kv_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return ds_errf(err, DS_ERR_NOMEM, "kv pool: out of memory");
	p->n_blocks = n_blocks;
	p->block_size = block_size;
	p->n_bucket = 1;
	while (p->n_bucket < 2 * n_blocks)
		p->n_bucket *= 2;
	p->b = calloc((size_t)n_blocks, sizeof(*p->b));
	p->tokens = malloc((size_t)n_blocks * (size_t)block_size * sizeof(int32_t));
	p->bucket = malloc((size_t)p->n_bucket * sizeof(int));
	if (!p->b || !p->tokens || !p->bucket) {
		ds_kv_pool_free(p);
		return ds_errf(err, DS_ERR_NOMEM, "kv pool: out of memory for %d blocks", n_blocks);
	}
	for (int i = 0; i < p->n_bucket; i++)
		p->bucket[i] = -1;
	p->plain = p->cached = (struct kv_list){-1, -1, 0};
	for (int i = 0; i < n_blocks; i++) {
		p->b[i].hnext = -1;
		list_push_back(p, &p->plain, LIST_PLAIN, i);
	}
	*out = p;
	return DS_OK;
}

void ds_kv_pool_free(struct ds_kv_pool *p)
{
	if (!p)
		return;
	free(p->b);
	free(p->tokens);
	free(p->bucket);
	free(p);
}

int ds_kv_pool_n_blocks(const struct ds_kv_pool *p)
{
	return p->n_blocks;
}
int ds_kv_pool_block_size(const struct ds_kv_pool *p)
{
	return p->block_size;
}
int ds_kv_pool_n_free(const struct ds_kv_pool *p)
{
	return p->plain.n + p->cached.n;
}
int ds_kv_pool_n_used(const struct ds_kv_pool *p)
{
	return p->n_used;
}
int ds_kv_pool_n_cached(const struct ds_kv_pool *p)
{
	return p->n_cached;
}

static enum ds_status check_list(const struct ds_kv_pool *p, const struct kv_list *l, int which,
                                 struct ds_err *err)
{
	int n = 0, prev = -1;
	for (int id = l->head; id >= 0; id = p->b[id].next) {
		const struct kv_block *b = &p->b[id];
		if (b->list != which || b->refcnt != 0 || b->prev != prev || ++n > p->n_blocks)
			return ds_errf(err, DS_ERR_INTERNAL,
			               "kv pool: free list %d broken at block %d", which, id);
		if ((which == LIST_CACHED) != b->cached)
			return ds_errf(err, DS_ERR_INTERNAL,
			               "kv pool: block %d on list %d, cached %d", id, which,
			               b->cached);
		prev = id;
	}
	if (n != l->n || prev != l->tail)
		return ds_errf(err, DS_ERR_INTERNAL, "kv pool: free list %d counts %d, holds %d",
		               which, l->n, n);
	return DS_OK;
}

enum ds_status ds_kv_pool_check(const struct ds_kv_pool *p, struct ds_err *err)
{
	int used = 0, cached = 0;
	for (int i = 0; i < p->n_blocks; i++) {
		const struct kv_block *b = &p->b[i];
		if (b->refcnt < 0)
			return ds_errf(err, DS_ERR_INTERNAL, "kv pool: block %d refcount %d", i,
			               b->refcnt);
		if ((b->refcnt > 0) != (b->list == LIST_NONE))
			return ds_errf(err, DS_ERR_INTERNAL,
			               "kv pool: block %d refcount %d on list %d", i, b->refcnt,
			               b->list);
		used += b->refcnt > 0;
		if (b->cached) {
			cached++;
			if (hash_find(p, b->hash, b->parent,
			              p->tokens + (size_t)i * p->block_size) != i)
				return ds_errf(err, DS_ERR_INTERNAL,
				               "kv pool: cached block %d not findable", i);
		}
	}
	if (used != p->n_used || cached != p->n_cached)
		return ds_errf(err, DS_ERR_INTERNAL, "kv pool: used %d/%d cached %d/%d", used,
		               p->n_used, cached, p->n_cached);
	enum ds_status rv = check_list(p, &p->plain, LIST_PLAIN, err);
	if (rv == DS_OK)
		rv = check_list(p, &p->cached, LIST_CACHED, err);
	if (rv == DS_OK && p->plain.n + p->cached.n + used != p->n_blocks)
		rv = ds_errf(err, DS_ERR_INTERNAL, "kv pool: %d free + %d used != %d",
		             p->plain.n + p->cached.n, used, p->n_blocks);
	return rv;
}

/* ---- blocks ---- */

int ds_kv_block_alloc(struct ds_kv_pool *p)
{
	int id = p->plain.head;
	if (id < 0)
		id = p->cached.head; /* evict the least recently freed cached block */
	if (id < 0)
		return -1;
	list_remove(p, id);
	if (p->b[id].cached)
		hash_remove(p, id);
	p->b[id].refcnt = 1;
	p->n_used++;
	return id;
}

void ds_kv_block_ref(struct ds_kv_pool *p, int id)
{
	DS_ASSERT(id >= 0 && id < p->n_blocks);
	struct kv_block *b = &p->b[id];
	if (b->refcnt == 0) {
		list_remove(p, id);
		p->n_used++;
	}
	b->refcnt++;
}

void ds_kv_block_unref(struct ds_kv_pool *p, int id)
{
	DS_ASSERT(id >= 0 && id < p->n_blocks);
	struct kv_block *b = &p->b[id];
	DS_ASSERT(b->refcnt > 0);
	if (--b->refcnt == 0) {
		p->n_used--;
		if (b->cached)
			list_push_back(p, &p->cached, LIST_CACHED, id);
		else
			list_push_back(p, &p->plain, LIST_PLAIN, id);
	}
}

int ds_kv_block_refcount(const struct ds_kv_pool *p, int id)
{
	return p->b[id].refcnt;
}
bool ds_kv_block_is_cached(const struct ds_kv_pool *p, int id)
{
	return p->b[id].cached;
}
bool ds_kv_block_is_ref(const struct ds_kv_pool *p, int id)
{
	return p->b[id].cached && p->b[id].ref;
}

/* ---- prefix cache ---- */

uint64_t ds_kv_block_hash(uint64_t parent, const int32_t *tokens, int block_size)
{
	return XXH3_64bits_withSeed(tokens, (size_t)block_size * sizeof(int32_t), parent);
}

int ds_kv_cache_lookup(struct ds_kv_pool *p, uint64_t parent, const int32_t *tokens, bool need_ref)
{
	uint64_t h = ds_kv_block_hash(parent, tokens, p->block_size);
	int id = hash_find(p, h, parent, tokens);
	if (id < 0 || (need_ref && !p->b[id].ref))
		return -1;
	ds_kv_block_ref(p, id);
	return id;
}

bool ds_kv_cache_insert(struct ds_kv_pool *p, int id, uint64_t parent, const int32_t *tokens,
                        bool ref_written)
{
	struct kv_block *b = &p->b[id];
	DS_ASSERT(b->refcnt > 0);
	if (b->cached)
		return true;
	uint64_t h = ds_kv_block_hash(parent, tokens, p->block_size);
	int old = hash_find(p, h, parent, tokens);
	if (old >= 0) {
		if (p->b[old].ref || !ref_written)
			return false;
		/* a reference-written block supersedes a fast-written one */
		hash_remove(p, old);
		if (p->b[old].refcnt == 0) {
			list_remove(p, old);
			list_push_back(p, &p->plain, LIST_PLAIN, old);
		}
	}
	b->cached = true;
	b->ref = ref_written;
	b->hash = h;
	b->parent = parent;
	memcpy(p->tokens + (size_t)id * p->block_size, tokens,
	       (size_t)p->block_size * sizeof(int32_t));
	int bk = bucket_of(p, h);
	b->hnext = p->bucket[bk];
	p->bucket[bk] = id;
	p->n_cached++;
	return true;
}

/* ---- per-sequence tables ---- */

static void seq_grow(struct ds_kv_seq *s, int need)
{
	if (need <= s->cap)
		return;
	int cap = s->cap ? s->cap : 8;
	while (cap < need)
		cap *= 2;
	int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof(int32_t));
	if (!nb)
		DS_ABORT("kv seq: out of memory for a %d-entry block table", cap);
	s->blocks = nb;
	s->cap = cap;
}

bool ds_kv_seq_reserve(struct ds_kv_pool *p, struct ds_kv_seq *s, int n_pos)
{
	int need = (n_pos + p->block_size - 1) / p->block_size;
	if (need <= s->n)
		return true;
	if (need - s->n > ds_kv_pool_n_free(p))
		return false;
	seq_grow(s, need);
	while (s->n < need) {
		int id = ds_kv_block_alloc(p);
		DS_ASSERT(id >= 0);
		s->blocks[s->n++] = id;
	}
	return true;
}

void ds_kv_seq_truncate(struct ds_kv_pool *p, struct ds_kv_seq *s, int keep)
{
	DS_ASSERT(keep >= s->n_cached);
	while (s->n > keep)
		ds_kv_block_unref(p, s->blocks[--s->n]);
}

void ds_kv_seq_release(struct ds_kv_pool *p, struct ds_kv_seq *s)
{
	while (s->n > 0)
		ds_kv_block_unref(p, s->blocks[--s->n]);
	free(s->blocks);
	*s = (struct ds_kv_seq){0};
}

int ds_kv_seq_match(struct ds_kv_pool *p, struct ds_kv_seq *s, const int32_t *tokens, int n,
                    int max_blocks, bool need_ref)
{
	DS_ASSERT(s->n == 0);
	int bs = p->block_size;
	uint64_t chain = 0;
	int hits = 0;
	while (hits < max_blocks && (hits + 1) * bs <= n) {
		const int32_t *t = tokens + (size_t)hits * bs;
		int id = ds_kv_cache_lookup(p, chain, t, need_ref);
		if (id < 0)
			break;
		seq_grow(s, hits + 1);
		s->blocks[hits++] = id;
		s->n = hits;
		chain = ds_kv_block_hash(chain, t, bs);
	}
	s->n_cached = hits;
	s->chain = chain;
	return hits * bs;
}

void ds_kv_seq_publish(struct ds_kv_pool *p, struct ds_kv_seq *s, const int32_t *tokens,
                       int n_stable, bool ref_written)
{
	int bs = p->block_size;
	while (s->n_cached < s->n && (s->n_cached + 1) * bs <= n_stable) {
		const int32_t *t = tokens + (size_t)s->n_cached * bs;
		ds_kv_cache_insert(p, s->blocks[s->n_cached], s->chain, t, ref_written);
		s->chain = ds_kv_block_hash(s->chain, t, bs);
		s->n_cached++;
	}
}
