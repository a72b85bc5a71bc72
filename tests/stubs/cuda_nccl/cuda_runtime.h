#pragma once

// <cuda_runtime.h> in the stub builds (FERRY_NCCL_STUB=ON): the runtime API of
// cuda_runtime_api.h; there are no kernels to launch.

#include "cuda_runtime_api.h"
