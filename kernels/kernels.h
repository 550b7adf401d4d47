/* kernels.h - extern "C" launchers for every CUDA kernel of both paths (the .cu files in kernels/).
 *
 * Launchers take raw device pointers, dimensions and an explicit stream, launch, and return
 * cudaGetLastError(). Nothing here allocates or synchronizes, so every launcher can be
 * captured in a CUDA graph. C code never sees C++: this header is plain C.
 *
 * Conventions: activations of the residual stream are fp32; GEMM inputs are bf16 (uint16_t
 * raw bits); GEMM outputs are fp32; weights are bf16 in HF layout (out, in). The paged KV
 * cache of one layer is (n_blocks, 2 [K,V], n_kv_head, block_size, head_dim) bf16. */
#ifndef DS_KERNELS_H
#define DS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- synthetic weights (kernels/synth.cu) ---- */

/* Reads bytes of buf (16-byte aligned scratch) through L2, evicting what it held with clean
 * lines: the autotuners' L2 flush before a timed run (l2evict.cu). */
cudaError_t ds_k_l2_evict(void *buf, size_t bytes, cudaStream_t st);
/* Asks L2 to prefetch [p, p + bytes) with bulk prefetches of chunk bytes (p, bytes and chunk
 * multiples of 16) from blocks blocks of 32 threads; evict_last: under an evict-last policy.
 * Returns once they are issued, not landed. */
cudaError_t ds_k_l2_prefetch(const void *p, size_t bytes, int blocks, unsigned chunk,
                             bool evict_last, cudaStream_t st);
/* Copies bytes (a multiple of 16, both 16-byte aligned) from src to dst after spinning
 * delay_ns (globaltimer) past its PDL wait, launched with PDL when pdl: a slow producer for
 * the tests of what may start early behind a kernel (l2evict.cu). */
cudaError_t ds_k_delayed_copy(void *dst, const void *src, size_t bytes, unsigned delay_ns, int pdl,
                              cudaStream_t st);

/* dst[i] = bf16(offset + scale * ds_hash_unit_pm1(ds_hash3(seed, key, first + i))), i < n:
 * bit-identical to ds_synth_fill on the host. */
cudaError_t ds_k_synth_fill(uint16_t *dst, size_t n, uint64_t first, uint64_t seed, uint64_t key,
                            float scale, float offset, cudaStream_t st);

/* ---- element-wise and per-row kernels (kernels/rows.cu) ---- */

/* x (T, hidden) fp32 = tab[ids[t]]; tab bf16 (vocab, hidden). */
cudaError_t ds_k_embed(const uint16_t *tab, const int32_t *ids, int T, int hidden, float *x,
                       cudaStream_t st);

/* One row per block, fixed reduction tree (batch-invariant). For each row r:
 *   src = rows ? rows[r] : r;  if (delta) x[src] += delta[src];
 *   out[r] = bf16(x[src] / sqrt(mean(x[src]^2) + eps) * w).
 * rows[r] < 0 marks a padding row: out[r] = 0, x untouched. rows must not repeat. */
cudaError_t ds_k_rmsnorm(float *x, const float *delta, const int32_t *rows, const uint16_t *w,
                         int n_rows, int hidden, float eps, uint16_t *out, cudaStream_t st);

/* out (T, ffn) bf16 = silu(gu[:, :ffn]) * gu[:, ffn:], gu fp32 (T, 2*ffn). */
cudaError_t ds_k_silu_mul(const float *gu, int T, int ffn, uint16_t *out, cudaStream_t st);

/* Per-pass token metadata on the device. pos[t] < 0 marks a padding row (no KV write,
 * zero attention output). Token t belongs to sequence seq[t], whose block table is
 * bt[bt_off[seq[t]] ...]. */
struct ds_k_tokmeta {
	const int32_t *pos;
	const int32_t *seq;
	const int32_t *bt_off;
	const int32_t *bt;
};

struct ds_k_dims {
	int n_head, n_kv, head_dim;
	int block_size, n_blocks;
	float eps; /* for q/k norm */
};

/* qkv (T, (n_head + 2 n_kv) * head_dim) fp32 from the fused projection: adds bias (optional,
 * bf16), applies per-head RMSNorm (q_norm/k_norm optional), RoPE (rotate_half, table cs
 * (max_pos, head_dim/2, {cos,sin})) to q and k, writes q bf16 (T, n_head*head_dim) and K/V bf16
 * into this layer's paged cache kv. */
cudaError_t ds_k_qkv_rope(const float *qkv, const uint16_t *bias, const uint16_t *q_norm,
                          const uint16_t *k_norm, const float *cs, struct ds_k_tokmeta tm, int T,
                          struct ds_k_dims d, uint16_t *q, uint16_t *kv, cudaStream_t st);

/* ---- reference GEMM (kernels/gemm_ref.cu) ---- */

/* C (M, N) fp32 = A (M, K) . W (N, K)^T, bf16 inputs, fp32 accumulation on tensor cores
 * (wgmma m64n128k16, sm_90a). One fixed tile (128x128x64), no split-K: every output element's
 * K-reduction runs in the same order for any M and any row placement. K % 8 == 0. */
cudaError_t ds_k_gemm_ref(const uint16_t *A, const uint16_t *W, float *C, int M, int N, int K,
                          cudaStream_t st);
/* Raises the kernel's shared-memory limit; call once per process before launching. */
cudaError_t ds_k_gemm_ref_setup(void);

/* Variants of the same invariant contract (kernels/gemm_ref.cu, gemm_ref_tma.cu,
 * gemm_ref_splitk.cu): each has one fixed tile and a fixed K reduction, so rows are
 * bit-identical for any M and placement within a variant (not across variants). Variants 0..6,
 * 11..16 and 19 (64-row tiles) and 17..18 (128x224 tiles) have no split-K and are built to give
 * variant 0's bytes (the reference path checks that on the device before letting one stand in); 7
 * and 8 (6 stages) and 9 and 10 (3 stages, two CTAs per SM) split K over a thread-block cluster of
 * S = 2, 4, 2, 4 CTAs, with the k-ranges a function of K and S only and the partials combined in a
 * fixed order; 20 (a 128x256 tile, 4 stages) is S = 2 like 7 and 9 and built to give variant 7's
 * bytes. Choose the variant from the weight's (N, K) only, never from M. Variant 0 is
 * ds_k_gemm_ref.
 * ds_k_gemm_ref_setup covers all of them (it fails only for variant 0; another variant's
 * setup failure shows as its launch error). Variants 3..20 (TMA) also need A and
 * W 16-byte aligned. */
#define DS_K_GEMM_REF_N_VARIANTS 21
cudaError_t ds_k_gemm_ref_variant(int variant, const uint16_t *A, const uint16_t *W, float *C,
                                  int M, int N, int K, cudaStream_t st);
/* The gate/up GEMM with SiLU*mul in its epilogue: H (M, F) bf16 = bf16(silu(g) * u) for
 * g, u = the fp32 columns j and F + j of A (M, K) . W (2F, K)^T, W = [gate; up]. A tile loads
 * gate rows and the matching up rows, so each accumulator is what the plain variant stores and
 * H has the bytes of ds_k_gemm_ref_variant into C (M, 2F) followed by ds_k_silu_mul (the
 * reference path checks that on the device before using one). Variants without split-K
 * (0..6, 11..19); the split-K ones return cudaErrorNotSupported. */
cudaError_t ds_k_gemm_ref_silu_variant(int variant, const uint16_t *A, const uint16_t *W,
                                       uint16_t *H, int M, int F, int K, cudaStream_t st);
/* Short name of a variant ("cp128x128s3", ...), or "?" when out of range. */
const char *ds_k_gemm_ref_variant_name(int variant);
/* The variant's fixed number of K splits S (1, 2 or 4); 0 when out of range. */
int ds_k_gemm_ref_variant_splits(int variant);
/* CTAs of the variant resident at once on the current device (for the cluster variants:
 * active clusters x S); for benchmark diagnostics. */
cudaError_t ds_k_gemm_ref_variant_resident(int variant, int *ctas);

/* The same contract on mma.sync (128x128x32), kept only as a benchmark comparison point. */
cudaError_t ds_k_gemm_mma(const uint16_t *A, const uint16_t *W, float *C, int M, int N, int K,
                          cudaStream_t st);
cudaError_t ds_k_gemm_mma_setup(void);

/* ---- fast-path skinny GEMM (kernels/gemv.cu) ---- */

/* C (M, N) fp32 = A (M, K) . W (N, K)^T for 1 <= M <= DS_K_GEMV_MAX_M, bandwidth-bound;
 * K % 8 == 0. Not batch-invariant across M (the fast path switches to cuBLASLt above it). */
#define DS_K_GEMV_MAX_M 4
cudaError_t ds_k_gemv(const uint16_t *A, const uint16_t *W, float *C, int M, int N, int K,
                      cudaStream_t st);

/* ---- fast-path tensor-core skinny GEMM (kernels/skinny.cu) ---- */

/* C (M, N) fp32 = A (M, K) . W (N, K)^T for 1 <= M <= DS_K_SKINNY_MAX_M on mma.sync (weights as
 * the 16-row operand, the batch padded to 8/16/32/64). K % 8 == 0, any N; A and W 16-byte
 * aligned. variant (0 .. DS_K_SKINNY_VARIANTS-1) picks a block shape (warps per block, weight
 * tiles per warp, K unroll, K split over a thread-block cluster of 1..8, weight prefetch
 * depth); every variant is
 * correct for every M, the fast path times them.
 * pdl != 0 launches with programmatic stream serialization: the kernel issues its first
 * weight loads, then waits for the previous kernel (griddepcontrol.wait) before it reads A or
 * writes C. Reduction order depends on the variant (not on the data): not batch-invariant.
 * Returns cudaErrorInvalidValue for a bad M, K, variant or alignment. */
#define DS_K_SKINNY_MAX_M 64
#define DS_K_SKINNY_VARIANTS 14
/* stage (0 .. DS_K_SKINNY_MAX_STAGE): each warp also copies the weights of its next stage
 * iterations into shared memory before that wait (as many as a block has and 96 KB holds), so
 * under PDL a GEMM after a kernel that leaves DRAM idle (RMSNorm, attention) streams part of
 * its weights during it. The arithmetic is the same for every stage: the same bits. */
#define DS_K_SKINNY_MAX_STAGE 4
cudaError_t ds_k_skinny(const uint16_t *A, const uint16_t *W, float *C, int M, int N, int K,
                        int variant, int pdl, int stage, cudaStream_t st);
/* The same GEMM with SiLU*mul fused into the activation load: gu is the (M, 2K) fp32 gate/up
 * buffer and A (m, k) = bf16(silu(gu[m, k]) * gu[m, K + k]), computed with ds_k_silu_mul's
 * arithmetic, so the result has the bits of ds_k_silu_mul then ds_k_skinny with the same
 * variant. M <= DS_K_SKINNY_SILU_MAX_M; K % 8 == 0; gu and W 16-byte aligned. */
#define DS_K_SKINNY_SILU_MAX_M 8
cudaError_t ds_k_skinny_silu(const float *gu, const uint16_t *W, float *C, int M, int N, int K,
                             int variant, int pdl, int stage, cudaStream_t st);
/* The streaming GEMM (kernels/stream.cu): C (M, N) fp32 = A (M, K) . W (N, K)^T for
 * 0 <= M <= DS_K_STREAM_MAX_M, K % 16 == 0, any N; A and W 16-byte aligned. One block of 288
 * threads and ~225 KB of shared memory per SM, grid blocks at most (one per SM), each owning a
 * contiguous run of 16-row weight tiles. With pdl != 0 (programmatic stream serialization) its
 * producer warp streams weights into shared memory before the previous kernel ends; A is read
 * and C written only after griddepcontrol.wait. Deterministic for a given shape and grid;
 * cudaErrorInvalidValue for a bad M, N, K, grid or alignment. */
#define DS_K_STREAM_MAX_M 8
/* variant (0 .. DS_K_STREAM_VARIANTS-1): the ring's shape (2 entries of 2048-element K
 * segments, 5 of 1024, 10 of 512); each is correct, their bits differ. */
#define DS_K_STREAM_VARIANTS 3
cudaError_t ds_k_stream_gemm(const uint16_t *A, const uint16_t *W, float *C, int M, int N, int K,
                             int variant, int grid, int pdl, cudaStream_t st);
/* The same with diag (bench_gpu stream only): 1 skips the activation loads and the math (C is
 * wrong), timing the weight stream alone. */
cudaError_t ds_k_stream_gemm_diag(const uint16_t *A, const uint16_t *W, float *C, int M, int N,
                                  int K, int variant, int grid, int pdl, int diag, cudaStream_t st);
/* Writes a short name of the variant used at M ("skinny_n8_w8_r1_u4") into buf; returns
 * snprintf's count, or -1 for an M or variant out of range. */
int ds_k_skinny_describe(int M, int variant, char *buf, size_t len);

/* ---- paged attention (kernels/attn.cu) ---- */

/* Causal attention of T query rows (row t at position pos[t] attends to [0, pos[t]]) against
 * the paged cache. KV is processed in tiles of DS_K_ATTN_TILE positions; tile partials
 * (max, sum, acc) are merged in increasing position order.
 *  ref:  tiles aligned to absolute positions 0, 64, 128, ... For any split the bits are the
 *        same: split == 0 walks all tiles in one block; split > 0 (>= max chunks) computes one
 *        tile per block into part and merges them in a second kernel.
 *  fast: flash-decoding with up to n_split ranges per row of ceil(len / n_split) positions
 *        rounded up to whole tiles, at least 2 (so the tiling depends on n_split: batch-
 *        variant); n_split == 1 runs in one block.
 * part: workspace of T * n_head * splits * (head_dim + 2) floats when splitting. */
#define DS_K_ATTN_TILE 64
cudaError_t ds_k_attn_ref(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm, int T,
                          struct ds_k_dims d, int split, float *part, uint16_t *out,
                          cudaStream_t st);
cudaError_t ds_k_attn_fast(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm, int T,
                           struct ds_k_dims d, int n_split, float *part, uint16_t *out,
                           cudaStream_t st);
/* Raises the attention kernels' shared-memory limit for d; call once before launching. */
cudaError_t ds_k_attn_setup(struct ds_k_dims d);

/* ---- reference attention on tensor cores (kernels/attn_mma.cu) ---- */

/* The reference contract of ds_k_attn_ref (causal, tiles of DS_K_ATTN_TILE aligned to absolute
 * positions, merged in increasing order; pos < 0: zero output) on mma.sync. A row's bits depend
 * only on its q, its position and the KV: not on T, the other rows, the plan or the row's
 * index. They differ from ds_k_attn_ref's (P is rounded to bf16 for the P V product).
 *
 * plan: the pass's rows cut into groups (up to 64 / G consecutive rows of one sequence in one
 * 64-position tile, or a run of padding rows), built on the host by ds_k_attn_ref_mma_plan
 * from the host copies of tm.pos and tm.seq into DS_K_ATTN_MMA_PLAN_INTS(T) ints
 * ({count, mode, items, (first row, rows, first item) per group, then per row the index of its
 * first tile partial}; returns count) and uploaded whole with the pass's metadata.
 * ds_k_attn_ref_mma reads it from device memory and its grid depends only on T and d, so a
 * padded pass can be graph-captured. Needs ds_k_attn_ref_mma_supported(d) (head_dim 64 or
 * 128, n_head % n_kv == 0, G <= 64) and ds_k_attn_ref_mma_setup(d) once per process; else
 * cudaErrorInvalidValue.
 *
 * Two modes, same bits: walk (mode 0: one CTA walks all tiles of a group, merging in
 * registers) and split (mode 1: the (group, tile) items are spread over CTAs, each tile's
 * partial stored to part, then merged per row in tile order with the walk's formula by a
 * second kernel). ds_k_attn_ref_mma_plan always walks (ds_k_attn_ref_mma takes only such
 * plans). ds_k_attn_ref_mma_plan_split: mode 0 walk, 1 split, -1 split when few groups
 * (groups * n_kv <= 128) have more than one tile; split only when the partials fit
 * part_floats (sum over rows of their tiles * n_head * (head_dim + 2) floats), else walk.
 * ds_k_attn_ref_mma_split runs either: top >= every position the plan can hold (the grid
 * depends on T, top and d only: a graph captured at capacity top replays at any positions);
 * combine: launch the combine kernel (it exits at once when the plan walks); it must be true
 * whenever the device plan may split (in a graph: always), and part then non-NULL.
 *
 * occ: the kernel build, 2 or 3 CTAs resident an SM (registers capped for 3); the same code,
 * so the same bits: a choice of speed, given by ds_k_attn_ref_mma_occ from the host copy of
 * the plan (top: as given to ds_k_attn_ref_mma_split, or -1 for ds_k_attn_ref_mma) and the
 * device's SM count. */
#define DS_K_ATTN_MMA_PLAN_INTS(T) (3 + 4 * (size_t)(T))
bool ds_k_attn_ref_mma_supported(struct ds_k_dims d);
cudaError_t ds_k_attn_ref_mma_setup(struct ds_k_dims d);
int ds_k_attn_ref_mma_plan(const int32_t *pos, const int32_t *seq, int T, struct ds_k_dims d,
                           int32_t *plan);
int ds_k_attn_ref_mma_plan_split(const int32_t *pos, const int32_t *seq, int T,
                                 struct ds_k_dims d, size_t part_floats, int mode,
                                 int32_t *plan);
int ds_k_attn_ref_mma_occ(const int32_t *hplan, int T, struct ds_k_dims d, int top, int n_sm);
cudaError_t ds_k_attn_ref_mma(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm,
                              const int32_t *plan, int T, struct ds_k_dims d, int occ,
                              uint16_t *out, cudaStream_t st);
cudaError_t ds_k_attn_ref_mma_split(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm,
                                    const int32_t *plan, int T, struct ds_k_dims d, int top,
                                    int occ, float *part, bool combine, uint16_t *out,
                                    cudaStream_t st);

/* ---- fast-path decode attention (kernels/attn_decode.cu) ---- */

/* Flash-decoding of T query rows (row t at position pos[t] attends to [0, pos[t]]; pos < 0:
 * zeros) against the paged cache: one block per (row, KV head, split) for all G query heads
 * of the KV head, K/V streamed once with 16-byte loads, online softmax in fp32. Each row's
 * split is chosen on the device from its length: at most n_split ranges (1 <= n_split <=
 * DS_K_ATTN_DECODE_MAX_SPLIT) of whole block iterations, so a fixed n_split serves a graph
 * replayed at changing positions; rows with more than one range are merged by a second kernel
 * (launched only when n_split > 1). The reduction order depends on n_split (batch-variant).
 * Supported shapes: ds_k_attn_decode_supported (head_dim 64 or 128, G <= DS_K_ATTN_DECODE_MAX_G);
 * others return cudaErrorInvalidValue. part: T * n_head * n_split * (head_dim + 2) floats when
 * n_split > 1. pdl: as for the *_pdl launchers below. */
#define DS_K_ATTN_DECODE_MAX_SPLIT 64
#define DS_K_ATTN_DECODE_MAX_G 8
int ds_k_attn_decode_supported(struct ds_k_dims d);
/* Resident blocks per SM of the kernel instance for d (for choosing n_split). */
cudaError_t ds_k_attn_decode_occupancy(struct ds_k_dims d, int *blocks_per_sm);
cudaError_t ds_k_attn_decode(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm, int T,
                             struct ds_k_dims d, int n_split, float *part, uint16_t *out, int pdl,
                             cudaStream_t st);
/* Variants (same arguments, split semantics and accuracy; ds_k_attn_decode is REG):
 * REG: K/V streamed global -> registers, double-buffered (round 1; few resident blocks);
 * PIPE: K/V staged global -> shared memory by cp.async 3-4 stages deep, registers capped so
 * 3-4 blocks fit an SM (more loads in flight per SM);
 * MMA: K/V staged likewise (64-position stages, 3 deep, 2 blocks an SM; the block's
 * block-table entries in shared memory), S = Q K^T and P V on tensor cores (the G heads as mma
 * rows), the first stages requested before the PDL wait (attn_decode_mma.cuh).
 * MMA_BULK: MMA with each warp's rows of a stage brought in by bulk async copies (the TMA
 * unit; one 2 * head_dim-byte copy a lane) completing on mbarriers, the whole ring requested
 * before the PDL wait.
 * MMA_COPYONLY, MMA_BULK_COPYONLY (bench_gpu attn only; their output is meaningless): the
 * copies, stages and barriers without the arithmetic, to tell the copy pipeline's limit from
 * the math's. */
enum ds_k_attn_decode_variant {
	DS_K_ATTN_DECODE_REG = 0,
	DS_K_ATTN_DECODE_PIPE = 1,
	DS_K_ATTN_DECODE_MMA = 2,
	DS_K_ATTN_DECODE_MMA_BLOCK = 3, /* MMA with the block copying each stage together */
	DS_K_ATTN_DECODE_MMA_BULK = 4,  /* MMA with each stage brought in by bulk async copies */
	DS_K_ATTN_DECODE_N_VARIANTS = 5,
	DS_K_ATTN_DECODE_MMA_COPYONLY = 16,
	DS_K_ATTN_DECODE_MMA_BULK_COPYONLY = 17
};
cudaError_t ds_k_attn_decode_occupancy_v(struct ds_k_dims d, int variant, int *blocks_per_sm);
/* counters: NULL (rows with several splits are merged by a second kernel), or T * n_kv zeroed
 * uint32 (the last block of a row and KV head merges them and zeroes its counter again, so the
 * buffer stays zero between calls and a captured graph replays; the output bits are the same
 * either way). One buffer serves one stream: concurrent calls must not share it. */
cudaError_t ds_k_attn_decode_v(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm,
                               int T, struct ds_k_dims d, int n_split, float *part, uint16_t *out,
                               unsigned *counters, int variant, int pdl, cudaStream_t st);
/* The q/k/v epilogue's inputs (ds_k_qkv_rope's): the fp32 GEMM output (T, n_head + 2 n_kv,
 * head_dim), optional bias and q/k norm weights, the RoPE table (max_pos, head_dim / 2, {cos,
 * sin}). */
struct ds_k_qkv_epi {
	const float *qkv;
	const uint16_t *bias, *q_norm, *k_norm;
	const float *cs;
	/* bench diagnostics only (NULL otherwise): the mma variant's thread 0 of each block writes
	 * DS_K_DATTN_STAMPS globaltimer stamps at trace[block * DS_K_DATTN_STAMPS + k], block =
	 * x + gridDim.x * (y + gridDim.y * z): start, table in shared memory, stages issued, after
	 * the PDL wait, after the epilogue, first stage landed, loop done, end (0 where a block
	 * stopped early) */
	unsigned long long *trace;
	/* 1: each block copies its q/k/v inputs and RoPE row at its start, before its K/V copies,
	 * instead of loading them after the K/V copies go out (the same bits); only without PDL:
	 * ds_k_attn_decode_qkv clears it under PDL, where the GEMM writing them may still run */
	int early;
};
#define DS_K_DATTN_STAMPS 8
/* The MMA variant with ds_k_qkv_rope fused in (decode rows only): each block forms its row's
 * q heads, key and value from ep itself (the same arithmetic, so the same bits as
 * ds_k_qkv_rope then ds_k_attn_decode_v(MMA)), the block holding a row's own position writes
 * that K and V to kv, and no q buffer is written. One launch (plus the combine) instead of
 * two. */
cudaError_t ds_k_attn_decode_qkv(const struct ds_k_qkv_epi *ep, uint16_t *kv,
                                 struct ds_k_tokmeta tm, int T, struct ds_k_dims d, int n_split,
                                 float *part, uint16_t *out, unsigned *counters, int variant,
                                 int pdl, cudaStream_t st);

/* ---- sampling (kernels/sample.cu) ---- */

struct ds_k_sample_row {
	float temperature;
	int32_t top_k;
	float top_p;
	int32_t pad;
	uint64_t seed;
	int64_t pos; /* absolute position of the token being produced */
};

struct ds_k_sample_out {
	int32_t token;
	float logprob;
	float margin;
};

/* The reference path's sampler, one block per row of logits (n_rows, vocab): the same function
 * as ds_sample (common/sample.c): greedy argmax (ties to the lowest id), Gumbel-max with
 * ds_sample_key for temperature, top-k / top-p as a prefix of the (logit desc, id asc) order.
 * The logprob's exp terms are fp32, summed in fp64 in a fixed order: bits that depend on the row
 * alone, within rounding of the host's fp64 ones. */
cudaError_t ds_k_sample(const float *logits, int n_rows, int vocab,
                        const struct ds_k_sample_row *sp, struct ds_k_sample_out *out,
                        cudaStream_t st);

/* The fast path's version: each row spread over nb blocks (1 to ds_k_sample_split_blocks(vocab);
 * the fast path picks it from the batch, so a row's logprob may depend on it): each block takes
 * a range's top two, exp-sum and Gumbel-max; the row's last block merges them in range order
 * and finishes (top-k / top-p rows: that block searches the whole row). Greedy rows' tokens
 * and every margin equal ds_k_sample's; a temperature row's Gumbel noise and a top-p row's
 * weights are fp32 (summed in fp64), so its token differs only where two perturbed logits, or
 * a cut's mass and its target, are within fp32 rounding; logprobs may differ in the last bits
 * (the sum is taken per range; test_gpu_kernels: within 1e-5). ws:
 * ds_k_sample_ws_bytes(cap, vocab) bytes for up to cap rows, 16-byte aligned, zero before the first
 * launch and left zero; NULL allowed when nb is 1. */
#define DS_K_SAMPLE_MAX_SPLIT 32
int ds_k_sample_split_blocks(int vocab);
size_t ds_k_sample_ws_bytes(int cap, int vocab);
cudaError_t ds_k_sample_split_pdl(const float *logits, int n_rows, int vocab, int nb,
                                  const struct ds_k_sample_row *sp, struct ds_k_sample_out *out,
                                  void *ws, int cap, int pdl, cudaStream_t st);

/* Test hook: per row (temperature > 0), the top-k key and the top-p cut found by the sampler's
 * searches (a few bits a pass) and by the one-bit-a-pass searches they replaced, with the
 * reference path's fp64 weights or (f32) the fast path's fp32 ones; out (n_rows, 4): tk, tk
 * bitwise, cut, cut bitwise (0 where the row has no such filter). */
cudaError_t ds_k_sample_search_check(const float *logits, int n_rows, int vocab,
                                     const struct ds_k_sample_row *sp, int f32, uint32_t *out,
                                     cudaStream_t st);

/* ---- fused decode layers (kernels/mega.cu) ---- */

/* One layer's weights for the fused decode kernel (device pointers, HF layout). */
struct ds_k_mega_layer {
	const uint16_t *attn_norm, *wqkv, *wo, *ffn_norm, *w_gu, *w_down;
};

/* Everything the fused decode kernel reads and writes. */
struct ds_k_mega {
	const struct ds_k_mega_layer *layers; /* (n_layer), in device memory */
	int n_layer, hidden, ffn;
	float rms_eps;
	struct ds_k_dims d;
	struct ds_k_tokmeta tm;
	const float *rope_cs;  /* (max_pos, head_dim/2, {cos, sin}) */
	uint16_t *kv;          /* layer 0's paged cache; layer l at kv + l * kv_layer_elems */
	size_t kv_layer_elems;
	float *x;              /* (T, hidden) residual stream: the embeddings in, layer n-1's out */
	uint16_t *q, *att;     /* (T, n_head * head_dim) scratch */
	uint16_t *act;         /* (T, ffn) scratch */
	float *part;           /* attention partials, part_floats of them */
	size_t part_floats;
	unsigned long long *bar; /* barrier count: zero before the first launch, left ready; every
	                          * launch on one counter uses the same n_blocks */
	unsigned *cnt;         /* (T, n_kv) attention split counters: zero, left zero */
	const uint16_t *out_norm; /* the final RMSNorm's weights (hidden) */
	const uint16_t *lm_head;  /* (vocab, hidden) */
	int vocab;
	float *logits; /* (T, vocab) out */
	/* NULL, or (n_blocks, n_layer, DS_K_MEGA_STAMPS) %globaltimer stamps (ns) that thread 0 of
	 * each block takes at the end of each phase of each layer (bench: where the time goes) */
	unsigned long long *trace;
	/* the weight stream's copies carry an L2 evict-first policy (weights are read once a pass,
	 * so they need not push out the K/V, activations and partials), else no cache hint */
	bool weights_evict_first;
	/* attention splits per (row, KV head); 0: about one item per block */
	int attn_splits;
	/* < 0: off; else each block's producer issues at most about att_gate slots of a layer's o
	 * weights (rounded down to its copy turns) before the block's attention dot products are
	 * done, so its K/V loads do not queue behind a full ring's copies */
	int att_gate;
	bool att_gate_late; /* the gate opens once the partials are stored and counted instead */
	/* bench diagnostics, 0 in service: bit 0, the tensor-core GEMVs (8 rows) wait for their
	 * slots and release them but skip the math (wrong outputs: only the weight stream's pace
	 * is measured); bits 0 and 1 (3): and a warp frees each slot as soon as it landed, not
	 * once all 16 of the tile's step have; bits 0 and 2 (5): and where K is two segments, a
	 * tile's step copies 8 whole rows instead of one half of each of its 16 rows */
	int diag;
	/* bench diagnostics, 0 in service: > 0 caps the ring at that many slots (rounded down to a
	 * multiple of the consumer warps; a launch refused below the minimum), to tell how the
	 * weight stream's pace depends on the ring's depth */
	int max_slots;
};
/* stamps 0-11: the ends of the phases; 12 and 13 inside attention, on the block's first item: its
 * dot products done, its partials stored and counted (taken at attention's start when the block
 * has no such work) */
#define DS_K_MEGA_STAMPS 14
#define DS_K_MEGA_MAX_T 8

/* All n_layer transformer layers of a decode pass of T = 1, 2, 4 or 8 rows (one query per
 * sequence; pos < 0: a padding row, no KV write, zero attention output), then the final RMSNorm
 * and the LM head (fp32 logits of every row), in one persistent cooperative kernel of n_blocks
 * blocks (at most one per SM): per layer, RMSNorm + the q/k/v GEMV + RoPE and the K/V write,
 * flash-decoding attention (its last split merges), the o GEMV + residual, RMSNorm + the
 * gate/up GEMV + SiLU*mul, the down GEMV + residual, separated by grid-wide barriers, while
 * one warp per block streams the block's rows of every weight matrix, layer after layer, into
 * a ring of shared-memory slots with bulk async copies, so weights keep flowing across the
 * barriers and the small phases. Fast path: sums run in an order fixed by
 * the grid, not the reference's. Needs no bias and no q/k norm (the caller checks),
 * ds_k_mega_supported(d, hidden, ffn) and x's rows updated in place (no separate delta). At 8
 * rows the GEMVs run on tensor cores. */
int ds_k_mega_supported(struct ds_k_dims d, int hidden, int ffn);
cudaError_t ds_k_mega_decode(const struct ds_k_mega *a, int T, int n_blocks, cudaStream_t st);
/* The ring slots (4 KB each, 4160 bytes at 8 rows) a launch of ds_k_mega_decode with these
 * arguments would get, in *nslot, without launching (bench diagnostics). */
cudaError_t ds_k_mega_ring_slots(const struct ds_k_mega *a, int T, int n_blocks, int *nslot);

/* ---- programmatic dependent launch (PDL) for the fast path's decode chain ---- */

/* The launchers above with a pdl switch: pdl != 0 launches with programmatic stream
 * serialization, so the kernel may start while the previous kernel in the stream finishes; each
 * kernel of rows.cu, attn.cu and sample.cu waits (griddepcontrol.wait) before touching memory,
 * so results are bit-identical to pdl == 0. The previous kernel's completion, not just its
 * launch, is what is waited on; a kernel launched without PDL after one of these is ordered as
 * usual. pdl == 0 is exactly the plain launcher. */
cudaError_t ds_k_rmsnorm_pdl(float *x, const float *delta, const int32_t *rows, const uint16_t *w,
                             int n_rows, int hidden, float eps, uint16_t *out, int pdl,
                             cudaStream_t st);
/* ds_k_rmsnorm_pdl with the delta given as parts partial sums, pstride (>= hidden) elements
 * apart (the fast path's split-K GEMM partials): delta[src] = part 0 + part 1 + ..., added in
 * that order. parts 1 is ds_k_rmsnorm_pdl. */
cudaError_t ds_k_rmsnorm_parts_pdl(float *x, const float *delta, int parts, size_t pstride,
                                   const int32_t *rows, const uint16_t *w, int n_rows, int hidden,
                                   float eps, uint16_t *out, int pdl, cudaStream_t st);
cudaError_t ds_k_silu_mul_pdl(const float *gu, int T, int ffn, uint16_t *out, int pdl,
                              cudaStream_t st);
cudaError_t ds_k_qkv_rope_pdl(const float *qkv, const uint16_t *bias, const uint16_t *q_norm,
                              const uint16_t *k_norm, const float *cs, struct ds_k_tokmeta tm,
                              int T, struct ds_k_dims d, uint16_t *q, uint16_t *kv, int pdl,
                              cudaStream_t st);
cudaError_t ds_k_attn_fast_pdl(const uint16_t *q, const uint16_t *kv, struct ds_k_tokmeta tm, int T,
                               struct ds_k_dims d, int n_split, float *part, uint16_t *out, int pdl,
                               cudaStream_t st);
cudaError_t ds_k_sample_pdl(const float *logits, int n_rows, int vocab,
                            const struct ds_k_sample_row *sp, struct ds_k_sample_out *out, int pdl,
                            cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
