/* cuda_stub.c - ds_backend_cuda_init for builds without CUDA: always DS_ERR_UNSUPPORTED. */
#include "backend.h"

enum ds_status ds_backend_cuda_init(struct ds_backend *be, const struct ds_model *m, int device,
                                    struct ds_err *err)
{
	(void)be;
	(void)m;
	return ds_errf(err, DS_ERR_UNSUPPORTED,
	               "cuda: detserve was built without CUDA (device %d requested)", device);
}
