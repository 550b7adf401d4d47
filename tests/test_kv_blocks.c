/* test_kv_blocks.c - the KV block manager: allocation and exhaustion, reference counts under
 * prefix sharing, reference-written vs fast-written cache entries, eviction order, table
 * truncation, and a random-operation stress run with the invariant checker after every op. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>

#include "kv_blocks.h"
#include "rng.h"

static void check(struct ds_kv_pool *p)
{
	struct ds_err err;
	if (ds_kv_pool_check(p, &err) != DS_OK)
		fail_msg("%s", err.msg);
}

static void test_alloc_free_exhaust(void **state)
{
	(void)state;
	struct ds_kv_pool *p;
	struct ds_err err;
	assert_int_equal(ds_kv_pool_init(&p, 0, 16, &err), DS_ERR_INVALID);
	assert_int_equal(ds_kv_pool_init(&p, 4, 16, &err), DS_OK);
	int ids[4];
	for (int i = 0; i < 4; i++) {
		ids[i] = ds_kv_block_alloc(p);
		assert_true(ids[i] >= 0);
		assert_int_equal(ds_kv_block_refcount(p, ids[i]), 1);
	}
	assert_int_equal(ds_kv_block_alloc(p), -1);
	assert_int_equal(ds_kv_pool_n_used(p), 4);
	assert_int_equal(ds_kv_pool_n_free(p), 0);
	ds_kv_block_ref(p, ids[1]);
	ds_kv_block_unref(p, ids[1]);
	assert_int_equal(ds_kv_pool_n_free(p), 0);
	ds_kv_block_unref(p, ids[1]);
	assert_int_equal(ds_kv_pool_n_free(p), 1);
	assert_int_equal(ds_kv_block_alloc(p), ids[1]);
	for (int i = 0; i < 4; i++)
		ds_kv_block_unref(p, ids[i]);
	assert_int_equal(ds_kv_pool_n_used(p), 0);
	check(p);
	ds_kv_pool_free(p);
}

static void test_seq_reserve_truncate(void **state)
{
	(void)state;
	struct ds_kv_pool *p;
	struct ds_err err;
	assert_int_equal(ds_kv_pool_init(&p, 5, 4, &err), DS_OK);
	struct ds_kv_seq a = {0}, b = {0};
	assert_true(ds_kv_seq_reserve(p, &a, 9)); /* 3 blocks */
	assert_int_equal(a.n, 3);
	assert_true(ds_kv_seq_reserve(p, &a, 12)); /* still 3 */
	assert_int_equal(a.n, 3);
	assert_false(ds_kv_seq_reserve(p, &b, 13)); /* needs 4, 2 free: nothing taken */
	assert_int_equal(b.n, 0);
	assert_int_equal(ds_kv_pool_n_free(p), 2);
	ds_kv_seq_truncate(p, &a, 1);
	assert_int_equal(a.n, 1);
	assert_true(ds_kv_seq_reserve(p, &b, 13));
	check(p);
	ds_kv_seq_release(p, &a);
	ds_kv_seq_release(p, &b);
	assert_int_equal(ds_kv_pool_n_used(p), 0);
	check(p);
	ds_kv_pool_free(p);
}

static void test_prefix_share_refcounts(void **state)
{
	(void)state;
	struct ds_kv_pool *p;
	struct ds_err err;
	assert_int_equal(ds_kv_pool_init(&p, 8, 4, &err), DS_OK);
	int32_t toks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
	struct ds_kv_seq a = {0}, b = {0}, c = {0};
	assert_true(ds_kv_seq_reserve(p, &a, 12));
	/* only positions [0, 10) are final: two full blocks are published */
	ds_kv_seq_publish(p, &a, toks, 10, true);
	assert_int_equal(a.n_cached, 2);
	assert_int_equal(ds_kv_pool_n_cached(p), 2);
	/* b shares both, at most 2 blocks, and needs reference-written ones */
	assert_int_equal(ds_kv_seq_match(p, &b, toks, 12, 3, true), 8);
	assert_int_equal(b.blocks[0], a.blocks[0]);
	assert_int_equal(b.blocks[1], a.blocks[1]);
	assert_int_equal(ds_kv_block_refcount(p, a.blocks[0]), 2);
	assert_int_equal(ds_kv_block_refcount(p, a.blocks[2]), 1);
	/* max_blocks caps the hit (a full prompt still recomputes its last token) */
	assert_int_equal(ds_kv_seq_match(p, &c, toks, 12, 1, true), 4);
	assert_int_equal(ds_kv_block_refcount(p, a.blocks[0]), 3);
	ds_kv_seq_release(p, &c);
	/* a different token in block 0 changes every later chain hash */
	int32_t other[12];
	memcpy(other, toks, sizeof(other));
	other[0] = 99;
	assert_int_equal(ds_kv_seq_match(p, &c, other, 12, 3, false), 0);
	ds_kv_seq_release(p, &c);
	int b0 = a.blocks[0];
	ds_kv_seq_release(p, &a);
	assert_int_equal(ds_kv_block_refcount(p, b0), 1);
	ds_kv_seq_release(p, &b);
	assert_int_equal(ds_kv_block_refcount(p, b0), 0);
	assert_true(ds_kv_block_is_cached(p, b0)); /* still findable after the last user left */
	assert_int_equal(ds_kv_pool_n_free(p), 8);
	check(p);
	/* allocation takes plain blocks before evicting cached ones */
	int got[8];
	for (int i = 0; i < 6; i++) {
		got[i] = ds_kv_block_alloc(p);
		assert_false(ds_kv_block_is_cached(p, got[i]));
	}
	assert_int_equal(ds_kv_pool_n_cached(p), 2);
	got[6] = ds_kv_block_alloc(p);
	got[7] = ds_kv_block_alloc(p);
	assert_int_equal(ds_kv_pool_n_cached(p), 0);
	assert_int_equal(ds_kv_seq_match(p, &c, toks, 12, 3, false), 0);
	for (int i = 0; i < 8; i++)
		ds_kv_block_unref(p, got[i]);
	ds_kv_seq_release(p, &c);
	check(p);
	assert_int_equal(ds_kv_pool_n_used(p), 0);
	ds_kv_pool_free(p);
}

static void test_ref_written_only_for_det(void **state)
{
	(void)state;
	struct ds_kv_pool *p;
	struct ds_err err;
	assert_int_equal(ds_kv_pool_init(&p, 8, 4, &err), DS_OK);
	int32_t toks[8] = {5, 5, 5, 5, 6, 6, 6, 6};
	struct ds_kv_seq fast = {0}, det = {0}, nd = {0}, ref = {0};
	assert_true(ds_kv_seq_reserve(p, &fast, 8));
	ds_kv_seq_publish(p, &fast, toks, 8, false); /* fast-written */
	assert_false(ds_kv_block_is_ref(p, fast.blocks[0]));
	assert_int_equal(ds_kv_seq_match(p, &det, toks, 8, 2, true), 0); /* det: no */
	assert_int_equal(ds_kv_seq_match(p, &nd, toks, 8, 2, false), 8); /* others: yes */
	ds_kv_seq_release(p, &nd);
	ds_kv_seq_release(p, &det);
	/* the reference path writes the same content: it supersedes the fast entry */
	assert_true(ds_kv_seq_reserve(p, &ref, 8));
	ds_kv_seq_publish(p, &ref, toks, 8, true);
	assert_true(ds_kv_block_is_ref(p, ref.blocks[0]));
	assert_false(ds_kv_block_is_cached(p, fast.blocks[0]));
	assert_int_equal(ds_kv_seq_match(p, &det, toks, 8, 2, true), 8);
	assert_int_equal(det.blocks[0], ref.blocks[0]);
	/* a later fast write of the same content does not replace the reference entry */
	struct ds_kv_seq fast2 = {0};
	assert_true(ds_kv_seq_reserve(p, &fast2, 4));
	ds_kv_seq_publish(p, &fast2, toks, 4, false);
	assert_false(ds_kv_block_is_cached(p, fast2.blocks[0]));
	assert_true(ds_kv_block_is_ref(p, ref.blocks[0]));
	check(p);
	ds_kv_seq_release(p, &fast);
	ds_kv_seq_release(p, &fast2);
	ds_kv_seq_release(p, &det);
	ds_kv_seq_release(p, &ref);
	assert_int_equal(ds_kv_pool_n_used(p), 0);
	check(p);
	ds_kv_pool_free(p);
}

static void test_random_ops_no_leak(void **state)
{
	(void)state;
	enum { NB = 24, BS = 4, NS = 6 };
	struct ds_kv_pool *p;
	struct ds_err err;
	assert_int_equal(ds_kv_pool_init(&p, NB, BS, &err), DS_OK);
	struct ds_kv_seq s[NS];
	int32_t toks[NS][64];
	memset(s, 0, sizeof(s));
	uint64_t h = 1;
	for (int it = 0; it < 20000; it++) {
		h = ds_mix64(h + it);
		int i = (int)(h % NS);
		int op = (int)((h >> 8) % 5);
		if (op == 0) {
			ds_kv_seq_release(p, &s[i]);
			/* few distinct token streams so that prefixes repeat */
			for (int k = 0; k < 64; k++)
				toks[i][k] = (int32_t)((k * 3 + (int)((h >> 16) % 2)) % 7);
			ds_kv_seq_match(p, &s[i], toks[i], (int)((h >> 20) % 64), 16,
			                (h >> 30) & 1);
		} else if (op == 1 || op == 2) {
			int n = (int)((h >> 24) % 64) + 1;
			if (ds_kv_seq_reserve(p, &s[i], n))
				ds_kv_seq_publish(p, &s[i], toks[i], n, (h >> 40) & 1);
		} else if (op == 3) {
			int keep = s[i].n_cached + (int)((h >> 32) % 3);
			ds_kv_seq_truncate(p, &s[i], DS_MIN(keep, s[i].n));
		} else {
			ds_kv_seq_release(p, &s[i]);
		}
		int refs = 0;
		for (int k = 0; k < NS; k++)
			refs += s[k].n;
		int held = 0;
		for (int b = 0; b < NB; b++)
			held += ds_kv_block_refcount(p, b);
		assert_int_equal(held, refs);
		check(p);
	}
	for (int i = 0; i < NS; i++)
		ds_kv_seq_release(p, &s[i]);
	assert_int_equal(ds_kv_pool_n_used(p), 0);
	assert_int_equal(ds_kv_pool_n_free(p), NB);
	check(p);
	ds_kv_pool_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_alloc_free_exhaust),
	    cmocka_unit_test(test_seq_reserve_truncate),
	    cmocka_unit_test(test_prefix_share_refcounts),
	    cmocka_unit_test(test_ref_written_only_for_det),
	    cmocka_unit_test(test_random_ops_no_leak),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
