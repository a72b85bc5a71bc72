#pragma once

// Can this process sum on a GPU? The start-up check for FERRY_SERVER_DEVICE=gpu.
//
// A server asked to sum on a GPU checks, before it joins the cluster, that the GPU
// exists and runs this build's kernels, and otherwise exits with code 2 (bad
// configuration) and a message that says why, rather than failing at the first push.

#include <cstddef>
#include <string>

namespace ferry {

struct GpuInfo {
  int device = -1;
  std::string name;        // "NVIDIA H200"
  int major = 0;           // compute capability
  int minor = 0;
  size_t memory_bytes = 0;
  int multiprocessors = 0;
  // "GPU 0 (NVIDIA H200, compute capability 9.0, 132 multiprocessors, 139.8 GiB)"
  std::string Describe() const;
};

// Whether this Ferry was built with CUDA (FERRY_WITH_CUDA=ON, or AUTO with nvcc found).
bool BuiltWithCuda();
// The CUDA architectures the kernels were built for (CMAKE_CUDA_ARCHITECTURES, e.g.
// "90-real;90-virtual"); "" without CUDA.
const char* CudaArchitectures();

// The number of CUDA devices this process can use: 0 when there is none, no driver,
// or no CUDA in this build, and then `why` (may be null) says which, in words.
int CudaDeviceCount(std::string* why);

// Checks that CUDA device `device` exists and can run this build's kernels (it runs
// one small sum there). Returns its description. Throws FerryError(kInvalidConfig)
// whose message starts "FERRY_SERVER_DEVICE=gpu:<device>: " and says why not: this Ferry
// was built without CUDA; no NVIDIA driver; no GPU (CUDA_VISIBLE_DEVICES named when
// set); no GPU with that index; or a GPU this build has no kernels for.
GpuInfo CheckGpuAvailable(int device);

}  // namespace ferry
