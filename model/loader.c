/* loader.c - ds_model_load: HF model directories (config.json + safetensors) and .gguf files.
 *
 * Weight files are mmapped and validated in full (model/safetensors.c) before any tensor is
 * used; the config's canonical tensor list (model/tensors.h) is then looked up in them, so
 * extra tensors are ignored and missing or mis-shaped ones are named. BF16 data stay zero-copy
 * pointers into the mapping; F16/F32 are rounded to bf16 (nearest even) into owned buffers.
 * ds_model_load_as(.., DS_DTYPE_F32, ..) instead keeps every tensor in f32 (owned buffers).
 * The identity is XXH3-128 over config.json's bytes and each file's safetensors header, shards
 * in file-name order, so it changes with any config or layout change but never reads weights. */
#include "gguf.h"
#include "hf.h"
#include "model_internal.h"
#include "safetensors.h"
#include "tensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define HF_MAX_JSON                                                                                \
	(64u << 20) /* config.json / index / synth files larger than this are refused              \
	             */
#define HF_PATH 4096

struct hf_load {
	const char *dir;
	char *config; /* config.json bytes */
	size_t config_len;
	json_t *index; /* model.safetensors.index.json, or NULL */
	char **shards; /* file names, sorted, unique */
	int n_shards;
	struct ds_st_file *files; /* (n_shards) */
	struct ds_model *m;
	enum ds_dtype wtype;
};

static bool hf_exists(const char *dir, const char *name)
{
	char p[HF_PATH];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return stat(p, &st) == 0;
}

/* Reads a small file whole (NUL-terminated); *buf is malloc'd. */
static enum ds_status hf_slurp(const char *path, char **buf, size_t *len, struct ds_err *err)
{
	*buf = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ds_errf(err, errno == ENOENT ? DS_ERR_NOT_FOUND : DS_ERR_IO,
		               "%s: cannot open: %s", path, strerror(errno));
	struct stat st;
	enum ds_status rv = DS_OK;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rv = ds_errf(err, DS_ERR_IO, "%s: not a regular file", path);
		goto out;
	}
	if ((uint64_t)st.st_size > HF_MAX_JSON) {
		rv = ds_errf(err, DS_ERR_FORMAT, "%s: %lld bytes is too large for a JSON file",
		             path, (long long)st.st_size);
		goto out;
	}
	size_t n = (size_t)st.st_size, got = 0;
	if (!(*buf = malloc(n + 1))) {
		rv = ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
		goto out;
	}
	while (got < n) {
		ssize_t r = read(fd, *buf + got, n - got);
		if (r <= 0) {
			rv = ds_errf(err, DS_ERR_IO, "%s: read failed: %s", path,
			             r == 0 ? "unexpected end of file" : strerror(errno));
			free(*buf);
			*buf = NULL;
			goto out;
		}
		got += (size_t)r;
	}
	(*buf)[n] = '\0';
	*len = n;
out:
	close(fd);
	return rv;
}

/* ---- deferred synthetic directories ---- */

static enum ds_status hf_load_deferred(struct hf_load *L, const struct ds_model_config *cfg,
                                       struct ds_model **out, struct ds_err *err)
{
	char path[HF_PATH], *text = NULL;
	size_t len;
	snprintf(path, sizeof(path), "%s/%s", L->dir, DS_HF_SYNTH);
	enum ds_status rv = hf_slurp(path, &text, &len, err);
	if (rv != DS_OK)
		return rv;
	json_error_t je;
	json_t *root = json_loadb(text, len, 0, &je);
	free(text);
	json_t *seed = json_object_get(root, "seed");
	if (!json_is_integer(seed) || json_integer_value(seed) < 0) {
		json_decref(root);
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: expected {\"seed\": <non-negative integer>}", path);
	}
	uint64_t s = (uint64_t)json_integer_value(seed);
	json_decref(root);

	int n = ds_tensor_count(cfg);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	if (!ts)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
	ds_tensor_list(cfg, ts);
	struct ds_model *m;
	if ((rv = ds_model_new(cfg, &m, err)) != DS_OK) {
		free(ts);
		return rv;
	}
	m->synthetic = true;
	m->deferred = true;
	m->synth_seed = s;
	snprintf(m->source, sizeof(m->source), "%s", L->dir);
	ds_synth_identity(m, ts, n);
	free(ts);
	*out = m;
	return DS_OK;
}

/* ---- shards ---- */

static int hf_cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static enum ds_status hf_add_shard(struct hf_load *L, const char *name, int cap, struct ds_err *err)
{
	for (int i = 0; i < L->n_shards; i++)
		if (strcmp(L->shards[i], name) == 0)
			return DS_OK;
	DS_ASSERT(L->n_shards < cap);
	if (!(L->shards[L->n_shards] = strdup(name)))
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", L->dir);
	L->n_shards++;
	return DS_OK;
}

/* The shard list: model.safetensors alone, or the files named by the index's weight_map. */
static enum ds_status hf_list_shards(struct hf_load *L, struct ds_err *err)
{
	enum ds_status rv;
	if (hf_exists(L->dir, DS_HF_WEIGHTS)) {
		if (!(L->shards = calloc(1, sizeof(char *))))
			return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", L->dir);
		return hf_add_shard(L, DS_HF_WEIGHTS, 1, err);
	}
	char path[HF_PATH], *text;
	size_t len;
	snprintf(path, sizeof(path), "%s/%s", L->dir, DS_HF_INDEX);
	if (!hf_exists(L->dir, DS_HF_INDEX))
		return ds_errf(err, DS_ERR_NOT_FOUND, "%s: no %s or %s in the model directory",
		               L->dir, DS_HF_WEIGHTS, DS_HF_INDEX);
	if ((rv = hf_slurp(path, &text, &len, err)) != DS_OK)
		return rv;
	json_error_t je;
	L->index = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	free(text);
	if (!L->index)
		return ds_errf(err, DS_ERR_FORMAT, "%s: invalid JSON: %s (line %d)", path, je.text,
		               je.line);
	json_t *wm = json_object_get(L->index, "weight_map");
	if (!json_is_object(wm) || json_object_size(wm) == 0)
		return ds_errf(err, DS_ERR_FORMAT, "%s: missing or empty weight_map object", path);
	int cap = (int)json_object_size(wm);
	if (!(L->shards = calloc((size_t)cap, sizeof(char *))))
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
	const char *key;
	json_t *val;
	json_object_foreach(wm, key, val)
	{
		const char *f = json_string_value(val);
		if (!f || !*f || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
			return ds_errf(
			    err, DS_ERR_FORMAT,
			    "%s: weight_map entry for tensor %s is not a plain file name", path,
			    key);
		if ((rv = hf_add_shard(L, f, cap, err)) != DS_OK)
			return rv;
	}
	qsort(L->shards, (size_t)L->n_shards, sizeof(char *), hf_cmp_str);
	return DS_OK;
}

/* A tensor the index assigns to shard `name` (for messages). */
static const char *hf_index_tensor_of(const struct hf_load *L, const char *name)
{
	json_t *wm = json_object_get(L->index, "weight_map");
	for (void *it = json_object_iter(wm); it; it = json_object_iter_next(wm, it))
		if (strcmp(json_string_value(json_object_iter_value(it)), name) == 0)
			return json_object_iter_key(it);
	return "(none)";
}

/* Maps and validates shard i into L->files[i]. */
static enum ds_status hf_map_shard(struct hf_load *L, int i, struct ds_err *err)
{
	char path[HF_PATH];
	snprintf(path, sizeof(path), "%s/%s", L->dir, L->shards[i]);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (L->index)
			return ds_errf(err, errno == ENOENT ? DS_ERR_NOT_FOUND : DS_ERR_IO,
			               "%s: cannot open shard listed in %s for tensor %s: %s", path,
			               DS_HF_INDEX, hf_index_tensor_of(L, L->shards[i]),
			               strerror(errno));
		return ds_errf(err, DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return ds_errf(err, DS_ERR_IO, "%s: not a regular file", path);
	}
	size_t size = (size_t)st.st_size;
	if (size < 8) {
		close(fd);
		return ds_errf(
		    err, DS_ERR_FORMAT,
		    "%s: %zu bytes is too short for a safetensors header length (truncated)", path,
		    size);
	}
	void *base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return ds_errf(err, DS_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
	if (ds_model_add_map(L->m, base, size) != DS_OK) {
		munmap(base, size);
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
	}
	return ds_st_parse(base, size, path, &L->files[i], err);
}

static void hf_identity(struct hf_load *L)
{
	XXH3_state_t *st = XXH3_createState();
	DS_ASSERT(st != NULL);
	XXH3_128bits_reset_withSeed(st, L->wtype == DS_DTYPE_F32 ? DS_MODEL_F32_ID_SEED : 0);
	XXH3_128bits_update(st, L->config, L->config_len);
	for (int i = 0; i < L->n_shards; i++) /* 8-byte length prefix and the JSON header */
		XXH3_128bits_update(st, L->files[i].header - 8, L->files[i].header_len + 8);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
	XXH3_freeState(st);
	memcpy(L->m->identity, c.digest, 16);
}

/* ---- tensors ---- */

static void hf_fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
	size_t l = (size_t)snprintf(buf, cap, "[");
	for (int i = 0; i < ndim && l < cap; i++)
		l += (size_t)snprintf(buf + l, cap - l, "%s%lld", i ? ", " : "",
		                      (long long)shape[i]);
	if (l < cap)
		snprintf(buf + l, cap - l, "]");
}

/* An f32 model's tensor: F32 copied, BF16 and F16 widened (exact), into an owned buffer. */
static enum ds_status hf_bind_f32(struct hf_load *L, const struct ds_tensor_desc *d,
                                  const struct ds_st_tensor *t, const char *path,
                                  const uint16_t **slot, struct ds_err *err)
{
	size_t numel = (size_t)ds_tensor_numel(d);
	float *buf = ds_model_alloc(L->m, numel * sizeof(float));
	if (!buf)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory for tensor %s", path, d->name);
	for (size_t i = 0; i < numel; i++) { /* memcpy: the mapping gives no alignment */
		uint16_t h;
		if (t->dtype == DS_ST_F32) {
			memcpy(&buf[i], t->data + 4 * i, 4);
			continue;
		}
		memcpy(&h, t->data + 2 * i, 2);
		buf[i] = t->dtype == DS_ST_BF16 ? ds_bf16_to_f32(h) : ds_f16_to_f32(h);
	}
	*slot = (const uint16_t *)(const void *)buf; /* f32 data: model.h wtype */
	return DS_OK;
}

/* Finds d in the shards, checks dtype and shape, and sets its weight pointer. */
static enum ds_status hf_bind_tensor(struct hf_load *L, const struct ds_tensor_desc *d,
                                     struct ds_err *err)
{
	int fi = 0;
	if (L->index) {
		json_t *v = json_object_get(json_object_get(L->index, "weight_map"), d->name);
		if (!v)
			return ds_errf(err, DS_ERR_NOT_FOUND,
			               "%s/%s: tensor %s is missing from weight_map", L->dir,
			               DS_HF_INDEX, d->name);
		const char *f = json_string_value(v);
		char **hit =
		    bsearch(&f, L->shards, (size_t)L->n_shards, sizeof(char *), hf_cmp_str);
		DS_ASSERT(hit != NULL); /* every weight_map value was added to the list */
		fi = (int)(hit - L->shards);
	}
	const struct ds_st_file *file = &L->files[fi];
	const struct ds_st_tensor *t = ds_st_find(file, d->name);
	if (!t)
		return ds_errf(err, DS_ERR_NOT_FOUND, "%s: tensor %s not found (required by %s)",
		               file->path, d->name, DS_HF_CONFIG);
	if (t->dtype == DS_ST_OTHER)
		return ds_errf(err, DS_ERR_UNSUPPORTED,
		               "%s: tensor %s has dtype %s (supported: BF16, F16, F32)", file->path,
		               d->name, t->dtype_name);
	bool same = t->ndim == d->ndim;
	for (int i = 0; same && i < d->ndim; i++)
		same = t->shape[i] == d->shape[i];
	if (!same) {
		char got[128], want[64];
		hf_fmt_shape(got, sizeof(got), t->ndim, t->shape);
		hf_fmt_shape(want, sizeof(want), d->ndim, d->shape);
		return ds_errf(err, DS_ERR_FORMAT, "%s: tensor %s has shape %s but %s implies %s",
		               file->path, d->name, got, DS_HF_CONFIG, want);
	}
	size_t numel = (size_t)ds_tensor_numel(d);
	const uint16_t **slot = ds_tensor_slot(&L->m->w, d);
	if (L->wtype == DS_DTYPE_F32)
		return hf_bind_f32(L, d, t, file->path, slot, err);
	if (t->dtype == DS_ST_BF16 && ((uintptr_t)t->data & 1u) == 0) {
		*slot = (const uint16_t *)(const void *)t->data;
		return DS_OK;
	}
	uint16_t *buf = ds_model_alloc(L->m, numel * sizeof(uint16_t));
	if (!buf)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory for tensor %s", file->path,
		               d->name);
	/* memcpy per element: the mapping gives no alignment guarantee */
	if (t->dtype == DS_ST_BF16) {
		memcpy(buf, t->data, numel * sizeof(uint16_t));
	} else if (t->dtype == DS_ST_F16) {
		for (size_t i = 0; i < numel; i++) {
			uint16_t h;
			memcpy(&h, t->data + 2 * i, 2);
			buf[i] = ds_f32_to_bf16(ds_f16_to_f32(h));
		}
	} else {
		for (size_t i = 0; i < numel; i++) {
			float f;
			memcpy(&f, t->data + 4 * i, 4);
			buf[i] = ds_f32_to_bf16(f);
		}
	}
	*slot = buf;
	return DS_OK;
}

static enum ds_status hf_load_weights(struct hf_load *L, const struct ds_model_config *cfg,
                                      struct ds_err *err)
{
	enum ds_status rv;
	if ((rv = hf_list_shards(L, err)) != DS_OK)
		return rv;
	if ((rv = ds_model_new(cfg, &L->m, err)) != DS_OK)
		return rv;
	L->m->wtype = L->wtype;
	snprintf(L->m->source, sizeof(L->m->source), "%s", L->dir);
	if (!(L->files = calloc((size_t)L->n_shards, sizeof(*L->files))))
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", L->dir);
	for (int i = 0; i < L->n_shards; i++)
		if ((rv = hf_map_shard(L, i, err)) != DS_OK)
			return rv;
	hf_identity(L);

	int n = ds_tensor_count(cfg);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	if (!ts)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", L->dir);
	ds_tensor_list(cfg, ts);
	for (int i = 0; i < n && rv == DS_OK; i++)
		rv = hf_bind_tensor(L, &ts[i], err);
	free(ts);
	if (rv == DS_OK && cfg->tie_embeddings)
		L->m->w.lm_head = L->m->w.tok_embd;
	return rv;
}

/* ---- entry point ---- */

static enum ds_status hf_load_dir(const char *dir, enum ds_dtype wtype, struct ds_model **out,
                                  struct ds_err *err)
{
	struct hf_load L = {.dir = dir, .wtype = wtype};
	struct ds_model_config cfg;
	char path[HF_PATH];
	enum ds_status rv;
	snprintf(path, sizeof(path), "%s/%s", dir, DS_HF_CONFIG);
	if ((rv = hf_slurp(path, &L.config, &L.config_len, err)) != DS_OK)
		goto out;
	if ((rv = ds_hf_config_parse(L.config, L.config_len, path, &cfg, err)) != DS_OK)
		goto out;
	struct ds_err cerr;
	if ((rv = ds_model_config_check(&cfg, &cerr)) != DS_OK) {
		ds_errf(err, rv, "%s: %s", path, cerr.msg);
		goto out;
	}
	if (hf_exists(dir, DS_HF_SYNTH) && !hf_exists(dir, DS_HF_WEIGHTS) &&
	    !hf_exists(dir, DS_HF_INDEX)) {
		if (wtype != DS_DTYPE_BF16) {
			rv = ds_errf(err, DS_ERR_UNSUPPORTED,
			             "%s: a synthetic model without weight files is bf16 only "
			             "(precision %s asked)",
			             dir, ds_dtype_name(wtype));
			goto out;
		}
		rv = hf_load_deferred(&L, &cfg, out, err);
		goto out;
	}
	if ((rv = hf_load_weights(&L, &cfg, err)) == DS_OK) {
		*out = L.m;
		L.m = NULL;
	}
out:
	ds_model_free(L.m);
	for (int i = 0; L.files && i < L.n_shards; i++)
		ds_st_file_free(&L.files[i]);
	free(L.files);
	for (int i = 0; i < L.n_shards; i++)
		free(L.shards[i]);
	free(L.shards);
	json_decref(L.index);
	free(L.config);
	return rv;
}

const char *ds_dtype_name(enum ds_dtype t)
{
	return t == DS_DTYPE_F32 ? "f32" : "bf16";
}

enum ds_status ds_dtype_parse(const char *s, enum ds_dtype *out, struct ds_err *err)
{
	if (strcmp(s, "bf16") == 0)
		*out = DS_DTYPE_BF16;
	else if (strcmp(s, "f32") == 0 || strcmp(s, "fp32") == 0)
		*out = DS_DTYPE_F32;
	else
		return ds_errf(err, DS_ERR_INVALID, "precision '%s': expected bf16 or f32", s);
	return DS_OK;
}

enum ds_status ds_model_load_as(const char *path, enum ds_dtype wtype, struct ds_model **out,
                                struct ds_err *err)
{
	*out = NULL;
	if (wtype != DS_DTYPE_BF16 && wtype != DS_DTYPE_F32)
		return ds_errf(err, DS_ERR_INVALID, "%s: unknown weight type %d", path, (int)wtype);
	size_t n = strlen(path);
	if (n >= 5 && strcmp(path + n - 5, ".gguf") == 0)
		return ds_model_load_gguf_as(path, wtype, out, err);
	if (n + 64 >= HF_PATH)
		return ds_errf(err, DS_ERR_INVALID, "%s: path is too long", path);
	return hf_load_dir(path, wtype, out, err);
}

enum ds_status ds_model_load(const char *path, struct ds_model **out, struct ds_err *err)
{
	return ds_model_load_as(path, DS_DTYPE_BF16, out, err);
}
