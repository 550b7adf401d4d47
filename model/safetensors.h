/* safetensors.h - a validating reader and a streaming writer for the safetensors format.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON header
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then the
 * data section. The reader works on an in-memory image (the loader passes an mmap) and checks
 * everything before any pointer is formed: the header length against the file, the JSON, each
 * entry's shape and dtype against its byte range, every range inside the data section, and no
 * two ranges overlapping. Errors are DS_ERR_FORMAT with a message naming the file and tensor. */
#ifndef DS_SAFETENSORS_H
#define DS_SAFETENSORS_H

#include "ds_common.h"

#include <stdio.h>

#define DS_ST_MAX_DIMS 8

enum ds_st_dtype {
	DS_ST_BF16,
	DS_ST_F16,
	DS_ST_F32,
	DS_ST_OTHER, /* a known or unknown dtype the model loader does not accept */
};

struct ds_st_tensor {
	char *name; /* owned, NUL-terminated */
	enum ds_st_dtype dtype;
	char dtype_name[16]; /* as written in the header, truncated */
	int ndim;
	int64_t shape[DS_ST_MAX_DIMS];
	uint64_t begin, end; /* byte range relative to the data section */
	const uint8_t *data; /* data + begin */
};

struct ds_st_file {
	char path[256];        /* for messages */
	const uint8_t *header; /* JSON header bytes (not NUL-terminated) */
	uint64_t header_len;
	const uint8_t *data; /* start of the data section */
	uint64_t data_len;
	struct ds_st_tensor *tensors;
	int n_tensors;
};

/* Parses and validates the image buf[0..len) (not owned; must outlive *f). `path` is used in
 * messages. Returns DS_ERR_FORMAT on any malformed input, DS_ERR_NOMEM; *f is zeroed on failure.
 * Tensors with a dtype the loader does not accept are kept (as DS_ST_OTHER) so that a caller
 * can ignore extra tensors and reject only the ones it needs. */
enum ds_status ds_st_parse(const uint8_t *buf, size_t len, const char *path, struct ds_st_file *f,
                           struct ds_err *err);

/* Frees what ds_st_parse allocated (not the image). Safe on a zeroed struct. */
void ds_st_file_free(struct ds_st_file *f);

/* The entry named `name`, or NULL. */
const struct ds_st_tensor *ds_st_find(const struct ds_st_file *f, const char *name);

/* Bytes per element of a safetensors dtype name ("BF16" -> 2), 0 when unknown. */
int ds_st_dtype_size(const char *dtype_name);

/* ---- writer ---- */

struct ds_st_entry {
	const char *name;
	const char *dtype_name; /* "BF16", "F16" or "F32" */
	int ndim;
	int64_t shape[2];
	uint64_t nbytes;
};

/* Writes the length prefix and the JSON header for entries[0..n), whose data follow in that
 * order with no gaps, and __metadata__ {"format": "pt"} plus meta[0..n_meta) as string
 * key/value pairs. The header is padded with spaces so the data section starts 8-byte aligned
 * (bf16 tensors then map zero-copy). Returns DS_ERR_INVALID for a name or value that would need
 * JSON escaping, DS_ERR_IO naming `path` on write failure. */
enum ds_status ds_st_write_header(FILE *fp, const char *path, const struct ds_st_entry *entries,
                                  int n, const char *const (*meta)[2], int n_meta,
                                  struct ds_err *err);

#endif
