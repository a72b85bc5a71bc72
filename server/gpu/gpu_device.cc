// The start-up GPU check, for builds with CUDA (no_cuda.cc is the other half).

#include "server/gpu/gpu_device.h"

#include <cuda_runtime_api.h>

#include <cstdlib>

#include "common/util/status.h"
#include "server/gpu/cuda_check.h"
#include "server/gpu/cuda_handles.h"
#include "server/gpu/sum_kernels.h"

#ifndef FERRY_CUDA_ARCHITECTURES
#error "FERRY_CUDA_ARCHITECTURES must name the architectures built (server/gpu/CMakeLists.txt)"
#endif

namespace ferry {
namespace {

std::string ErrorText(cudaError_t e) {
  char buf[256];
  return gpu::CudaErrorText(e, buf, sizeof buf);
}

// " (CUDA_VISIBLE_DEVICES='')" when the variable hides devices, else "".
std::string VisibleDevicesNote() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? StrCat(" (CUDA_VISIBLE_DEVICES='", v, "')") : std::string();
}

[[noreturn]] void Unusable(int device, const std::string& why) {
  throw FerryError(ErrorCode::kInvalidConfig,
                   StrCat("FERRY_SERVER_DEVICE=gpu:", device, ": ", why,
                          "; run this server on a machine with a usable NVIDIA GPU, or set "
                          "FERRY_SERVER_DEVICE=cpu"));
}

GpuInfo Describe(int device) {
  cudaDeviceProp p{};
  FERRY_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  GpuInfo info;
  info.device = device;
  info.name = p.name;
  info.major = p.major;
  info.minor = p.minor;
  info.memory_bytes = p.totalGlobalMem;
  info.multiprocessors = p.multiProcessorCount;
  return info;
}

// Runs 1 + 2 = 3 in float32 on the device; returns "" or what failed. A GPU older than
// every architecture built fails the launch with cudaErrorNoKernelImageForDevice.
std::string ProbeKernel(int device) {
  try {
    FERRY_CUDA_CHECK(cudaSetDevice(device));
    gpu::DeviceMemory mem;
    mem.Reserve(2 * sizeof(float));
    const float in[2] = {1.0f, 2.0f};
    FERRY_CUDA_CHECK(cudaMemcpy(mem.get(), in, sizeof in, cudaMemcpyHostToDevice));
    float* d = static_cast<float*>(mem.get());
    gpu::SumIntoDevice(d, d + 1, 1, DataType::kFloat32, nullptr);
    float out = 0;
    FERRY_CUDA_CHECK(cudaMemcpy(&out, d, sizeof out, cudaMemcpyDeviceToHost));
    if (out != 3.0f) return StrCat("the probe sum 1 + 2 gave ", out);
  } catch (const FerryError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

bool BuiltWithCuda() { return true; }
const char* CudaArchitectures() { return FERRY_CUDA_ARCHITECTURES; }

int CudaDeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return count;
  if (why == nullptr) return 0;
  int driver = 0;
  cudaDriverGetVersion(&driver);
  if (driver == 0) {
    *why = "no NVIDIA driver is installed (libcuda.so not found)";
  } else if (e == cudaSuccess) {
    *why = StrCat("the NVIDIA driver sees no GPU", VisibleDevicesNote());
  } else {
    *why = StrCat("CUDA finds no usable GPU: ", ErrorText(e), VisibleDevicesNote(),
                  " (driver supports CUDA ", driver / 1000, ".", driver % 1000 / 10,
                  ", built with CUDA ", CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10,
                  ")");
  }
  return 0;
}

GpuInfo CheckGpuAvailable(int device) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) Unusable(device, StrCat("no usable CUDA GPU: ", why));
  if (device < 0 || device >= count) {
    Unusable(device, StrCat("no GPU with index ", device, ": this process sees ", count,
                            " (0..", count - 1, ")", VisibleDevicesNote()));
  }
  const GpuInfo info = Describe(device);
  const std::string failed = ProbeKernel(device);
  if (!failed.empty()) {
    Unusable(device, StrCat(info.Describe(), " cannot run this build's kernels (built for CUDA "
                            "architectures ", CudaArchitectures(), "): ", failed));
  }
  return info;
}

}  // namespace ferry
