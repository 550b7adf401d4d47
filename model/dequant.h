/* dequant.h - ggml block formats to f32 / bf16 (the GGUF loader dequantizes at load).
 *
 * Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K. The arithmetic follows
 * ggml's reference dequantize_row_* in f32 (scale from fp16, then d*q or d*q + m), so results equal
 * the `gguf` Python package's numpy dequantizer bit for bit; bf16 output rounds that f32 to nearest
 * even. */
#ifndef DS_DEQUANT_H
#define DS_DEQUANT_H

#include "ds_common.h"

/* GGML_TYPE_* numbers used here. */
enum {
	DS_GGML_F32 = 0,
	DS_GGML_F16 = 1,
	DS_GGML_Q4_0 = 2,
	DS_GGML_Q4_1 = 3,
	DS_GGML_Q8_0 = 8,
	DS_GGML_Q5_0 = 6,
	DS_GGML_Q5_1 = 7,
	DS_GGML_Q2_K = 10,
	DS_GGML_Q3_K = 11,
	DS_GGML_Q4_K = 12,
	DS_GGML_Q5_K = 13,
	DS_GGML_Q6_K = 14,
	DS_GGML_BF16 = 30,
};

/* True when ds_dequant_* handle ggml_type. */
bool ds_dequant_supported(uint32_t ggml_type);

/* Dequantizes n elements from src into dst. n must be a multiple of the type's block size and
 * src must hold n / blck * block_bytes bytes (the caller checks; ds_gguf_type_size gives both).
 * Returns DS_ERR_UNSUPPORTED for a type without a dequantizer, DS_ERR_INVALID for a bad n. */
enum ds_status ds_dequant_f32(uint32_t ggml_type, const void *src, size_t n, float *dst);
enum ds_status ds_dequant_bf16(uint32_t ggml_type, const void *src, size_t n, uint16_t *dst);

#endif
