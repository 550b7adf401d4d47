/* cpu_internal.h - private state of the CPU backend, shared by its driver (backend/cpu_backend.c)
 * and its two kernel sets (fastpath/cpu_fast.c, refpath/cpu_ref.c).
 *
 * The driver runs the same Llama-family layer sequence for both paths; only the three reducing
 * kernels differ (matmul, RMSNorm, attention), selected through struct ds_cpu_kernels. Every
 * other step (embedding, bias, RoPE, SwiGLU, residual adds, KV writes) is element-wise and
 * shared, so it cannot make the paths' invariance properties differ.
 *
 * Precision: weights and the KV pool are bf16 by default. A model loaded as f32 (model.h wtype)
 * runs with f32 weights and, unless asked otherwise, an f32 KV pool; the kernels then skip the
 * widening step and nothing else changes, so reduction orders are those of bf16. */
#ifndef DS_CPU_INTERNAL_H
#define DS_CPU_INTERNAL_H

#include "backend.h"
#include "threadpool.h"

/* Reference attention splits KV into chunks of this many positions, aligned to absolute
 * positions 0, S, 2S, ... (DESIGN.md section 3). Changing it changes reference bits. */
#define DS_CPU_REF_KV_CHUNK 32

/* Kernel helpers are forced inline so each target_clones variant of a kernel compiles them
 * for its own ISA (an out-of-line helper would run the baseline code in every variant). */
#define DS_CPU_INLINE __attribute__((always_inline))

/* 8-lane float vectors (GCC vector extensions): one AVX2 register, half an AVX-512 one, two
 * SSE ones. Kernels keep 16 lanes as two of them (lanes 0-7, 8-15); GCC keeps arrays of
 * 8-lane accumulators in registers on AVX2 and AVX-512, which it does not manage for 16-lane
 * vectors without AVX-512. Element-wise ops are the same IEEE ops lane by lane on any target.
 * The helpers taking or returning these are always inlined, so no vector crosses a call
 * boundary and the psABI note about wide vectors does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float ds_v8f __attribute__((vector_size(32)));
typedef uint32_t ds_v8u __attribute__((vector_size(32)));
typedef uint16_t ds_v8h __attribute__((vector_size(16)));
/* unaligned views: dereferencing them gives plain (split where needed) vector loads */
typedef float ds_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
typedef uint16_t ds_v8h_u __attribute__((vector_size(16), aligned(2), may_alias));

static inline DS_CPU_INLINE ds_v8f ds_v8_load(const float *p)
{
	return *(const ds_v8f_u *)p;
}

/* 8 bf16 values widened to f32 (exact). */
static inline DS_CPU_INLINE ds_v8f ds_v8_load_bf16(const uint16_t *p)
{
	ds_v8h h = *(const ds_v8h_u *)p;
	ds_v8u u = __builtin_convertvector(h, ds_v8u) << 16;
	return (ds_v8f)u;
}

/* Instruction-set levels the kernels are compiled for. Each hot task body is built once per
 * level (DS_CPU_VARIANTS) and the context's level picks one at run time. */
enum ds_cpu_isa { DS_CPU_ISA_BASE = 0, DS_CPU_ISA_AVX2 = 1, DS_CPU_ISA_AVX512 = 2 };

/* The best level this CPU runs (AVX2 and AVX-512 levels also need FMA). */
enum ds_cpu_isa ds_cpu_isa_detect(void);

/* Defines name_avx512, name_avx2 and name_base as task functions whose bodies are the given
 * calls (written in terms of arg, task, thread), compiled for each target, and name_pick(c)
 * which returns the one for c->isa. The calls may pass per-ISA constants (register blocking). */
#if defined(__x86_64__)
#define DS_CPU_VARIANTS_CALLS(name, target_avx512, call_avx512, target_avx2, call_avx2, call_base) \
	__attribute__((target(target_avx512))) static void name##_avx512(void *arg, int task,      \
	                                                                 int thread)               \
	{                                                                                          \
		call_avx512;                                                                       \
	}                                                                                          \
	__attribute__((target(target_avx2))) static void name##_avx2(void *arg, int task,          \
	                                                             int thread)                   \
	{                                                                                          \
		call_avx2;                                                                         \
	}                                                                                          \
	static void name##_base(void *arg, int task, int thread)                                   \
	{                                                                                          \
		call_base;                                                                         \
	}                                                                                          \
	static inline ds_task_fn name##_pick(const struct ds_cpu_ctx *c)                           \
	{                                                                                          \
		return c->isa == DS_CPU_ISA_AVX512 ? name##_avx512                                 \
		       : c->isa == DS_CPU_ISA_AVX2 ? name##_avx2                                   \
		                                   : name##_base;                                  \
	}
#else
#define DS_CPU_VARIANTS_CALLS(name, target_avx512, call_avx512, target_avx2, call_avx2, call_base) \
	static void name##_base(void *arg, int task, int thread)                                   \
	{                                                                                          \
		call_base;                                                                         \
	}                                                                                          \
	static inline ds_task_fn name##_pick(const struct ds_cpu_ctx *c)                           \
	{                                                                                          \
		(void)c;                                                                           \
		return name##_base;                                                                \
	}
#endif

/* The common case: the same body at every level. */
#define DS_CPU_VARIANTS(fn, target_avx512, target_avx2)                                            \
	DS_CPU_VARIANTS_CALLS(fn, target_avx512, fn(arg, task, thread), target_avx2,               \
	                      fn(arg, task, thread), fn(arg, task, thread))

/* Scratch slots owned by the context; each grows on demand and is reused across calls. */
enum ds_cpu_ws {
	DS_WS_X,
	DS_WS_XN,
	DS_WS_Q,
	DS_WS_K,
	DS_WS_V,
	DS_WS_ATT,
	DS_WS_TMP,
	DS_WS_GATE,
	DS_WS_UP,
	DS_WS_OUT,
	DS_WS_LOGITS,
	DS_WS_PART,
	DS_WS_ROWS,
	DS_WS_SAMPLE,
	DS_WS_COUNT
};

struct ds_cpu_ctx {
	const struct ds_model *model; /* not owned */
	struct ds_model_config cfg;
	struct ds_threadpool *tp;
	int n_threads;
	enum ds_cpu_isa isa; /* kernel variant level; detected at init, lowered by tests */
	int n_blocks, block_size;
	enum ds_dtype wtype;  /* the model's weight type: every weight pointer's element type */
	enum ds_dtype kvtype; /* the KV pool's element type */
	void *kv_k;           /* (n_layer, n_blocks, block_size, n_kv_head, head_dim) kvtype */
	void *kv_v;           /* (n_layer, n_blocks, block_size, n_kv_head, head_dim) kvtype */
	float *rope_cos, *rope_sin; /* (max_pos, head_dim/2) */
	void *ws[DS_WS_COUNT];
	size_t ws_cap[DS_WS_COUNT];
	float *thread_buf;     /* (n_threads, thread_buf_len) per-thread scratch */
	size_t thread_buf_len; /* floats per thread */
};

/* One forward pass, flattened: M rows, each a token of some sequence at an absolute position. */
struct ds_cpu_pass {
	const struct ds_fwd_batch *b;
	int M;
	const int *row_seq; /* (M) index into b->seqs */
	const int *row_pos; /* (M) absolute position */
};

/* Returns ctx's scratch slot grown to at least bytes (NULL on OOM; contents undefined). */
void *ds_cpu_ws_get(struct ds_cpu_ctx *c, enum ds_cpu_ws slot, size_t bytes);

/* Per-thread scratch of thread t (thread_buf_len floats); sized at init from
 * ds_cpu_{fast,ref}_thread_floats, so kernels never allocate it. */
static inline float *ds_cpu_thread_buf(struct ds_cpu_ctx *c, int t)
{
	return c->thread_buf + (size_t)t * c->thread_buf_len;
}

/* Floats of per-thread scratch each kernel set needs for this config. */
size_t ds_cpu_fast_thread_floats(const struct ds_model_config *cfg);
size_t ds_cpu_ref_thread_floats(const struct ds_model_config *cfg);

static inline size_t ds_cpu_dtype_size(enum ds_dtype t)
{
	return t == DS_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* KV row (n_kv_head * head_dim values of c->kvtype) of layer l at absolute position pos. */
static inline void *ds_cpu_kv_at(struct ds_cpu_ctx *c, void *pool, int l, const int32_t *blocks,
                                 int pos)
{
	int kvd = c->cfg.n_kv_head * c->cfg.head_dim;
	size_t blk = (size_t)blocks[pos / c->block_size];
	size_t off = ((size_t)l * (size_t)c->n_blocks + blk) * (size_t)c->block_size +
	             (size_t)(pos % c->block_size);
	return (char *)pool + off * (size_t)kvd * ds_cpu_dtype_size(c->kvtype);
}

/* dst[0..n) = src[i0..i0+n) widened to f32 (exact for bf16, a copy for f32); src of type t. */
static inline DS_CPU_INLINE void ds_cpu_row_f32(float *dst, enum ds_dtype t, const void *src,
                                                size_t i0, int n)
{
	if (t == DS_DTYPE_F32) {
		memcpy(dst, (const float *)src + i0, (size_t)n * sizeof(float));
		return;
	}
	const uint16_t *h = (const uint16_t *)src + i0;
	for (int i = 0; i < n; i++)
		dst[i] = ds_bf16_to_f32(h[i]);
}

/* One weight of a (fused) matmul: y (M, N) = x (M, K) . w^T, w (N, K) in HF layout, of the
 * context's wtype (bf16, or f32 behind the model's uint16_t pointer: model.h). */
struct ds_cpu_mm {
	const uint16_t *w;
	float *y;
	int N;
};
#define DS_CPU_MAX_MM 4

/* The three reducing kernels of one path. All return DS_ERR_NOMEM when scratch fails.
 *  matmul:    mm[0..n_mm) (n_mm <= DS_CPU_MAX_MM) against the same x, in one parallel run;
 *             fusing never changes a result, only how many times the threads meet.
 *             f32 weights give the same ops as bf16 ones (whose tiles are widened to f32
 *             first), so bf16-exact f32 weights give the same bits.
 *  rmsnorm:   y (M, n) = x / sqrt(mean(x^2) + eps) * w, w (n) of c->wtype; y may alias x.
 *  attention: out (M, n_head*head_dim) from q (M, n_head*head_dim), RoPE applied, against
 *             layer l's KV cache for positions [0, row_pos] of each row's sequence. */
struct ds_cpu_kernels {
	enum ds_status (*matmul)(struct ds_cpu_ctx *c, const float *x, int M, int K,
	                         const struct ds_cpu_mm *mm, int n_mm);
	enum ds_status (*rmsnorm)(struct ds_cpu_ctx *c, const float *x, const uint16_t *w, float *y,
	                          int M, int n, float eps);
	enum ds_status (*attention)(struct ds_cpu_ctx *c, const struct ds_cpu_pass *p, int l,
	                            const float *q, float *out);
};

extern const struct ds_cpu_kernels ds_cpu_fast_kernels; /* fastpath/cpu_fast.c */
extern const struct ds_cpu_kernels ds_cpu_ref_kernels;  /* refpath/cpu_ref.c */

#endif
