/* ds_common.h - status codes, error text, assertions and bf16 helpers shared by every layer.
 *
 * Three error tiers (STYLE.md): DS_ASSERT/DS_ABORT for broken invariants, a CUDA check macro
 * in kernels/, and enum ds_status plus a struct ds_err message on every request path. */
#ifndef DS_COMMON_H
#define DS_COMMON_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <string.h>

#ifdef __CUDACC__
#define DS_HD __host__ __device__
#else
#define DS_HD
#endif

enum ds_status {
	DS_OK = 0,
	DS_ERR_INVALID,     /* bad argument or request */
	DS_ERR_NOMEM,       /* host or device allocation failed */
	DS_ERR_IO,          /* open/read/mmap failed */
	DS_ERR_FORMAT,      /* file content is malformed */
	DS_ERR_UNSUPPORTED, /* well-formed but not something we handle */
	DS_ERR_NOT_FOUND,   /* missing tensor, key or id */
	DS_ERR_FULL,        /* queue or pool full */
	DS_ERR_TOO_LONG,    /* request can never fit */
	DS_ERR_CANCELLED,
	DS_ERR_PRECONDITION, /* e.g. deterministic flag in fast mode */
	DS_ERR_DEVICE,      /* CUDA / cuBLAS failure */
	DS_ERR_INTERNAL,
};

/* Human-readable detail for a failed call; callers own it (usually on the stack). */
struct ds_err {
	char msg[512];
};

const char *ds_status_str(enum ds_status s);

/* Formats into err (if non-NULL) and returns s, so `return ds_errf(err, DS_ERR_IO, ...)` works. */
enum ds_status ds_errf(struct ds_err *err, enum ds_status s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

_Noreturn void ds_abort_at(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define DS_ABORT(...) ds_abort_at(__FILE__, __LINE__, __VA_ARGS__)
#define DS_ASSERT(x)                                                   \
	do {                                                           \
		if (!(x))                                              \
			ds_abort_at(__FILE__, __LINE__, "assert: %s", #x); \
	} while (0)

#define DS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define DS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DS_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- bf16 ---- */

/* bf16 is stored as its raw 16 bits. Conversion from f32 rounds to nearest even; NaN stays NaN. */
static inline DS_HD float ds_bf16_to_f32(uint16_t h)
{
	union {
		uint32_t u;
		float f;
	} v;
	v.u = (uint32_t)h << 16;
	return v.f;
}

static inline DS_HD uint16_t ds_f32_to_bf16(float f)
{
	union {
		uint32_t u;
		float f;
	} v;
	v.f = f;
	if ((v.u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
		return (uint16_t)((v.u >> 16) | 0x40u);
	uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
	return (uint16_t)((v.u + rounding) >> 16);
}

/* IEEE half to f32 (used by the loaders for fp16 checkpoints). */
float ds_f16_to_f32(uint16_t h);

#endif
