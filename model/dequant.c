/* dequant.c - ggml block dequantizers (see dequant.h). Block layouts are read byte by byte
 * (little-endian fp16 scales), never through packed structs, so unaligned mmapped data is fine.
 * bf16 output goes through a small f32 staging buffer, one block at a time. */
#include "dequant.h"

#define QK 32
#define QK_K 256

static float f16_at(const uint8_t *p)
{
	return ds_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Each block function writes blck floats from one block. */
static void blk_q4_0(const uint8_t *b, float *y)
{
	float d = f16_at(b);
	const uint8_t *qs = b + 2;
	for (int j = 0; j < QK / 2; j++) {
		y[j] = (float)((int)(qs[j] & 0x0f) - 8) * d;
		y[j + QK / 2] = (float)((int)(qs[j] >> 4) - 8) * d;
	}
}

static void blk_q4_1(const uint8_t *b, float *y)
{
	float d = f16_at(b), m = f16_at(b + 2);
	const uint8_t *qs = b + 4;
	for (int j = 0; j < QK / 2; j++) {
		y[j] = (float)(qs[j] & 0x0f) * d + m;
		y[j + QK / 2] = (float)(qs[j] >> 4) * d + m;
	}
}

/* Q5_0 / Q5_1: the fifth bit of element j is bit j of the 32-bit qh. */
static void blk_q5(const uint8_t *b, float *y, bool has_min)
{
	float d = f16_at(b), m = has_min ? f16_at(b + 2) : 0.0f;
	const uint8_t *qhp = b + (has_min ? 4 : 2), *qs = qhp + 4;
	uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
	              (uint32_t)qhp[3] << 24;
	for (int j = 0; j < QK / 2; j++) {
		int h0 = (int)(((qh >> j) << 4) & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
		int x0 = (qs[j] & 0x0f) | h0, x1 = (qs[j] >> 4) | h1;
		if (has_min) {
			y[j] = (float)x0 * d + m;
			y[j + QK / 2] = (float)x1 * d + m;
		} else {
			y[j] = (float)(x0 - 16) * d;
			y[j + QK / 2] = (float)(x1 - 16) * d;
		}
	}
}

static void blk_q5_0(const uint8_t *b, float *y)
{
	blk_q5(b, y, false);
}

static void blk_q5_1(const uint8_t *b, float *y)
{
	blk_q5(b, y, true);
}

static void blk_q8_0(const uint8_t *b, float *y)
{
	float d = f16_at(b);
	const int8_t *qs = (const int8_t *)(b + 2);
	for (int j = 0; j < QK; j++)
		y[j] = (float)qs[j] * d;
}

static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

/* Q4_K: fp16 d, fp16 dmin, 12 bytes of packed 6-bit scales/mins, 128 bytes of nibbles. */
static void blk_q4_k(const uint8_t *b, float *y)
{
	float d = f16_at(b), dmin = f16_at(b + 2);
	const uint8_t *scales = b + 4, *q = b + 16;
	int is = 0;
	for (int j = 0; j < QK_K; j += 64) {
		uint8_t sc, m;
		scale_min_k4(is, scales, &sc, &m);
		float d1 = d * sc, m1 = dmin * m;
		scale_min_k4(is + 1, scales, &sc, &m);
		float d2 = d * sc, m2 = dmin * m;
		for (int l = 0; l < 32; l++)
			*y++ = d1 * (float)(q[l] & 0xf) - m1;
		for (int l = 0; l < 32; l++)
			*y++ = d2 * (float)(q[l] >> 4) - m2;
		q += 32;
		is += 2;
	}
}

/* Q2_K: 16 bytes of 4-bit scale/min pairs, 64 bytes of 2-bit values, fp16 d, fp16 dmin. */
static void blk_q2_k(const uint8_t *b, float *y)
{
	const uint8_t *scales = b, *q = b + 16;
	float d = f16_at(b + 80), dmin = f16_at(b + 82);
	int is = 0;
	for (int n = 0; n < QK_K; n += 128) {
		for (int shift = 0; shift < 8; shift += 2) {
			for (int half = 0; half < 2; half++) {
				uint8_t sc = scales[is++];
				float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
				for (int l = 0; l < 16; l++)
					*y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
			}
		}
		q += 32;
	}
}

/* Q3_K: 32 bytes of high bits (set = no -4), 64 bytes of 2-bit values, 12 bytes of packed
 * 6-bit signed scales, fp16 d. */
static void blk_q3_k(const uint8_t *b, float *y)
{
	const uint8_t *hm = b, *q = b + 32, *sp = b + 96;
	float d = f16_at(b + 108);
	int8_t sc[16];
	for (int j = 0; j < 16; j++) { /* low 4 bits from sp[0..7], high 2 bits from sp[8..11] */
		int lo = j < 8 ? sp[j] & 0xf : sp[j - 8] >> 4;
		int hi = (sp[8 + j % 4] >> (2 * (j / 4))) & 3;
		sc[j] = (int8_t)((lo | hi << 4) - 32);
	}
	int is = 0;
	unsigned m = 1;
	for (int n = 0; n < QK_K; n += 128) {
		for (int shift = 0; shift < 8; shift += 2) {
			for (int half = 0; half < 2; half++) {
				float dl = d * (float)sc[is++];
				for (int l = 0; l < 16; l++) {
					int k = l + 16 * half;
					int v = ((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4);
					*y++ = dl * (float)v;
				}
			}
			m <<= 1;
		}
		q += 32;
	}
}

/* Q5_K: Q4_K plus 32 bytes of fifth bits (bits 2k, 2k+1 for the k-th 64-element group). */
static void blk_q5_k(const uint8_t *b, float *y)
{
	float d = f16_at(b), dmin = f16_at(b + 2);
	const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
	int is = 0;
	unsigned u1 = 1, u2 = 2;
	for (int j = 0; j < QK_K; j += 64) {
		uint8_t sc, m;
		scale_min_k4(is, scales, &sc, &m);
		float d1 = d * sc, m1 = dmin * m;
		scale_min_k4(is + 1, scales, &sc, &m);
		float d2 = d * sc, m2 = dmin * m;
		for (int l = 0; l < 32; l++)
			*y++ = d1 * (float)((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
		for (int l = 0; l < 32; l++)
			*y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
		ql += 32;
		is += 2;
		u1 <<= 2;
		u2 <<= 2;
	}
}

/* Q6_K: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, fp16 d. */
static void blk_q6_k(const uint8_t *b, float *y)
{
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	float d = f16_at(b + 208);
	for (int n = 0; n < QK_K; n += 128) {
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = (int)((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
			int q2 = (int)((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
			int q3 = (int)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
			int q4 = (int)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
			y[l] = d * (float)sc[is] * (float)q1;
			y[l + 32] = d * (float)sc[is + 2] * (float)q2;
			y[l + 64] = d * (float)sc[is + 4] * (float)q3;
			y[l + 96] = d * (float)sc[is + 6] * (float)q4;
		}
		y += 128;
		ql += 64;
		qh += 32;
		sc += 8;
	}
}

struct fmt {
	uint32_t blck, bytes;
	void (*blk)(const uint8_t *b, float *y);
};

static const struct fmt *fmt_of(uint32_t t)
{
	static const struct fmt q4_0 = {QK, 18, blk_q4_0}, q4_1 = {QK, 20, blk_q4_1},
	                        q8_0 = {QK, 34, blk_q8_0}, q4_k = {QK_K, 144, blk_q4_k},
	                        q6_k = {QK_K, 210, blk_q6_k};
	static const struct fmt q5_0 = {QK, 22, blk_q5_0}, q5_1 = {QK, 24, blk_q5_1},
	                        q5_k = {QK_K, 176, blk_q5_k};
	static const struct fmt q2_k = {QK_K, 84, blk_q2_k}, q3_k = {QK_K, 110, blk_q3_k};
	switch (t) {
	case DS_GGML_Q2_K:
		return &q2_k;
	case DS_GGML_Q3_K:
		return &q3_k;
	case DS_GGML_Q5_0:
		return &q5_0;
	case DS_GGML_Q5_1:
		return &q5_1;
	case DS_GGML_Q5_K:
		return &q5_k;
	case DS_GGML_Q4_0:
		return &q4_0;
	case DS_GGML_Q4_1:
		return &q4_1;
	case DS_GGML_Q8_0:
		return &q8_0;
	case DS_GGML_Q4_K:
		return &q4_k;
	case DS_GGML_Q6_K:
		return &q6_k;
	default:
		return NULL;
	}
}

bool ds_dequant_supported(uint32_t t)
{
	return t == DS_GGML_F32 || t == DS_GGML_F16 || t == DS_GGML_BF16 || fmt_of(t) != NULL;
}

enum ds_status ds_dequant_f32(uint32_t t, const void *src, size_t n, float *dst)
{
	const uint8_t *s = src;
	switch (t) {
	case DS_GGML_F32:
		memcpy(dst, s, n * 4);
		return DS_OK;
	case DS_GGML_F16:
		for (size_t i = 0; i < n; i++)
			dst[i] = f16_at(s + 2 * i);
		return DS_OK;
	case DS_GGML_BF16:
		for (size_t i = 0; i < n; i++)
			dst[i] = ds_bf16_to_f32((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
		return DS_OK;
	}
	const struct fmt *f = fmt_of(t);
	if (!f)
		return DS_ERR_UNSUPPORTED;
	if (n % f->blck)
		return DS_ERR_INVALID;
	for (size_t b = 0; b < n / f->blck; b++)
		f->blk(s + b * f->bytes, dst + b * f->blck);
	return DS_OK;
}

enum ds_status ds_dequant_bf16(uint32_t t, const void *src, size_t n, uint16_t *dst)
{
	const uint8_t *s = src;
	if (t == DS_GGML_BF16) {
		for (size_t i = 0; i < n; i++)
			dst[i] = (uint16_t)(s[2 * i] | s[2 * i + 1] << 8);
		return DS_OK;
	}
	if (t == DS_GGML_F32 || t == DS_GGML_F16) {
		size_t esz = t == DS_GGML_F32 ? 4 : 2;
		for (size_t i = 0; i < n; i++) {
			float v;
			if (t == DS_GGML_F32)
				memcpy(&v, s + 4 * i, 4);
			else
				v = f16_at(s + esz * i);
			dst[i] = ds_f32_to_bf16(v);
		}
		return DS_OK;
	}
	const struct fmt *f = fmt_of(t);
	if (!f)
		return DS_ERR_UNSUPPORTED;
	if (n % f->blck)
		return DS_ERR_INVALID;
	float tmp[QK_K];
	for (size_t b = 0; b < n / f->blck; b++) {
		f->blk(s + b * f->bytes, tmp);
		for (uint32_t j = 0; j < f->blck; j++)
			dst[b * f->blck + j] = ds_f32_to_bf16(tmp[j]);
	}
	return DS_OK;
}
