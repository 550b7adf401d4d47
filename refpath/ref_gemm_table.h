/* ref_gemm_table.h - which reference GEMM variant (kernels/kernels.h, ds_k_gemm_ref_variant)
 * the CUDA reference path uses for each weight shape (N, K).
 *
 * Key decision: the variant is a function of the weight's (N, K) only, never of M, and the
 * table is fixed for the life of a process: a different variant gives different (equally
 * invariant) bits, so changing it while a server runs would break replay. Built-in defaults
 * (set from bench_gemm), optionally overridden for experiments by a spec string such as
 * "6144x4096:7,4096x4096:8" (the env variable DS_REF_GEMM_TABLE). Pure C, no CUDA. */
#ifndef DS_REF_GEMM_TABLE_H
#define DS_REF_GEMM_TABLE_H

#include "ds_common.h"

#define DS_REF_GEMM_TABLE_MAX 32
#define DS_REF_GEMM_TABLE_ENV "DS_REF_GEMM_TABLE"

struct ds_ref_gemm_pick {
	int n, k, variant;
};

struct ds_ref_gemm_table {
	int n_picks;
	struct ds_ref_gemm_pick picks[DS_REF_GEMM_TABLE_MAX];
};

/* The built-in defaults, then the entries of spec ("NxK:variant" separated by commas, spaces
 * allowed around them; NULL or empty: none); an entry replaces the pick of the same shape.
 * Variants must lie in 0 .. n_variants - 1. On a malformed spec: DS_ERR_INVALID naming
 * DS_REF_GEMM_TABLE, the entry and what is wrong; *t is then the defaults alone. */
enum ds_status ds_ref_gemm_table_init(struct ds_ref_gemm_table *t, const char *spec, int n_variants,
                                      struct ds_err *err);

/* The variant for weight shape (N, K); 0 for shapes not in the table. */
int ds_ref_gemm_table_variant(const struct ds_ref_gemm_table *t, int N, int K);

#endif
