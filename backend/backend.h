/* backend.h - the one interface between the scheduler and compute (DESIGN.md section 6).
 *
 * A backend owns a paged KV cache and runs forward passes over a batch of sequences, each with
 * new tokens at absolute positions and a block table, on the fast or the reference path. It
 * samples every output row on its own side (the CUDA backend copies only token ids back);
 * full logits are optional. The scheduler never sees a CUDA header: it sees this table.
 *
 * KV cache: n_blocks blocks of block_size positions. Block table entry i of a sequence holds
 * positions [i*block_size, (i+1)*block_size). A forward over tokens at [pos0, pos0+n) reads
 * KV for [0, pos0) from the cache and writes KV for [pos0, pos0+n) into it. */
#ifndef DS_BACKEND_H
#define DS_BACKEND_H

#include "ds_common.h"
#include "model.h"
#include "sample.h"

enum ds_path { DS_PATH_FAST = 0, DS_PATH_REF = 1 };
#define DS_N_PATHS 2

struct ds_fwd_seq {
	const int32_t *tokens;  /* (n_tokens) input ids */
	int n_tokens;           /* >= 1 */
	int pos0;               /* absolute position of tokens[0] */
	const int32_t *blocks;  /* (n_blocks) block ids */
	int n_blocks;           /* n_blocks * block_size >= pos0 + n_tokens */
	bool all_rows;          /* output every row (verify/decode windows), else only the last */
	struct ds_sample_params sp; /* sampling for this sequence's output rows */
	/* (added with the scheduler's step policy) a request without the determinism contract:
	 * its KV may mix both paths' writes, since a DVR step may run it on either path. Backends
	 * compute nothing differently; the test mock uses it to tell that allowed mix from a
	 * reference pass reading fast-written KV of a deterministic request (a bug). */
	bool mixed_kv;
};

/* One output row: row r of a sequence produced the token at position pos0 + r + 1. */
struct ds_fwd_row {
	int32_t token;
	float logprob;
	float margin; /* top-1 minus top-2 raw logit */
};

struct ds_fwd_batch {
	enum ds_path path;
	const struct ds_fwd_seq *seqs; /* (n_seqs) */
	int n_seqs;
	struct ds_fwd_row *rows;       /* (n_out_rows) required; sequences in order */
	float *logits;                 /* (n_out_rows, vocab) optional; NULL = not wanted */
};

/* Output rows a batch produces. */
int ds_fwd_batch_out_rows(const struct ds_fwd_batch *b);

struct ds_backend_i {
	const char *name;
	/* Allocates the KV pool. Called once before any forward. DS_ERR_NOMEM when it can't. */
	enum ds_status (*kv_init)(void *ctx, int n_blocks, int block_size, struct ds_err *err);
	/* Runs one batch; see struct ds_fwd_batch. */
	enum ds_status (*forward)(void *ctx, const struct ds_fwd_batch *b, struct ds_err *err);
	/* Optional: copies a KV block (copy-on-write for shared prefixes). */
	enum ds_status (*kv_copy_block)(void *ctx, int src, int dst, struct ds_err *err);
	/* Optional: changes the worker thread count (CPU). */
	enum ds_status (*set_threads)(void *ctx, int n_threads, struct ds_err *err);
	/* Optional: the pass sizes (tokens) on `path` that the backend sets something up for on
	 * first use besides the powers of two (a CUDA graph bucket), ascending, at most cap of
	 * them into sizes; returns how many. The engine's warm-up runs each. */
	int (*warm_sizes)(void *ctx, enum ds_path path, int *sizes, int cap);
	/* Optional: a short description (device name, threads) for ServerInfo. */
	void (*describe)(void *ctx, char *buf, size_t len);
	void (*free)(void *ctx);
};

struct ds_backend_counters {
	uint64_t calls[DS_N_PATHS]; /* forward calls per path */
	uint64_t rows[DS_N_PATHS];  /* input tokens per path */
};

struct ds_backend {
	const struct ds_backend_i *iface;
	void *ctx;
	const struct ds_model *model; /* not owned */
	int n_blocks, block_size;     /* set by ds_backend_kv_init */
	struct ds_backend_counters counters;
};

/* ---- thin wrappers: check arguments, count calls, dispatch ---- */

enum ds_status ds_backend_kv_init(struct ds_backend *be, int n_blocks, int block_size,
				  struct ds_err *err);
/* Validates every sequence (token ids < vocab, blocks in range, positions < max_pos) and
 * returns DS_ERR_INVALID without calling the backend when anything is off. */
enum ds_status ds_backend_forward(struct ds_backend *be, const struct ds_fwd_batch *b,
				  struct ds_err *err);
enum ds_status ds_backend_kv_copy_block(struct ds_backend *be, int src, int dst,
					struct ds_err *err);
void ds_backend_describe(struct ds_backend *be, char *buf, size_t len);
/* The backend's extra warm-up sizes on a path (iface warm_sizes); 0 when it has none. */
int ds_backend_warm_sizes(struct ds_backend *be, enum ds_path path, int *sizes, int cap);
void ds_backend_free(struct ds_backend *be);

/* ---- constructors ---- */

/* CPU backend (fastpath/ + refpath/). n_threads <= 0 picks the number of online CPUs.
 * The KV pool takes the model's weight type (bf16; f32 for a model loaded as f32). */
enum ds_status ds_backend_cpu_init(struct ds_backend *be, const struct ds_model *m,
				   int n_threads, struct ds_err *err);

/* added (f32 precision): the CPU backend with an explicit KV element type, whatever the weight
 * type: bf16 (rounded on write) or f32. Both paths run either; the reference path's reduction
 * orders do not depend on either type. DS_ERR_INVALID for an unknown type, or for an f32
 * model that is deferred (synthetic weights are generated in bf16). */
enum ds_status ds_backend_cpu_init_as(struct ds_backend *be, const struct ds_model *m,
				      int n_threads, enum ds_dtype kv_dtype, struct ds_err *err);

/* CUDA backend; DS_ERR_UNSUPPORTED when built without CUDA. */
enum ds_status ds_backend_cuda_init(struct ds_backend *be, const struct ds_model *m,
				    int device, struct ds_err *err);

#endif
