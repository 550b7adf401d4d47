/* bench_gpu.h - what the sections of bench_gpu (bench/gpu/bench_gpu*.c) share: the run's
 * state (the llama3-8b preset on one CUDA backend, the measured copy bandwidth), the timing and
 * JSON helpers, and one entry point per section. Each section writes OUTDIR/gpu-<name>.json and
 * prints its ratio to a baseline measured in the same run; a non-zero return ends the run. */
#ifndef DS_BENCH_GPU_H
#define DS_BENCH_GPU_H

#include "cuda_internal.h"
#include "engine.h"
#include "model_internal.h"
#include "ref_gemm_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                 \
			        cudaGetErrorString(e_));                                           \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

#define BS 16 /* KV block size of every section's backend */

struct bench {
	const char *out;
	struct ds_model *m;
	struct ds_backend be;
	struct ds_cuda_ctx *c;
	double copy_bw; /* bytes/s, read + write */
	char dev[128];
	int next_block;
};

/* ---- helpers (bench_gpu.c) ---- */
double now_s(void);
double median(double *v, int n);
/* Median seconds of reps runs of run(arg) on stream st, each timed by events around it, after
 * warm untimed ones; run returns 0, or a code that ends the timing and is returned (1 on a CUDA
 * error of the timing itself). */
int event_median(cudaStream_t st, int warm, int reps, int (*run)(void *), void *arg, double *out_s);
/* event_median, clearing flush_bytes of flush (an L2 flush) on the stream before each run, outside
 * the timed events; flush NULL: none */
int event_median_flush(cudaStream_t st, int warm, int reps, int (*run)(void *), void *arg,
                       void *flush, size_t flush_bytes, double *out_s);
FILE *json_open(const char *dir, const char *name);
/* A number for the JSON output: NaN / inf (a launch that was refused) as -1. */
double json_num(double x);
int env_int(const char *k, int def);
/* Whether the comma-separated list in environment variable var (unset or empty: every name)
 * holds name; point_picked: whether var (e.g. "8:2048,32:512") names batch B at context ctx. */
bool name_picked(const char *var, const char *name);
bool point_picked(const char *var, int B, int ctx);

/* ---- decode-step accounting (bench_gpu_step.c) ---- */
size_t decode_weight_bytes(const struct ds_model_config *c, int B);
size_t kv_bytes(const struct ds_model_config *c, int B, int ctx);
int decode_time(struct bench *b, enum ds_path path, int B, int ctx, int reps, double *out_s);

/* ---- sections ---- */
int bench_copy(struct bench *b);     /* bench_gpu.c */
int bench_attn(struct bench *b);     /* bench_gpu.c */
int bench_attn_ref(struct bench *b); /* bench_gpu.c */
int bench_attntrace(struct bench *b); /* bench_gpu.c (only when named) */
int bench_gemm(struct bench *b);     /* bench_gpu_gemm.c */
int bench_l2pf(struct bench *b);     /* bench_gpu_gemm.c (only when named) */
int bench_stream(struct bench *b);   /* bench_gpu_gemm.c (only when named) */
int bench_decode(struct bench *b);   /* bench_gpu_step.c */
int bench_verify(struct bench *b);   /* bench_gpu_step.c */
int bench_profile(struct bench *b);  /* bench_gpu_step.c */
int bench_mixstep(struct bench *b);  /* bench_gpu_step.c */
int bench_passprof(struct bench *b); /* bench_gpu_step.c */
int bench_ablate(struct bench *b);   /* bench_gpu_step.c */
int bench_mega(struct bench *b);     /* bench_gpu_mega.c */
int bench_sample(struct bench *b);   /* bench_gpu_sample.c */
int bench_e2e(struct bench *b);      /* bench_gpu_e2e.c */

#endif
