/* gguf.c - bounds-checked GGUF v2/v3 parser over an mmapped file or a caller's buffer.
 *
 * Every read goes through a cursor that checks `need <= len - pos` before touching memory, so a
 * truncated or corrupt file ends in DS_ERR_FORMAT naming the file, the section and the entry,
 * never in an out-of-bounds read. Counts read from the file are never trusted for allocation
 * before they are checked against the bytes that remain (each entry takes at least a few bytes),
 * so a forged count cannot make us allocate gigabytes. String arrays get an offset index at
 * parse time so ds_gguf_arr_str is O(1). */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* Private parse state: the public struct plus what the parser owns. */
struct gguf_priv {
	struct ds_gguf pub;
	bool owns_map;
	uint64_t *str_offs; /* offsets for every string-array element, shared by all kvs */
};

struct cursor {
	const uint8_t *buf;
	size_t len, pos;
	const char *name;    /* file name for messages */
	const char *section; /* "header", "metadata", "tensor info", ... */
	uint64_t entry;      /* index within the section, for messages */
	struct ds_err *err;
};

static enum ds_status cur_fail(struct cursor *c, const char *what)
{
	return ds_errf(c->err, DS_ERR_FORMAT, "%s: GGUF %s entry %llu: %s (at byte %zu of %zu)",
	               c->name, c->section, (unsigned long long)c->entry, what, c->pos, c->len);
}

static enum ds_status cur_need(struct cursor *c, uint64_t n, const char *what)
{
	if (n > (uint64_t)(c->len - c->pos))
		return cur_fail(c, what);
	return DS_OK;
}

static uint32_t rd_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd_u64(const uint8_t *p)
{
	return (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32;
}

static enum ds_status cur_u32(struct cursor *c, uint32_t *v, const char *what)
{
	enum ds_status s = cur_need(c, 4, what);
	if (s)
		return s;
	*v = rd_u32(c->buf + c->pos);
	c->pos += 4;
	return DS_OK;
}

static enum ds_status cur_u64(struct cursor *c, uint64_t *v, const char *what)
{
	enum ds_status s = cur_need(c, 8, what);
	if (s)
		return s;
	*v = rd_u64(c->buf + c->pos);
	c->pos += 8;
	return DS_OK;
}

static enum ds_status cur_str(struct cursor *c, struct ds_gguf_str *out, const char *what)
{
	uint64_t n;
	enum ds_status s = cur_u64(c, &n, what);
	if (s)
		return s;
	if ((s = cur_need(c, n, what)))
		return s;
	out->p = (const char *)c->buf + c->pos;
	out->len = n;
	c->pos += (size_t)n;
	return DS_OK;
}

/* Size of a scalar metadata value; 0 for STRING/ARRAY/unknown. */
static uint64_t scalar_size(uint32_t t)
{
	switch (t) {
	case DS_GGUF_UINT8:
	case DS_GGUF_INT8:
	case DS_GGUF_BOOL:
		return 1;
	case DS_GGUF_UINT16:
	case DS_GGUF_INT16:
		return 2;
	case DS_GGUF_UINT32:
	case DS_GGUF_INT32:
	case DS_GGUF_FLOAT32:
		return 4;
	case DS_GGUF_UINT64:
	case DS_GGUF_INT64:
	case DS_GGUF_FLOAT64:
		return 8;
	default:
		return 0;
	}
}

/* ---- ggml tensor types ---- */

struct ggml_type_info {
	const char *name;
	uint32_t blck;  /* elements per block */
	uint32_t bytes; /* bytes per block */
};

/* Indexed by GGML_TYPE_*; zero entries are removed or unknown types. */
static const struct ggml_type_info ggml_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},
};

const char *ds_gguf_type_name(uint32_t ggml_type)
{
	if (ggml_type < DS_ARRAY_LEN(ggml_types) && ggml_types[ggml_type].name)
		return ggml_types[ggml_type].name;
	return "unknown";
}

enum ds_status ds_gguf_type_size(uint32_t ggml_type, uint32_t *blck, uint32_t *bytes)
{
	if (ggml_type >= DS_ARRAY_LEN(ggml_types) || !ggml_types[ggml_type].name)
		return DS_ERR_UNSUPPORTED;
	*blck = ggml_types[ggml_type].blck;
	*bytes = ggml_types[ggml_type].bytes;
	return DS_OK;
}

/* ---- sections ---- */

static enum ds_status parse_kv(struct cursor *c, struct ds_gguf_kv *kv, uint64_t **offs,
                               uint64_t *n_offs, uint64_t *cap_offs)
{
	enum ds_status s;
	uint32_t type;
	if ((s = cur_str(c, &kv->key, "key")))
		return s;
	if ((s = cur_u32(c, &type, "value type")))
		return s;
	kv->type = (enum ds_gguf_type)type;
	kv->str_offs = NULL;
	if (type == DS_GGUF_STRING) {
		struct ds_gguf_str v;
		kv->data = c->buf + c->pos;
		size_t start = c->pos;
		if ((s = cur_str(c, &v, "string value")))
			return s;
		kv->data_len = c->pos - start;
		return DS_OK;
	}
	if (type != DS_GGUF_ARRAY) {
		uint64_t sz = scalar_size(type);
		if (!sz)
			return cur_fail(c, "unknown value type");
		if ((s = cur_need(c, sz, "scalar value")))
			return s;
		kv->data = c->buf + c->pos;
		kv->data_len = sz;
		c->pos += sz;
		return DS_OK;
	}
	uint32_t at;
	uint64_t n;
	if ((s = cur_u32(c, &at, "array element type")) || (s = cur_u64(c, &n, "array length")))
		return s;
	kv->arr_type = (enum ds_gguf_type)at;
	kv->arr_len = n;
	kv->data = c->buf + c->pos;
	size_t start = c->pos;
	if (at == DS_GGUF_STRING) {
		/* each string takes at least its 8-byte length: reject forged counts before
		 * allocating the index */
		if (n > (c->len - c->pos) / 8)
			return cur_fail(c, "string array length exceeds the file");
		if (*n_offs + n > *cap_offs) {
			uint64_t cap = DS_MAX(*cap_offs * 2, *n_offs + n);
			uint64_t *p = realloc(*offs, cap * sizeof(*p));
			if (!p)
				return ds_errf(c->err, DS_ERR_NOMEM, "%s: GGUF: out of memory",
				               c->name);
			*offs = p;
			*cap_offs = cap;
		}
		/* store the base index now; the pointer is fixed up once all kvs are parsed
		 * (the array may still move). Empty arrays keep NULL. */
		if (n > 0)
			kv->str_offs = (const uint64_t *)(uintptr_t)(*n_offs + 1);
		for (uint64_t i = 0; i < n; i++) {
			struct ds_gguf_str v;
			(*offs)[(*n_offs)++] = c->pos - start;
			if ((s = cur_str(c, &v, "string array element")))
				return s;
		}
	} else if (at == DS_GGUF_ARRAY) {
		return cur_fail(c, "nested arrays are not supported");
	} else {
		uint64_t sz = scalar_size(at);
		if (!sz)
			return cur_fail(c, "unknown array element type");
		if (n > (c->len - c->pos) / sz)
			return cur_fail(c, "array data exceeds the file");
		c->pos += (size_t)(n * sz);
	}
	kv->data_len = c->pos - start;
	return DS_OK;
}

static enum ds_status parse_tensor_info(struct cursor *c, struct ds_gguf_tensor *t)
{
	enum ds_status s;
	if ((s = cur_str(c, &t->name, "tensor name")) || (s = cur_u32(c, &t->n_dims, "n_dims")))
		return s;
	if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
		return cur_fail(c, "n_dims must be 1..4");
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
		t->dims[d] = 1;
	for (uint32_t d = 0; d < t->n_dims; d++)
		if ((s = cur_u64(c, &t->dims[d], "dimension")))
			return s;
	if ((s = cur_u32(c, &t->ggml_type, "tensor type")) ||
	    (s = cur_u64(c, &t->offset, "offset")))
		return s;
	return DS_OK;
}

/* Validates a tensor's shape and type and computes nbytes (no data access). */
static enum ds_status tensor_size(struct cursor *c, struct ds_gguf_tensor *t)
{
	uint32_t blck, bytes;
	if (ds_gguf_type_size(t->ggml_type, &blck, &bytes))
		return ds_errf(c->err, DS_ERR_UNSUPPORTED,
		               "%s: GGUF tensor '%.*s': unknown ggml type %u", c->name,
		               (int)DS_MIN(t->name.len, 96), t->name.p, t->ggml_type);
	uint64_t ne = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		if (t->dims[d] == 0 || t->dims[d] > (UINT64_C(1) << 40) ||
		    ne > (UINT64_C(1) << 62) / t->dims[d])
			return cur_fail(c, "tensor dimensions are zero or overflow");
		ne *= t->dims[d];
	}
	if (t->dims[0] % blck)
		return cur_fail(c, "row length is not a multiple of the type's block size");
	t->nbytes = ne / blck * bytes;
	return DS_OK;
}

static void fixup_str_offs(struct ds_gguf *g, const uint64_t *offs)
{
	for (uint64_t i = 0; i < g->n_kv; i++) {
		struct ds_gguf_kv *kv = &g->kv[i];
		if (kv->str_offs)
			kv->str_offs = offs + ((uintptr_t)kv->str_offs - 1);
	}
}

static enum ds_status parse(struct gguf_priv *P, struct ds_err *err)
{
	struct ds_gguf *g = &P->pub;
	struct cursor c = {
	    .buf = g->base, .len = g->size, .name = g->path, .section = "header", .err = err};
	enum ds_status s;
	uint32_t magic;
	uint64_t n_offs = 0, cap_offs = 0;
	if ((s = cur_u32(&c, &magic, "magic")))
		return s;
	if (magic != GGUF_MAGIC)
		return ds_errf(err, DS_ERR_FORMAT, "%s: not a GGUF file (bad magic)", g->path);
	if ((s = cur_u32(&c, &g->version, "version")))
		return s;
	if (g->version == 1)
		return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported",
		               g->path);
	if (g->version != 2 && g->version != 3)
		return ds_errf(
		    err, DS_ERR_FORMAT,
		    "%s: GGUF header: unknown version %u (big-endian files are not supported)",
		    g->path, g->version);
	if ((s = cur_u64(&c, &g->n_tensors, "tensor count")) ||
	    (s = cur_u64(&c, &g->n_kv, "kv count")))
		return s;
	/* a kv takes >= 12 bytes (key length + type), a tensor info >= 28 */
	if (g->n_kv > (c.len - c.pos) / 12)
		return cur_fail(&c, "kv count exceeds the file");
	if (g->n_tensors > (c.len - c.pos) / 28)
		return cur_fail(&c, "tensor count exceeds the file");
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
	g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
	if (!g->kv || !g->tensors)
		return ds_errf(err, DS_ERR_NOMEM, "%s: GGUF: out of memory", g->path);

	c.section = "metadata";
	for (uint64_t i = 0; i < g->n_kv; i++) {
		c.entry = i;
		if ((s = parse_kv(&c, &g->kv[i], &P->str_offs, &n_offs, &cap_offs)))
			return s;
	}
	fixup_str_offs(g, P->str_offs);

	g->alignment = GGUF_DEFAULT_ALIGNMENT;
	const struct ds_gguf_kv *al = ds_gguf_find(g, "general.alignment");
	if (al) {
		uint64_t a;
		if (ds_gguf_get_u64(g, "general.alignment", &a) || a == 0 || (a & (a - 1)) ||
		    a > (1u << 20))
			return ds_errf(
			    err, DS_ERR_FORMAT,
			    "%s: GGUF metadata: general.alignment must be a power of two", g->path);
		g->alignment = a;
	}

	c.section = "tensor info";
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		c.entry = i;
		if ((s = parse_tensor_info(&c, &g->tensors[i])))
			return s;
	}
	g->info_len = c.pos;

	/* data section: starts at the next multiple of alignment after the infos */
	uint64_t data_off = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
	c.section = "data";
	if (g->n_tensors > 0 && data_off > c.len) {
		c.entry = 0;
		return cur_fail(&c, "data section starts past the end of the file");
	}
	g->data_offset = data_off;
	uint64_t data_len = data_off <= c.len ? c.len - data_off : 0;
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		struct ds_gguf_tensor *t = &g->tensors[i];
		c.entry = i;
		if ((s = tensor_size(&c, t)))
			return s;
		if (t->offset % g->alignment)
			return cur_fail(&c, "tensor offset is not aligned");
		if (t->offset > data_len || t->nbytes > data_len - t->offset)
			return ds_errf(err, DS_ERR_FORMAT,
			               "%s: GGUF data: tensor '%.*s' (%llu bytes at offset %llu) "
			               "lies past the "
			               "end of the file (data section holds %llu bytes)",
			               g->path, (int)DS_MIN(t->name.len, 96), t->name.p,
			               (unsigned long long)t->nbytes, (unsigned long long)t->offset,
			               (unsigned long long)data_len);
		t->data = g->base + data_off + t->offset;
	}
	return DS_OK;
}

/* ---- open / parse / close ---- */

static enum ds_status gguf_new(const char *name, struct gguf_priv **out, struct ds_err *err)
{
	struct gguf_priv *P = calloc(1, sizeof(*P));
	if (!P)
		return ds_errf(err, DS_ERR_NOMEM, "%s: GGUF: out of memory", name);
	snprintf(P->pub.path, sizeof(P->pub.path), "%s", name ? name : "<buffer>");
	*out = P;
	return DS_OK;
}

enum ds_status ds_gguf_parse(const uint8_t *buf, size_t len, const char *name, struct ds_gguf **out,
                             struct ds_err *err)
{
	struct gguf_priv *P = NULL;
	*out = NULL;
	enum ds_status s = gguf_new(name, &P, err);
	if (s)
		return s;
	P->pub.base = buf;
	P->pub.size = buf ? len : 0;
	if ((s = parse(P, err))) {
		ds_gguf_close(&P->pub);
		return s;
	}
	*out = &P->pub;
	return DS_OK;
}

enum ds_status ds_gguf_open(const char *path, struct ds_gguf **out, struct ds_err *err)
{
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ds_errf(err, DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return ds_errf(err, DS_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return ds_errf(err, DS_ERR_IO, "%s: not a regular file", path);
	}
	size_t len = (size_t)st.st_size;
	void *map = NULL;
	if (len > 0) {
		map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			int e = errno;
			close(fd);
			return ds_errf(err, DS_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
		}
	}
	close(fd);
	struct gguf_priv *P = NULL;
	enum ds_status s = gguf_new(path, &P, err);
	if (s) {
		if (map)
			munmap(map, len);
		return s;
	}
	P->pub.base = map;
	P->pub.size = len;
	P->owns_map = map != NULL;
	if ((s = parse(P, err))) {
		ds_gguf_close(&P->pub);
		return s;
	}
	*out = &P->pub;
	return DS_OK;
}

void ds_gguf_close(struct ds_gguf *g)
{
	if (!g)
		return;
	struct gguf_priv *P = (struct gguf_priv *)g;
	if (P->owns_map && g->base)
		munmap((void *)g->base, g->size);
	free(g->kv);
	free(g->tensors);
	free(P->str_offs);
	free(P);
}

/* ---- lookups ---- */

static bool str_eq(struct ds_gguf_str s, const char *z)
{
	size_t n = strlen(z);
	return s.len == n && memcmp(s.p, z, n) == 0;
}

const struct ds_gguf_kv *ds_gguf_find(const struct ds_gguf *g, const char *key)
{
	for (uint64_t i = 0; i < g->n_kv; i++)
		if (str_eq(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

enum ds_status ds_gguf_get_u64(const struct ds_gguf *g, const char *key, uint64_t *out)
{
	const struct ds_gguf_kv *kv = ds_gguf_find(g, key);
	if (!kv)
		return DS_ERR_NOT_FOUND;
	const uint8_t *p = kv->data;
	int64_t v;
	switch (kv->type) {
	case DS_GGUF_UINT8:
	case DS_GGUF_BOOL:
		*out = p[0];
		return DS_OK;
	case DS_GGUF_UINT16:
		*out = (uint64_t)p[0] | (uint64_t)p[1] << 8;
		return DS_OK;
	case DS_GGUF_UINT32:
		*out = rd_u32(p);
		return DS_OK;
	case DS_GGUF_UINT64:
		*out = rd_u64(p);
		return DS_OK;
	case DS_GGUF_INT8:
		v = (int8_t)p[0];
		break;
	case DS_GGUF_INT16:
		v = (int16_t)(uint16_t)((uint16_t)p[0] | (uint16_t)p[1] << 8);
		break;
	case DS_GGUF_INT32:
		v = (int32_t)rd_u32(p);
		break;
	case DS_GGUF_INT64:
		v = (int64_t)rd_u64(p);
		break;
	default:
		return DS_ERR_FORMAT;
	}
	if (v < 0)
		return DS_ERR_FORMAT;
	*out = (uint64_t)v;
	return DS_OK;
}

enum ds_status ds_gguf_get_f32(const struct ds_gguf *g, const char *key, float *out)
{
	const struct ds_gguf_kv *kv = ds_gguf_find(g, key);
	if (!kv)
		return DS_ERR_NOT_FOUND;
	union {
		uint32_t u;
		float f;
	} u32;
	union {
		uint64_t u;
		double d;
	} u64;
	switch (kv->type) {
	case DS_GGUF_FLOAT32:
		u32.u = rd_u32(kv->data);
		*out = u32.f;
		return DS_OK;
	case DS_GGUF_FLOAT64:
		u64.u = rd_u64(kv->data);
		*out = (float)u64.d;
		return DS_OK;
	default: {
		uint64_t v;
		if (ds_gguf_get_u64(g, key, &v))
			return DS_ERR_FORMAT;
		*out = (float)v;
		return DS_OK;
	}
	}
}

enum ds_status ds_gguf_get_str(const struct ds_gguf *g, const char *key, struct ds_gguf_str *out)
{
	const struct ds_gguf_kv *kv = ds_gguf_find(g, key);
	if (!kv)
		return DS_ERR_NOT_FOUND;
	if (kv->type != DS_GGUF_STRING)
		return DS_ERR_FORMAT;
	out->len = rd_u64(kv->data); /* validated at parse */
	out->p = (const char *)kv->data + 8;
	return DS_OK;
}

enum ds_status ds_gguf_arr_str(const struct ds_gguf_kv *kv, uint64_t i, struct ds_gguf_str *out)
{
	if (!kv || kv->type != DS_GGUF_ARRAY || kv->arr_type != DS_GGUF_STRING)
		return DS_ERR_FORMAT;
	if (i >= kv->arr_len)
		return DS_ERR_NOT_FOUND;
	DS_ASSERT(kv->str_offs); /* built at parse for every non-empty string array */
	const uint8_t *p = kv->data + kv->str_offs[i];
	out->len = rd_u64(p); /* validated at parse */
	out->p = (const char *)p + 8;
	return DS_OK;
}

const struct ds_gguf_tensor *ds_gguf_find_tensor(const struct ds_gguf *g, const char *name)
{
	for (uint64_t i = 0; i < g->n_tensors; i++)
		if (str_eq(g->tensors[i].name, name))
			return &g->tensors[i];
	return NULL;
}
