#pragma once

// CudaDevice: the DeviceApi on the CUDA runtime (device_api.h), for one GPU of this
// process. Streams are non-blocking streams (they never order against the legacy default
// stream implicitly; stream 0 is that default stream, for callers that pass no stream),
// events have timing disabled, pinned memory is cudaHostAlloc'd (portable), host callbacks
// are cudaLaunchHostFunc. Every CUDA call is checked: a failure throws FerryError(kInternal)
// naming the call and CUDA's error.
//
// This header needs no CUDA headers: NewCudaDevice is defined in every build, and throws
// FerryError(kInvalidArgument) in a build without CUDA, saying so.

#include <memory>

#include "worker/device/device_api.h"

namespace ferry {

// The device API for CUDA device `device` (its current device is set on every call that
// needs it, so any thread may use it).
std::unique_ptr<DeviceApi> NewCudaDevice(int device);

// Whether this build has the CUDA data path (nvcc was found), whether or not a GPU is here.
bool CudaBuilt();

}  // namespace ferry
