/* ds_cuda.h - the CUDA error tier (STYLE.md): one check macro for C code that calls the runtime.
 *
 * DS_CUDA_TRY(expr, err) evaluates a cudaError_t expression; on failure it records the
 * expression, function, file and line in err and returns DS_ERR_DEVICE (DS_ERR_NOMEM for an
 * allocation failure) from the calling function. Use it after every launch with
 * cudaGetLastError(). Only C files of the CUDA backend, its tests and benches include this. */
#ifndef DS_CUDA_H
#define DS_CUDA_H

#include "ds_common.h"

#include <cuda_runtime_api.h>

#define DS_CUDA_TRY(expr, err)                                                                     \
	do {                                                                                       \
		cudaError_t ds_cuda_e_ = (expr);                                                   \
		if (ds_cuda_e_ != cudaSuccess)                                                     \
			return ds_errf((err),                                                      \
			               ds_cuda_e_ == cudaErrorMemoryAllocation ? DS_ERR_NOMEM      \
			                                                       : DS_ERR_DEVICE,    \
			               "cuda: %s: %s (%s, %s:%d)", #expr,                          \
			               cudaGetErrorString(ds_cuda_e_), __func__, __FILE__,         \
			               __LINE__);                                                  \
	} while (0)

/* Same, but jumps to `fail` with rv set instead of returning (for goto-cleanup functions). */
#define DS_CUDA_GOTO(expr, err, rv)                                                                \
	do {                                                                                       \
		cudaError_t ds_cuda_e_ = (expr);                                                   \
		if (ds_cuda_e_ != cudaSuccess) {                                                   \
			(rv) =                                                                     \
			    ds_errf((err),                                                         \
			            ds_cuda_e_ == cudaErrorMemoryAllocation ? DS_ERR_NOMEM         \
			                                                    : DS_ERR_DEVICE,       \
			            "cuda: %s: %s (%s, %s:%d)", #expr,                             \
			            cudaGetErrorString(ds_cuda_e_), __func__, __FILE__, __LINE__); \
			goto fail;                                                                 \
		}                                                                                  \
	} while (0)

#endif
