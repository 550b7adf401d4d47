/* gpu_util.h - helpers for the gpu suite: checked CUDA calls, device buffers with guard bytes,
 * seeded random data (never zeros), and bf16 comparisons. Header-only (static functions). */
#ifndef DS_GPU_UTIL_H
#define DS_GPU_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "ds_common.h"
#include "rng.h"

#define CK(expr)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (expr);                                                           \
		if (e_ != cudaSuccess)                                                             \
			fail_msg("%s:%d: %s: %s", __FILE__, __LINE__, #expr,                       \
			         cudaGetErrorString(e_));                                          \
	} while (0)

#define GUARD_BYTES 4096
#define GUARD_BYTE 0xA5

/* Device buffer of n bytes followed by GUARD_BYTES of a known pattern. */
static inline void *dev_alloc_guarded(size_t n)
{
	void *p = NULL;
	CK(cudaMalloc(&p, n + GUARD_BYTES));
	CK(cudaMemset(p, 0x7f, n)); /* poison: huge floats / NaN-ish bf16 */
	CK(cudaMemset((uint8_t *)p + n, GUARD_BYTE, GUARD_BYTES));
	return p;
}

static inline void dev_check_guard(const void *p, size_t n)
{
	uint8_t g[GUARD_BYTES];
	CK(cudaMemcpy(g, (const uint8_t *)p + n, GUARD_BYTES, cudaMemcpyDeviceToHost));
	for (int i = 0; i < GUARD_BYTES; i++)
		if (g[i] != GUARD_BYTE)
			fail_msg("guard byte %d after a %zu-byte output was overwritten", i, n);
}

static inline void *to_dev(const void *h, size_t n)
{
	void *p = NULL;
	CK(cudaMalloc(&p, n ? n : 1));
	CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
	return p;
}

static inline void from_dev(void *h, const void *d, size_t n)
{
	CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

/* Uniform in [-a, a), never exactly 0, from a counter-based hash. */
static inline float rnd(uint64_t seed, uint64_t i, float a)
{
	float u = ds_hash_unit_pm1(ds_hash3(seed, 0x5eed, i));
	if (u == 0.0f)
		u = 0.5f;
	return a * u;
}

static inline void fill_f32(float *x, size_t n, uint64_t seed, float a)
{
	for (size_t i = 0; i < n; i++)
		x[i] = rnd(seed, i, a);
}

static inline void fill_bf16(uint16_t *x, size_t n, uint64_t seed, float a)
{
	for (size_t i = 0; i < n; i++)
		x[i] = ds_f32_to_bf16(rnd(seed, i, a));
}

static inline float bf(uint16_t h)
{
	return ds_bf16_to_f32(h);
}

/* bf16 values agree within ulps units in the last place (of the larger magnitude). */
static inline bool bf16_close(uint16_t a, uint16_t b, int ulps)
{
	float x = bf(a), y = bf(b);
	if (isnan(x) || isnan(y))
		return false;
	float m = fmaxf(fabsf(x), fabsf(y));
	if (m < 1e-30f)
		return true;
	int e;
	frexpf(m, &e);
	float ulp = ldexpf(1.0f, e - 8);
	return fabsf(x - y) <= ulps * ulp;
}

#endif
