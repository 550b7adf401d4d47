/* cuda_internal.h - private state of the CUDA backend, shared by its driver
 * (backend/cuda_backend.c, backend/cuda_weights.c) and its two paths (fastpath/cuda_fast.c,
 * refpath/cuda_ref.c).
 *
 * The driver runs the same Llama-family layer sequence for both paths; only the GEMM and the
 * attention differ (struct ds_cuda_path_ops). Everything else (embedding, RMSNorm with the
 * residual add, q/k/v epilogue with RoPE and the paged KV write, SiLU*mul, sampling) is one
 * row at a time with a fixed reduction tree, so the paths share those kernels. A forward call is
 * cut into passes of at most cap_tokens tokens and cap_rows output rows; every buffer below is
 * allocated once at kv_init, so pointers never move and decode passes can be graph-captured. */
#ifndef DS_CUDA_INTERNAL_H
#define DS_CUDA_INTERNAL_H

#include "backend.h"
#include "ds_cuda.h"
#include "kernels.h"
#include "ref_gemm_table.h"

#include <cublasLt.h>

#define DS_CUDA_MAX_DECODE 256 /* largest graph-captured decode batch */
#define DS_CUDA_N_BUCKETS 9    /* 1, 2, 4, ..., 256 */
#define DS_CUDA_ALGO_CACHE 128

struct ds_cuda_layer {
	uint16_t *attn_norm; /* (hidden) */
	uint16_t *wqkv;      /* (q_dim + 2 kv_dim, hidden): wq, wk, wv stacked */
	uint16_t *bqkv;      /* (q_dim + 2 kv_dim) or NULL */
	uint16_t *q_norm;    /* (head_dim) or NULL */
	uint16_t *k_norm;    /* (head_dim) or NULL */
	uint16_t *wo;        /* (hidden, q_dim) */
	uint16_t *ffn_norm;  /* (hidden) */
	uint16_t *w_gu;      /* (2 ffn, hidden): gate, up stacked */
	uint16_t *w_down;    /* (hidden, ffn) */
};

struct ds_cuda_algo {
	int M, N, K;
	bool ok;
	cublasLtMatmulAlgo_t algo;
};

struct ds_cuda_fast_plans; /* private to fastpath/cuda_fast.c */

/* One tuned split-K partials GEMM (fast path): C's `s` partial sums over K slices. */
#define DS_CUDA_PARTS_CACHE 32
struct ds_cuda_parts_algo {
	int M, N, K, s;
	bool ok;
	cublasLtMatmulAlgo_t algo;
};

/* The fast path's GEMM choice for one (M bucket, N, K), timed on first use (cuda_fast.c). */
#define DS_CUDA_PICK_CACHE 128
enum ds_cuda_gemm_kind {
	DS_CUDA_GEMM_LT = 0,      /* cuBLASLt, its own per-M algorithm cache */
	DS_CUDA_GEMM_GEMV,        /* ds_k_gemv (M <= DS_K_GEMV_MAX_M) */
	DS_CUDA_GEMM_SKINNY,      /* ds_k_skinny, variant */
	DS_CUDA_GEMM_SKINNY_SILU, /* silu picks: ds_k_skinny_silu, variant (SiLU*mul fused) */
	DS_CUDA_GEMM_SPLIT,       /* silu picks: ds_k_silu_mul, then the plain pick of the shape */
	DS_CUDA_GEMM_REF_SILU,    /* gu picks: ds_k_gemm_ref_silu_variant, variant */
	DS_CUDA_GEMM_LT_PARTS,    /* parts picks: cuBLASLt over `parts` K slices, one partial
	                           * sum each (slot `variant` of ds_cuda_fast.parts) */
};
struct ds_cuda_pick {
	int mb, N, K; /* mb: M for M <= 4, else the next power of two */
	bool silu;    /* key: the down projection's choice (A = silu_mul of a gate/up buffer) */
	bool gu;      /* key: the gate/up choice: kind SPLIT (its plain pick, then ds_k_silu_mul) or
	               * REF_SILU (the reference kernel with SiLU*mul fused; ms_skinny its best time) */
	bool sums;    /* key: C is the RMSNorm's delta (dlt), which may take split-K partials */
	int parts;    /* kind LT_PARTS: the number of K slices (partial sums) */
	bool ok;
	int kind, variant;
	int M_timed; /* the M the candidates were timed at */
	/* best time of each candidate family at M_timed, L2 flushed before each run (ms;
	 * INFINITY where not a candidate); kind/variant is the argmin. silu picks: ms_skinny is
	 * the best fused variant, ms_split ds_k_silu_mul plus the plain pick, timed together */
	float ms_lt, ms_gemv, ms_skinny, ms_split, ms_parts, ms_best;
	int skinny_best;                        /* fastest skinny variant */
	float ms_variant[DS_K_SKINNY_VARIANTS]; /* every skinny (silu: fused) variant's time */
	int n_rejected; /* candidates whose result disagreed with cuBLASLt's (never picked) */
};

/* The step configurations a decode graph is tuned over (fastpath/cuda_fast_graphs.c): skinny
 * GEMMs, PDL and the fused q/k/v epilogue on or off, and with skinny GEMMs under PDL, how many
 * iterations of weights they stage before the wait (stage); and the fused decode layers (mega:
 * every layer in one kernel, kernels/mega.cu), with PDL on or off for the kernels after it. */
#define DS_CUDA_N_STEP_CFGS 22
struct ds_cuda_step_cfg {
	bool skinny, pdl, fuse;
	int stage;
	bool mega;
	bool merge;  /* ds_cuda_fast.attn_merge */
	bool stream; /* ds_cuda_fast.stream */
};
extern const struct ds_cuda_step_cfg ds_cuda_fast_step_cfgs[DS_CUDA_N_STEP_CFGS];

/* Fast path state (fastpath/cuda_fast.c). */
struct ds_cuda_fast {
	cublasLtHandle_t lt;
	void *workspace;
	size_t ws_bytes;
	struct ds_cuda_algo cache[DS_CUDA_ALGO_CACHE];
	int n_cache, next_evict;
	struct ds_cuda_fast_plans *plans; /* (DS_CUDA_ALGO_CACHE) descriptors, parallel to cache */
	cudaGraphExec_t graph[DS_CUDA_N_BUCKETS];
	bool warm[DS_CUDA_N_BUCKETS];
	bool use_graphs;
	struct ds_cuda_pick picks[DS_CUDA_PICK_CACHE]; /* GEMM choice per (M bucket, N, K) */
	int n_picks, next_pick_evict;
	/* GEMMs into the RMSNorm's delta may write split-K partials that the RMSNorm sums (no
	 * reduce kernel): cuBLASLt over K slices as a strided batch, timed against the other
	 * candidates (DS_FAST_LT_PARTS=0: off). parts: the tuned (M, N, K, slices) algorithms */
	bool lt_parts;
	struct ds_cuda_parts_algo parts[DS_CUDA_PARTS_CACHE];
	int n_parts;
	/* skinny GEMM and GEMV are timed candidates per shape (DS_CUDA_SKINNY=0 or off: untimed,
	 * the GEMV for 1..4 rows and cuBLASLt above) */
	bool skinny;
	bool pdl; /* programmatic dependent launch in the decode chain (default; DS_CUDA_PDL=0: off) */
	/* decode GEMMs of up to DS_K_STREAM_MAX_M rows but the LM head on the streaming GEMM
	 * (ds_k_stream_gemm), whose weights flow before the previous kernel ends under PDL:
	 * DS_FAST_STREAM=1 sets it, =tune leaves it to the graph tuning (stream_tune), unset or 0
	 * rules it out */
	bool stream, stream_tune;
	int stream_variant; /* ds_k_stream_gemm's variant (DS_FAST_STREAM_VARIANT, default 0) */
	/* decode passes: the q/k/v epilogue fused into the tensor-core attention kernel
	 * (ds_k_attn_decode_qkv; DS_FAST_FUSE_QKV=0: off) */
	bool fuse_qkv;
	/* skinny GEMMs stage this many iterations of weights in shared memory before their PDL wait
	 * (ds_k_skinny's stage; DS_FAST_SKINNY_STAGE=n, default 0 outside the graph tuning, which
	 * tries 0-3 unless DS_FAST_SKINNY_STAGE=0: stage_tune) */
	int skinny_stage;
	bool stage_tune;
	/* decode attention: the last block of each (row, KV head) merges the splits' partials
	 * (attn_cnt: cap_rows * n_kv_head counters, zero between launches) instead of the combine
	 * kernel; the same bits. DS_FAST_ATTN_MERGE=1 sets it, 0 keeps the graph tuning from trying
	 * it (merge_tune) */
	bool attn_merge, merge_tune;
	/* the fused decode attention copies its q/k/v inputs first when launched without PDL
	 * (ds_k_qkv_epi.early; DS_FAST_ATTN_EARLY=0: after its K/V copies, as before) */
	bool attn_early;
	unsigned *attn_cnt;
	/* decode graphs: each bucket's graph is captured under every step configuration
	 * (ds_cuda_fast_step_cfgs: skinny GEMMs x PDL x fused epilogue, each on/off, and staged
	 * weights for skinny GEMMs under PDL) and the fastest replay kept
	 * (DS_FAST_GRAPH_TUNE=0: the switches above only) */
	bool graph_tune;
	/* DS_FAST_LT_LOG=1: cuBLASLt's autotuning prints each timed candidate (its algorithm id,
	 * K splits, reduction scheme, tile and time) */
	bool lt_log;
	/* decode passes of 1, 2 or 4 rows run every layer in one persistent kernel (ds_k_mega_decode)
	 * when mega is set and the model qualifies (mega_ok: no q/k/v bias or q/k norm, supported
	 * dims); DS_FAST_MEGA=1 sets it, unset leaves it to the graph tuning (mega_tune), 0 rules it
	 * out. mega_layers: the kernel's layer table on the device; mega_bar: its barrier count;
	 * mega_cnt: its attention split counters (DS_K_MEGA_MAX_T * n_kv_head). */
	bool mega, mega_ok, mega_tune;
	struct ds_k_mega_layer *mega_layers;
	unsigned long long *mega_bar;
	unsigned *mega_cnt;
	unsigned long long *mega_trace; /* not owned: set by a bench to trace the fused kernel */
	/* not owned: set by a bench to trace the fused decode attention (ds_k_qkv_epi.trace) */
	unsigned long long *attn_trace;
	/* scratch for timing the gate/up choice's unfused candidate (its SiLU*mul output, which
	 * must not land on the GEMM's input): gu_scratch_bytes, grown on demand */
	uint16_t *gu_scratch;
	size_t gu_scratch_bytes;
	/* the fused kernel's settings (struct ds_k_mega): weights_evict_first (DS_FAST_MEGA_WEF=0:
	 * off), attn_splits (DS_FAST_MEGA_NZ=n; 0, the default: auto) and att_gate
	 * (DS_FAST_MEGA_GATE=n; -1: off) */
	bool mega_wef, mega_gate_late;
	int mega_nz, mega_gate;
	int mega_diag;  /* DS_FAST_MEGA_DIAG (bench diagnostics, ds_k_mega.diag); 0 */
	int mega_slots; /* DS_FAST_MEGA_SLOTS (bench diagnostics, ds_k_mega.max_slots); 0 */
	int graph_cfg[DS_CUDA_N_BUCKETS]; /* the configuration kept (-1: untuned) */
	float graph_ms[DS_CUDA_N_BUCKETS][DS_CUDA_N_STEP_CFGS]; /* replay times (ms; INFINITY) */
};

/* Host mirrors (pinned) and device copies of one pass's metadata. */
struct ds_cuda_meta {
	int32_t *ids, *pos, *seq, *bt_off, *bt, *out_tok; /* (cap_tokens) except bt (cap_bt) */
	struct ds_k_sample_row *sp;                       /* (cap_rows) */
	struct ds_k_sample_out *out;                      /* (cap_rows) */
	int32_t *aplan; /* (DS_K_ATTN_MMA_PLAN_INTS(cap_tokens)) row groups of the tensor-core
	                   reference attention, filled by ds_cuda_meta_upload when ref_attn_mma */
};

/* One pass: T tokens of n_seq (sub-)sequences, R output rows. */
struct ds_cuda_pass {
	int T, n_seq, n_bt, R;
	int max_pos; /* largest query position in the pass */
	/* every real row is its sequence's only query (a decode batch; a graph bucket's padding
	 * rows, pos < 0, do nothing): no row reads K/V another row of the pass writes */
	bool one_row_per_seq;
};

/* Reference passes of up to 512 rows are padded to a bucket and replayed from its graph: 16,
 * 32, ..., 256 rows, then every 64 rows up to 512 (a DVR verify step is the batch's decode rows
 * plus the windows' rows, e.g. 256 + 180: padded to a power of two it would cost 512 rows of
 * GEMM). DS_REF_GRAPH_BUCKETS=pow2 keeps powers of two; DS_REF_GRAPH_MAX=n graphs only passes
 * of at most n rows (the rest run eagerly, unpadded). */
#define DS_CUDA_REF_GRAPH_MIN 16
#define DS_CUDA_REF_GRAPH_MAX 512
#define DS_CUDA_REF_GRAPH_FINE 256 /* above this, buckets every DS_CUDA_REF_GRAPH_STEP rows */
#define DS_CUDA_REF_GRAPH_STEP 64
#define DS_CUDA_REF_BUCKETS 9

#define DS_CUDA_REF_PICKS 128

/* A reference GEMM variant chosen for (M bucket, N, K) among bit-identical candidates. */
struct ds_cuda_ref_pick {
	int mb, n, k, variant;
	bool silu; /* a pick for the fused gate/up + SiLU*mul call (ds_k_gemm_ref_silu_variant) */
};

/* Reference path state (refpath/cuda_ref.c): graphs of padded, fixed-shape passes, and the
 * GEMM variant table. */
struct ds_cuda_ref {
	int bucket_rows[DS_CUDA_REF_BUCKETS]; /* rows of each graph bucket, ascending */
	int n_buckets;
	cudaGraphExec_t graph[DS_CUDA_REF_BUCKETS];
	bool warm[DS_CUDA_REF_BUCKETS];
	/* (N, K) -> base variant (refpath/ref_gemm_table.h), read once at init */
	struct ds_ref_gemm_table table;
	/* same_bits[v]: variant v gave the same bytes as the first variant with its split count
	 * in the start-up self-check, so the two may stand in for each other at any M */
	bool same_bits[DS_K_GEMM_REF_N_VARIANTS];
	/* silu_ok[v]: variant v's fused gate/up epilogue gave the bytes of its plain output
	 * followed by ds_k_silu_mul in the self-check (false where it has none) */
	bool silu_ok[DS_K_GEMM_REF_N_VARIANTS];
	struct ds_cuda_ref_pick picks[DS_CUDA_REF_PICKS];
	int n_picks, next_evict;
	bool autotune; /* DS_REF_GEMM_AUTOTUNE=0: always the base variant */
	bool log;      /* DS_REF_GEMM_LOG=1: each timed pick on stderr (benches' notes) */
};

struct ds_cuda_ctx {
	const struct ds_model *model; /* not owned */
	struct ds_model_config cfg;
	int device, n_sm;
	char dev_name[128];
	cudaStream_t stream;

	/* weights: one device allocation */
	void *wbuf;
	size_t wbytes;
	uint16_t *tok_embd;           /* (vocab, hidden) */
	uint16_t *out_norm;           /* (hidden) */
	uint16_t *lm_head;            /* (vocab, hidden); == tok_embd when tied */
	struct ds_cuda_layer *layers; /* (n_layer) host array of device pointers */
	float *rope_cs;               /* (max_pos, head_dim/2, {cos, sin}) */

	/* paged KV: (n_layer, n_blocks, 2, n_kv_head, block_size, head_dim) bf16 */
	uint16_t *kv;
	int n_blocks, block_size;
	size_t kv_layer_elems;

	/* pass capacity and activations */
	int cap_tokens, cap_rows, cap_bt;
	float *x;      /* (cap_tokens, hidden) residual stream */
	float *dlt;    /* (cap_tokens, hidden) o_proj / down_proj output */
	/* how the last GEMM into dlt left it: dlt_parts partial sums dlt_pstride floats apart
	 * (the fast path's split-K partials, summed by the next RMSNorm), or 1 (the output
	 * itself); set to 1 before each such GEMM (cuda_backend.c's pass_layers) */
	int dlt_parts;
	size_t dlt_pstride;
	float *big;    /* (cap_tokens, max(qkv_dim, 2 ffn)) */
	uint16_t *h;   /* (cap_tokens, max(hidden, ffn)) bf16 GEMM input */
	uint16_t *q;   /* (cap_tokens, q_dim) */
	uint16_t *att; /* (cap_tokens, q_dim) attention output */
	float *logits; /* (cap_rows, vocab) */
	float *part;   /* attention partials */
	void *sample_ws; /* ds_k_sample_split_pdl's workspace for cap_rows rows (zeroed) */
	size_t part_floats;
	struct ds_cuda_meta hm, dm; /* host (pinned) and device */

	struct ds_cuda_fast fast;
	struct ds_cuda_ref ref;
	bool ref_graphs;
	bool ref_attn_mma; /* reference attention on tensor cores (kernels/attn_mma.cu): head_dim
	                      supported and DS_REF_ATTN != "old"; fixed at init */
	int ref_attn_split; /* its mode per pass (ds_k_attn_ref_mma_plan_split): -1 auto, 0 walk,
	                       1 split (DS_REF_ATTN_SPLIT=0/1); the same bits whichever */
};

static inline struct ds_k_tokmeta ds_cuda_tokmeta(const struct ds_cuda_ctx *c)
{
	struct ds_k_tokmeta tm = {c->dm.pos, c->dm.seq, c->dm.bt_off, c->dm.bt};
	return tm;
}

static inline struct ds_k_dims ds_cuda_dims(const struct ds_cuda_ctx *c)
{
	struct ds_k_dims d = {c->cfg.n_head, c->cfg.n_kv_head, c->cfg.head_dim,
	                      c->block_size, c->n_blocks,      c->cfg.rms_eps};
	return d;
}

/* ---- weights (backend/cuda_weights.c) ---- */

/* Allocates the weights on the device and fills them: generated from the seed for deferred
 * synthetic models, else copied from the host model through pinned staging buffers. Also
 * builds the RoPE table. */
enum ds_status ds_cuda_weights_init(struct ds_cuda_ctx *c, struct ds_err *err);
void ds_cuda_weights_free(struct ds_cuda_ctx *c);

/* ---- the two paths ---- */

/* The path-specific steps of a pass. */
struct ds_cuda_path_ops {
	/* C (M, N) fp32 = A (M, K) . W (N, K)^T */
	enum ds_status (*gemm)(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
	                       float *C, int M, int N, int K, struct ds_err *err);
	/* attention of the pass's T rows against layer kv; n_split is the fast path's split
	 * (ignored by the reference path, which picks its own from workspace size only) */
	enum ds_status (*attention)(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
	                            const uint16_t *kv, int n_split, struct ds_err *err);
	/* optional: C (M, N) = silu_mul(gu) . W (N, K)^T for the fp32 gate/up buffer gu (M, 2K),
	 * h (M, K) bf16 scratch it may use; NULL: ds_k_silu_mul into h, then gemm */
	enum ds_status (*gemm_silu)(struct ds_cuda_ctx *c, const float *gu, uint16_t *h,
	                            const uint16_t *W, float *C, int M, int N, int K,
	                            struct ds_err *err);
	/* optional: H (M, F) bf16 = SiLU*mul of the gate/up GEMM A (M, K) . Wgu (2F, K)^T in one
	 * kernel (the same bytes as gemm into an fp32 buffer, then ds_k_silu_mul); *done false
	 * when it does not apply (the caller then runs those two) */
	enum ds_status (*gemm_gu_silu)(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
	                               uint16_t *H, int M, int F, int K, bool *done,
	                               struct ds_err *err);
	/* optional: the q/k/v epilogue (from the fp32 GEMM output c->big) and attention in one;
	 * *done false when the pass does not qualify (the caller runs ds_k_qkv_rope, then
	 * attention) */
	enum ds_status (*attention_qkv)(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
	                                const struct ds_cuda_layer *L, uint16_t *kv, int n_split,
	                                bool *done, struct ds_err *err);
};

extern const struct ds_cuda_path_ops ds_cuda_fast_ops; /* fastpath/cuda_fast.c */
extern const struct ds_cuda_path_ops ds_cuda_ref_ops;  /* refpath/cuda_ref.c */

/* Whether pass p may run the fused decode layers: the model qualifies (mega_ok), every row is
 * its sequence's only query, it has 1, 2, 4 or 8 rows, and a layer's cache is under 2^35
 * elements. */
bool ds_cuda_fast_mega_fits(const struct ds_cuda_ctx *c, const struct ds_cuda_pass *p);
/* The fast path's fused decode layers (fastpath/cuda_fast.c): when enabled and the pass qualifies,
 * launches ds_k_mega_decode for every layer, the final RMSNorm and the LM head (the logits) and
 * sets *done; else leaves *done false. */
enum ds_status ds_cuda_fast_mega(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p, bool *done,
                                 struct ds_err *err);
/* The ring slots the fused kernel gets for a pass of T rows under the current settings (bench
 * diagnostics); -1 if it would refuse the launch. */
int ds_cuda_fast_mega_slots(const struct ds_cuda_ctx *c, int T);

/* Samples the pass's R rows of c->logits into c->dm.out on c->stream (backend/cuda_backend.c):
 * on the fast path (fast) with ds_k_sample_split_pdl, a small batch's rows each spread over
 * several blocks; on the reference path one block per row (ds_k_sample_pdl). pdl: as for the
 * *_pdl launchers. */
cudaError_t ds_cuda_sample(struct ds_cuda_ctx *c, bool fast, int R, int pdl);

/* Runs the layers, final norm, lm_head and sampling for the pass whose metadata is already on
 * the device (backend/cuda_backend.c). Launches only: capturable. */
enum ds_status ds_cuda_pass_run(struct ds_cuda_ctx *c, const struct ds_cuda_path_ops *ops,
                                const struct ds_cuda_pass *p, int n_split, struct ds_err *err);

/* One pass of a path's fixed-shape bucket through a captured graph (backend/cuda_backend.c):
 * uploads the pass's host metadata, then replays *graph when there is one; otherwise runs the
 * pass plainly the first time (!*warm, which it sets) or always when !capture, and captures,
 * instantiates and replays it from the second use on. A failed capture or instantiation leaves
 * *graph NULL. */
enum ds_status ds_cuda_pass_graphed(struct ds_cuda_ctx *c, const struct ds_cuda_path_ops *ops,
                                    const struct ds_cuda_pass *p, int n_split, bool capture,
                                    cudaGraphExec_t *graph, bool *warm, struct ds_err *err);

/* Autotuning timer: runs launch(c, arg) on c->stream reps times (the first a warm-up), each
 * after clearing flush_bytes of flush (an L2 flush; NULL: none), and returns the fastest of
 * the timed runs in milliseconds, or INFINITY when a launch fails (the error is cleared).
 * Synchronises; never call it during graph capture. */
typedef cudaError_t (*ds_cuda_launch_fn)(struct ds_cuda_ctx *c, void *arg);
float ds_cuda_time_best(struct ds_cuda_ctx *c, ds_cuda_launch_fn launch, void *arg, int reps,
                        void *flush, size_t flush_bytes);

/* Copies the pass's host metadata to the device (async on c->stream). */
enum ds_status ds_cuda_meta_upload(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
                                   struct ds_err *err);

/* The tensor-core reference attention (kernels/attn_mma.cu; needs c->ref_attn_mma) of pass p
 * into c->att, with the row-group plan ds_cuda_meta_upload made for it, which may walk or
 * split the groups' tiles (same bits; split: the combine kernel merges them). Both paths run
 * it (the fast path for passes with rows that are not outputs). n_split < 0 (graph capture,
 * where the grid may not depend on the positions): the grid for the longest context and the
 * combine kernel always. */
enum ds_status ds_cuda_attn_mma(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
                                const uint16_t *kv, int n_split, struct ds_err *err);

/* reference path extras (refpath/cuda_ref.c) */
/* The graph bucket of a reference pass of n tokens or rows (the larger): the smallest with at
 * least n rows, or -1 when the pass runs without a graph. */
int ds_cuda_ref_bucket(const struct ds_cuda_ctx *c, int n);
/* A reference pass with a graph bucket (ds_cuda_ref_bucket) and the host metadata filled: pads
 * it to the bucket's rows and replays that bucket's graph (captured on second use). Padding
 * rows have no KV and cannot touch real rows (every step is per row). */
enum ds_status ds_cuda_ref_graphed(struct ds_cuda_ctx *c, struct ds_cuda_pass *p,
                                   struct ds_err *err);
/* Reads the GEMM variant table (DS_REF_GEMM_TABLE) and runs the variants' bit-equality
 * self-check; called once at backend init. */
enum ds_status ds_cuda_ref_init(struct ds_cuda_ctx *c, struct ds_err *err);
void ds_cuda_ref_free(struct ds_cuda_ctx *c);

/* fast path extras (fastpath/cuda_fast.c) */
enum ds_status ds_cuda_fast_init(struct ds_cuda_ctx *c, struct ds_err *err);
void ds_cuda_fast_free(struct ds_cuda_ctx *c);
/* The flash-decoding split for T rows whose longest context is max_len positions. */
int ds_cuda_fast_split(const struct ds_cuda_ctx *c, int T, int max_len);
/* The largest split count <= s (and >= 1) whose attention partials for T rows fit c->part
 * (c->part_floats): the cap every split choice and forced split goes through. */
int ds_cuda_split_cap(const struct ds_cuda_ctx *c, int T, int s);
/* The decode graph bucket of n rows: the smallest b with 2^b >= n (its graph runs 2^b rows). */
static inline int ds_cuda_fast_bucket(int n)
{
	int b = 0;
	while ((1 << b) < n)
		b++;
	return b;
}
/* A decode pass (every sequence one token, n_seq <= DS_CUDA_MAX_DECODE) with the host metadata
 * filled: pads to the batch bucket and replays (capturing on second use) that bucket's graph. */
enum ds_status ds_cuda_fast_decode(struct ds_cuda_ctx *c, struct ds_cuda_pass *p,
                                   struct ds_err *err);
/* Drops the captured decode graphs (they are captured again on later use), e.g. after
 * fast.pdl or the GEMM choices changed. */
void ds_cuda_fast_graphs_reset(struct ds_cuda_ctx *c);

#endif
