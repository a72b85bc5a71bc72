#include "common/util/status.h"
#include "server/gpu/gpu_device.h"

#include <cstdio>

namespace ferry {

std::string GpuInfo::Describe() const {
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB",
                static_cast<double>(memory_bytes) / (1024.0 * 1024 * 1024));
  return StrCat("GPU ", device, " (", name, ", compute capability ", major, ".", minor, ", ",
                multiprocessors, " multiprocessors, ", memory, ")");
}

}  // namespace ferry
