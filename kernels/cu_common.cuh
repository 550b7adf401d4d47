/* cu_common.cuh - includes the C headers shared with the host (ds_common.h, rng.h) from CUDA
 * C++ translation units, which lack C11's _Noreturn keyword. */
#ifndef DS_CU_COMMON_CUH
#define DS_CU_COMMON_CUH

#if defined(__cplusplus) && !defined(_Noreturn)
#define _Noreturn [[noreturn]]
#endif
#include "ds_common.h"
#include "rng.h"

#endif
