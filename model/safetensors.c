/* safetensors.c - safetensors header validation and writing (see safetensors.h).
 *
 * Every check runs on integers before a pointer is formed, so a malformed or truncated file
 * yields a message, never an out-of-bounds read. The JSON is parsed by jansson with
 * duplicate keys rejected (two entries with one name would make lookups ambiguous). */
#include "safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>

static const struct {
	const char *name;
	int size;
} st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8},
};

int ds_st_dtype_size(const char *dtype_name)
{
	for (size_t i = 0; i < DS_ARRAY_LEN(st_dtypes); i++)
		if (strcmp(dtype_name, st_dtypes[i].name) == 0)
			return st_dtypes[i].size;
	return 0;
}

static enum ds_st_dtype st_dtype_kind(const char *name)
{
	if (strcmp(name, "BF16") == 0)
		return DS_ST_BF16;
	if (strcmp(name, "F16") == 0)
		return DS_ST_F16;
	if (strcmp(name, "F32") == 0)
		return DS_ST_F32;
	return DS_ST_OTHER;
}

void ds_st_file_free(struct ds_st_file *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->n_tensors; i++)
		free(f->tensors[i].name);
	free(f->tensors);
	f->tensors = NULL;
	f->n_tensors = 0;
}

const struct ds_st_tensor *ds_st_find(const struct ds_st_file *f, const char *name)
{
	for (int i = 0; i < f->n_tensors; i++)
		if (strcmp(f->tensors[i].name, name) == 0)
			return &f->tensors[i];
	return NULL;
}

/* A non-negative JSON integer, or false. */
static bool st_json_u64(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

/* Parses one header entry into t (name already set). */
static enum ds_status st_entry_parse(struct ds_st_file *f, json_t *val, struct ds_st_tensor *t,
                                     struct ds_err *err)
{
	const char *p = f->path, *nm = t->name;
	if (!json_is_object(val))
		return ds_errf(err, DS_ERR_FORMAT, "%s: tensor %s: header entry is not an object",
		               p, nm);
	json_t *dt = json_object_get(val, "dtype");
	json_t *sh = json_object_get(val, "shape");
	json_t *off = json_object_get(val, "data_offsets");
	if (!json_is_string(dt))
		return ds_errf(err, DS_ERR_FORMAT, "%s: tensor %s: missing or non-string dtype", p,
		               nm);
	if (!json_is_array(sh))
		return ds_errf(err, DS_ERR_FORMAT, "%s: tensor %s: missing or non-array shape", p,
		               nm);
	if (!json_is_array(off) || json_array_size(off) != 2)
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: tensor %s: data_offsets must be [begin, end]", p, nm);
	snprintf(t->dtype_name, sizeof(t->dtype_name), "%s", json_string_value(dt));
	t->dtype = st_dtype_kind(json_string_value(dt));

	size_t nd = json_array_size(sh);
	if (nd > DS_ST_MAX_DIMS)
		return ds_errf(err, DS_ERR_FORMAT, "%s: tensor %s: %zu dimensions (at most %d)", p,
		               nm, nd, DS_ST_MAX_DIMS);
	t->ndim = (int)nd;
	uint64_t numel = 1;
	for (size_t i = 0; i < nd; i++) {
		uint64_t d;
		if (!st_json_u64(json_array_get(sh, i), &d))
			return ds_errf(err, DS_ERR_FORMAT,
			               "%s: tensor %s: shape[%zu] is not a non-negative integer", p,
			               nm, i);
		if (d != 0 && numel > (UINT64_MAX / 16) / d)
			return ds_errf(err, DS_ERR_FORMAT, "%s: tensor %s: shape is too large", p,
			               nm);
		numel *= d;
		t->shape[i] = (int64_t)d;
	}
	if (!st_json_u64(json_array_get(off, 0), &t->begin) ||
	    !st_json_u64(json_array_get(off, 1), &t->end))
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: tensor %s: data_offsets are not non-negative integers", p, nm);
	if (t->begin > t->end || t->end > f->data_len)
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
		               "] fall outside the %" PRIu64 "-byte data section (truncated file?)",
		               p, nm, t->begin, t->end, f->data_len);
	int esize = ds_st_dtype_size(t->dtype_name);
	if (esize > 0 && numel * (uint64_t)esize != t->end - t->begin)
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: tensor %s: %" PRIu64 " elements of %s need %" PRIu64
		               " bytes but data_offsets span %" PRIu64,
		               p, nm, numel, t->dtype_name, numel * (uint64_t)esize,
		               t->end - t->begin);
	t->data = f->data + t->begin;
	return DS_OK;
}

static int st_cmp_begin(const void *a, const void *b)
{
	const struct ds_st_tensor *x = *(const struct ds_st_tensor *const *)a;
	const struct ds_st_tensor *y = *(const struct ds_st_tensor *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* No two non-empty byte ranges may share a byte. */
static enum ds_status st_check_overlap(struct ds_st_file *f, struct ds_err *err)
{
	if (f->n_tensors < 2)
		return DS_OK;
	const struct ds_st_tensor **order = malloc((size_t)f->n_tensors * sizeof(*order));
	if (!order)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", f->path);
	int n = 0;
	for (int i = 0; i < f->n_tensors; i++)
		if (f->tensors[i].end > f->tensors[i].begin)
			order[n++] = &f->tensors[i];
	qsort(order, (size_t)n, sizeof(*order), st_cmp_begin);
	enum ds_status rv = DS_OK;
	for (int i = 0; i + 1 < n; i++) {
		if (order[i]->end > order[i + 1]->begin) {
			rv = ds_errf(err, DS_ERR_FORMAT,
			             "%s: tensors %s [%" PRIu64 ", %" PRIu64 ") and %s [%" PRIu64
			             ", %" PRIu64 ") have overlapping data_offsets",
			             f->path, order[i]->name, order[i]->begin, order[i]->end,
			             order[i + 1]->name, order[i + 1]->begin, order[i + 1]->end);
			break;
		}
	}
	free(order);
	return rv;
}

enum ds_status ds_st_parse(const uint8_t *buf, size_t len, const char *path, struct ds_st_file *f,
                           struct ds_err *err)
{
	enum ds_status rv;
	json_t *root = NULL;
	memset(f, 0, sizeof(*f));
	snprintf(f->path, sizeof(f->path), "%s", path);
	if (len < 8)
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: %zu bytes is too short for a safetensors header length", path,
		               len);
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | buf[i];
	if (hlen < 2)
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: bad header length %" PRIu64 " (too small for a JSON object)",
		               path, hlen);
	if (hlen > (uint64_t)len - 8)
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: bad header length %" PRIu64
		               ": exceeds the %zu-byte file (truncated?)",
		               path, hlen, len);
	f->header = buf + 8;
	f->header_len = hlen;
	f->data = buf + 8 + hlen;
	f->data_len = (uint64_t)len - 8 - hlen;

	json_error_t je;
	root = json_loadb((const char *)f->header, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		rv = ds_errf(err, DS_ERR_FORMAT, "%s: header is not valid JSON: %s (byte %d)", path,
		             je.text, je.position);
		goto fail;
	}
	if (!json_is_object(root)) {
		rv = ds_errf(err, DS_ERR_FORMAT, "%s: header is not a JSON object", path);
		goto fail;
	}
	size_t cap = json_object_size(root);
	f->tensors = calloc(cap ? cap : 1, sizeof(*f->tensors));
	if (!f->tensors) {
		rv = ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
		goto fail;
	}
	const char *key;
	json_t *val;
	json_object_foreach(root, key, val)
	{
		if (strcmp(key, "__metadata__") == 0)
			continue;
		struct ds_st_tensor *t = &f->tensors[f->n_tensors];
		if (!(t->name = strdup(key))) {
			rv = ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
			goto fail;
		}
		f->n_tensors++;
		if ((rv = st_entry_parse(f, val, t, err)) != DS_OK)
			goto fail;
	}
	if ((rv = st_check_overlap(f, err)) != DS_OK)
		goto fail;
	json_decref(root);
	return DS_OK;
fail:
	json_decref(root);
	ds_st_file_free(f);
	memset(f, 0, sizeof(*f));
	return rv;
}

/* ---- writer ---- */

static bool st_needs_escape(const char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
			return true;
	return false;
}

enum ds_status ds_st_write_header(FILE *fp, const char *path, const struct ds_st_entry *e, int n,
                                  const char *const (*meta)[2], int n_meta, struct ds_err *err)
{
	size_t cap = 64;
	for (int i = 0; i < n_meta; i++) {
		if (st_needs_escape(meta[i][0]) || st_needs_escape(meta[i][1]))
			return ds_errf(err, DS_ERR_INVALID, "%s: metadata %s needs JSON escaping",
			               path, meta[i][0]);
		cap += strlen(meta[i][0]) + strlen(meta[i][1]) + 8;
	}
	for (int i = 0; i < n; i++) {
		if (st_needs_escape(e[i].name))
			return ds_errf(err, DS_ERR_INVALID,
			               "%s: tensor name %s needs JSON escaping", path, e[i].name);
		cap += strlen(e[i].name) + strlen(e[i].dtype_name) + 128;
	}
	char *h = malloc(cap + 8);
	if (!h)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
	size_t len = (size_t)snprintf(h, cap, "{\"__metadata__\":{\"format\":\"pt\"");
	for (int i = 0; i < n_meta; i++)
		len +=
		    (size_t)snprintf(h + len, cap - len, ",\"%s\":\"%s\"", meta[i][0], meta[i][1]);
	len += (size_t)snprintf(h + len, cap - len, "}");
	uint64_t off = 0;
	for (int i = 0; i < n; i++) {
		len += (size_t)snprintf(h + len, cap - len,
		                        ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRId64, e[i].name,
		                        e[i].dtype_name, e[i].shape[0]);
		if (e[i].ndim == 2)
			len += (size_t)snprintf(h + len, cap - len, ",%" PRId64, e[i].shape[1]);
		len += (size_t)snprintf(h + len, cap - len,
		                        "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off,
		                        off + e[i].nbytes);
		off += e[i].nbytes;
	}
	h[len++] = '}';
	while ((8 + len) % 8 != 0) /* data section 8-byte aligned */
		h[len++] = ' ';
	uint8_t pre[8];
	for (int i = 0; i < 8; i++)
		pre[i] = (uint8_t)((uint64_t)len >> (8 * i));
	bool ok = fwrite(pre, 1, 8, fp) == 8 && fwrite(h, 1, len, fp) == len;
	free(h);
	if (!ok)
		return ds_errf(err, DS_ERR_IO, "%s: write failed", path);
	return DS_OK;
}
