#pragma once

// For tests that need a GPU: FERRY_SKIP_WITHOUT_GPU() at the top of a test body or
// SetUp skips the test, naming the reason, where this process sees no usable GPU. With
// FERRY_REQUIRE_GPU=1 (scripts/gpu-checks sets it) it fails the test instead, so a GPU
// machine can never pass these tests by skipping them.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "server/gpu/gpu_device.h"

namespace ferry {
namespace testing {

inline bool GpuRequired() {
  const char* v = std::getenv("FERRY_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace testing
}  // namespace ferry

#define FERRY_SKIP_WITHOUT_GPU()                                                         \
  do {                                                                                   \
    std::string ferry_no_gpu_why;                                                        \
    if (::ferry::CudaDeviceCount(&ferry_no_gpu_why) == 0) {                              \
      if (::ferry::testing::GpuRequired()) {                                             \
        FAIL() << "FERRY_REQUIRE_GPU=1, but " << ferry_no_gpu_why;                       \
      }                                                                                  \
      GTEST_SKIP() << "no GPU here (" << ferry_no_gpu_why                                \
                   << "); GPU tests run where one is present (scripts/gpu-checks)";      \
    }                                                                                    \
  } while (0)
