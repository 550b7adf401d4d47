/* test_gguf_util.h - helpers shared by the GGUF tests (static: each test includes it once). */
#ifndef DS_TEST_GGUF_UTIL_H
#define DS_TEST_GGUF_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gguf.h"

#ifndef DS_SOURCE_ROOT
#define DS_SOURCE_ROOT "."
#endif

/* Parses an exact-size heap copy of buf[0, len) so ASan sees any overread. */
static inline enum ds_status parse_copy(const uint8_t *buf, size_t len, struct ds_err *err)
{
	uint8_t *copy = malloc(len ? len : 1);
	assert_non_null(copy);
	memcpy(copy, buf, len);
	struct ds_gguf *g = NULL;
	enum ds_status s = ds_gguf_parse(copy, len, "cut.gguf", &g, err);
	if (s == DS_OK) {
		/* walk everything the API hands out */
		for (uint64_t i = 0; i < g->n_kv; i++) {
			struct ds_gguf_str str;
			if (g->kv[i].type == DS_GGUF_ARRAY && g->kv[i].arr_type == DS_GGUF_STRING)
				for (uint64_t j = 0; j < g->kv[i].arr_len; j++) {
					assert_int_equal(ds_gguf_arr_str(&g->kv[i], j, &str),
					                 DS_OK);
					assert_true(str.p + str.len <= (const char *)copy + len);
				}
		}
		for (uint64_t i = 0; i < g->n_tensors; i++)
			assert_true(g->tensors[i].data + g->tensors[i].nbytes <= copy + len);
	} else {
		assert_null(g);
	}
	ds_gguf_close(g);
	free(copy);
	return s;
}

static char smol_path[512];

static inline const char *smollm2_path(void)
{
	if (smol_path[0])
		return smol_path;
	const char *env = getenv("DS_SMOLLM2_GGUF");
	if (env && access(env, R_OK) == 0) {
		snprintf(smol_path, sizeof(smol_path), "%s", env);
		return smol_path;
	}
	FILE *p = popen(DS_SOURCE_ROOT "/tools/fetch-smollm2.sh", "r");
	if (!p)
		return NULL;
	char line[512] = {0};
	char *r = fgets(line, sizeof(line), p);
	int rc = pclose(p);
	if (!r || rc != 0)
		return NULL;
	line[strcspn(line, "\n")] = 0;
	snprintf(smol_path, sizeof(smol_path), "%s", line);
	return smol_path;
}

#define NEED_SMOLLM2(path)                                                                         \
	const char *path = smollm2_path();                                                         \
	if (!path) {                                                                               \
		print_message("SmolLM2 GGUF unavailable (tools/fetch-smollm2.sh failed)\n");       \
		skip();                                                                            \
	}

#endif
