/* gguf_model.c - placeholder until the GGUF loader lands (issue 8). */
#include "gguf.h"

enum ds_status ds_model_load_gguf(const char *path, struct ds_model **out, struct ds_err *err)
{
	*out = NULL;
	return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: GGUF loading is not built yet", path);
}
