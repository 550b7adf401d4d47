/* gguf.h - a bounds-checked GGUF (v2/v3) reader over an mmapped file.
 *
 * Parsing validates every offset and length before use; a truncated or corrupt file yields
 * DS_ERR_FORMAT with a message naming the file and the section, never a crash. Strings and
 * arrays point into the mapping (not NUL-terminated). */
#ifndef DS_GGUF_H
#define DS_GGUF_H

#include "ds_common.h"

enum ds_gguf_type {
	DS_GGUF_UINT8 = 0, DS_GGUF_INT8 = 1, DS_GGUF_UINT16 = 2, DS_GGUF_INT16 = 3,
	DS_GGUF_UINT32 = 4, DS_GGUF_INT32 = 5, DS_GGUF_FLOAT32 = 6, DS_GGUF_BOOL = 7,
	DS_GGUF_STRING = 8, DS_GGUF_ARRAY = 9, DS_GGUF_UINT64 = 10, DS_GGUF_INT64 = 11,
	DS_GGUF_FLOAT64 = 12,
};

struct ds_gguf_str {
	const char *p; /* into the mapping, not NUL-terminated */
	uint64_t len;
};

struct ds_gguf_kv {
	struct ds_gguf_str key;
	enum ds_gguf_type type;
	enum ds_gguf_type arr_type; /* element type when type == ARRAY */
	uint64_t arr_len;
	const uint8_t *data;        /* scalar value, or first array element (strings: first len) */
	uint64_t data_len;          /* bytes spanned by the value */
	/* added (issue 8): string arrays only, offset of each element from data (parse-time
	 * index, so ds_gguf_arr_str is O(1)); NULL otherwise */
	const uint64_t *str_offs;
};

struct ds_gguf_tensor {
	struct ds_gguf_str name;
	uint32_t n_dims;
	uint64_t dims[4];   /* GGUF order: dims[0] is the fastest-varying (row length) */
	uint32_t ggml_type; /* GGML_TYPE_* numbering (F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30) */
	uint64_t offset;    /* relative to the data section */
	const uint8_t *data;
	uint64_t nbytes;
};

struct ds_gguf {
	char path[256];
	uint32_t version;
	uint64_t n_kv, n_tensors;
	struct ds_gguf_kv *kv;
	struct ds_gguf_tensor *tensors;
	uint64_t alignment;
	const uint8_t *base; /* mapping */
	size_t size;
	/* added (issue 8) */
	uint64_t info_len;    /* bytes of header + metadata + tensor infos (the model identity) */
	uint64_t data_offset; /* start of the data section (info_len rounded up to alignment) */
};

/* Maps and parses path. On success *out owns the mapping; free with ds_gguf_close. */
enum ds_status ds_gguf_open(const char *path, struct ds_gguf **out, struct ds_err *err);
/* Parses an in-memory image (not owned; must outlive the result). Used by the fuzz and
 * truncation tests. */
enum ds_status ds_gguf_parse(const uint8_t *buf, size_t len, const char *name,
			     struct ds_gguf **out, struct ds_err *err);
void ds_gguf_close(struct ds_gguf *g);

/* Lookups return NULL / DS_ERR_NOT_FOUND when the key is absent, DS_ERR_FORMAT on a type
 * mismatch. Integer getters accept any integer type that fits. */
const struct ds_gguf_kv *ds_gguf_find(const struct ds_gguf *g, const char *key);
enum ds_status ds_gguf_get_u64(const struct ds_gguf *g, const char *key, uint64_t *out);
enum ds_status ds_gguf_get_f32(const struct ds_gguf *g, const char *key, float *out);
enum ds_status ds_gguf_get_str(const struct ds_gguf *g, const char *key, struct ds_gguf_str *out);
/* i-th string of a string array kv (bounds-checked walk; O(i) the first time, cached after). */
enum ds_status ds_gguf_arr_str(const struct ds_gguf_kv *kv, uint64_t i, struct ds_gguf_str *out);
const struct ds_gguf_tensor *ds_gguf_find_tensor(const struct ds_gguf *g, const char *name);

/* added (issue 8): ggml type table. ds_gguf_type_size gives elements and bytes per block
 * (DS_ERR_UNSUPPORTED for an unknown type); ds_gguf_type_name gives "Q4_1", ... or "unknown". */
enum ds_status ds_gguf_type_size(uint32_t ggml_type, uint32_t *blck, uint32_t *bytes);
const char *ds_gguf_type_name(uint32_t ggml_type);

/* Model loading from GGUF (model/gguf_model.c): maps llama.cpp tensor names onto
 * struct ds_model, dequantizing to bf16 and undoing the Q/K RoPE permutation. */
struct ds_model;
enum ds_status ds_model_load_gguf(const char *path, struct ds_model **out, struct ds_err *err);

/* added (issue 8): undoes llama.cpp's Q/K row permutation for n_head heads of head_dim rows of
 * row_len bf16 values: GGUF row h*head_dim + 2j + s -> HF row h*head_dim + s*head_dim/2 + j. */
void ds_gguf_unpermute_rows(uint16_t *dst, const uint16_t *src, int n_head, int head_dim,
			    int row_len);

#endif
