/* ref_gemm_table.c - the reference GEMM variant per weight shape (N, K): built-in defaults
 * plus an optional "NxK:variant,..." override (ref_gemm_table.h).
 *
 * Key decision: the parser is strict (every character accounted for, numbers range-checked):
 * a typo in an experiment's table must fail loudly, not silently fall back to variant 0. */
#include "ref_gemm_table.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Default variant per shape; every other shape uses variant 0. Set these from bench_gemm's
 * per-variant table on the target GPU and from end-to-end runs: the split-K family (S = 2,
 * variant 7) on the down projection ran the 256-row decode pass faster, but its prompt-carrying
 * steps (M ~ 2048) slower, and dvr-10% fell (0.968 / 0.966 against 0.971 / 0.977 in the same
 * calls; README, reference GEMM), so every shape stays on the S = 1 family. */
static const struct ds_ref_gemm_pick ref_gemm_defaults[] = {
    /* llama3-8b */
    {6144, 4096, 0},   /* qkv_proj */
    {4096, 4096, 0},   /* o_proj */
    {28672, 4096, 0},  /* gate_up_proj */
    {4096, 14336, 0},  /* down_proj */
    {128256, 4096, 0}, /* lm_head */
};

static void table_set(struct ds_ref_gemm_table *t, int n, int k, int v)
{
	for (int i = 0; i < t->n_picks; i++)
		if (t->picks[i].n == n && t->picks[i].k == k) {
			t->picks[i].variant = v;
			return;
		}
	DS_ASSERT(t->n_picks < DS_REF_GEMM_TABLE_MAX);
	t->picks[t->n_picks++] = (struct ds_ref_gemm_pick){n, k, v};
}

static void table_defaults(struct ds_ref_gemm_table *t)
{
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < DS_ARRAY_LEN(ref_gemm_defaults); i++)
		table_set(t, ref_gemm_defaults[i].n, ref_gemm_defaults[i].k,
		          ref_gemm_defaults[i].variant);
}

/* A decimal int in [lo, INT_MAX] at *p (no sign), advancing *p; false if there is none. */
static bool parse_int(const char **p, int lo, int *out)
{
	if (!isdigit((unsigned char)**p))
		return false;
	errno = 0;
	char *end;
	long v = strtol(*p, &end, 10);
	if (errno || v < lo || v > INT_MAX)
		return false;
	*out = (int)v;
	*p = end;
	return true;
}

static const char *skip_space(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

/* One "NxK:V" entry at *p (spaces around it skipped), up to the next comma or the end. */
static enum ds_status parse_entry(const char **pp, int idx, int n_variants, int *n, int *k, int *v,
                                  struct ds_err *err)
{
	const char *start = skip_space(*pp), *p = start;
	size_t len = strcspn(start, ",");
	int ok = parse_int(&p, 1, n) && (*p == 'x' || *p == 'X');
	if (ok) {
		p++;
		ok = parse_int(&p, 1, k) && *p == ':';
	}
	if (ok) {
		p++;
		ok = parse_int(&p, 0, v);
	}
	if (ok)
		p = skip_space(p);
	if (!ok || (*p != ',' && *p != '\0'))
		return ds_errf(err, DS_ERR_INVALID,
		               "%s: entry %d \"%.*s\": expected N x K : variant, e.g. "
		               "\"6144x4096:7\"",
		               DS_REF_GEMM_TABLE_ENV, idx, (int)DS_MIN(len, 64), start);
	if (*v >= n_variants)
		return ds_errf(
		    err, DS_ERR_INVALID, "%s: entry %d \"%.*s\": variant %d out of range 0..%d",
		    DS_REF_GEMM_TABLE_ENV, idx, (int)DS_MIN(len, 64), start, *v, n_variants - 1);
	*pp = p;
	return DS_OK;
}

enum ds_status ds_ref_gemm_table_init(struct ds_ref_gemm_table *t, const char *spec, int n_variants,
                                      struct ds_err *err)
{
	table_defaults(t);
	if (!spec || !*skip_space(spec))
		return DS_OK;
	struct ds_ref_gemm_table work = *t;
	const char *p = spec;
	for (int idx = 1;; idx++) {
		int n = 0, k = 0, v = 0;
		enum ds_status rv = parse_entry(&p, idx, n_variants, &n, &k, &v, err);
		if (rv != DS_OK)
			return rv;
		bool known = false;
		for (int i = 0; i < work.n_picks; i++)
			known |= work.picks[i].n == n && work.picks[i].k == k;
		if (!known && work.n_picks == DS_REF_GEMM_TABLE_MAX)
			return ds_errf(err, DS_ERR_INVALID, "%s: more than %d shapes",
			               DS_REF_GEMM_TABLE_ENV, DS_REF_GEMM_TABLE_MAX);
		table_set(&work, n, k, v);
		if (*p == '\0')
			break;
		p++; /* the comma */
	}
	*t = work;
	return DS_OK;
}

int ds_ref_gemm_table_variant(const struct ds_ref_gemm_table *t, int N, int K)
{
	for (int i = 0; i < t->n_picks; i++)
		if (t->picks[i].n == N && t->picks[i].k == K)
			return t->picks[i].variant;
	return 0;
}
