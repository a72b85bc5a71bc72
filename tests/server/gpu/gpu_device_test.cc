// Tests of the start-up GPU check (server/gpu/gpu_device.h) in every kind of build and
// machine: built without CUDA, CUDA but no usable GPU (this is CI), and a GPU present.
// Each branch asserts the documented message, so whichever machine runs it, the check
// is really exercised; FERRY_REQUIRE_GPU=1 (scripts/gpu-checks) insists on the last.

#include "server/gpu/gpu_device.h"

#include <gtest/gtest.h>

#include <string>

#include "common/util/error.h"
#include "server/gpu/gpu_summer.h"
#include "tests/server/gpu/gpu_test_support.h"

namespace ferry {
namespace {

// The FerryError(kInvalidConfig) message of CheckGpuAvailable(device); "" if it passed.
std::string CheckError(int device) {
  try {
    CheckGpuAvailable(device);
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig) << e.what();
    return e.what();
  }
  return "";
}

TEST(GpuDeviceTest, CheckSaysWhatItFinds) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (!BuiltWithCuda()) {
    EXPECT_EQ(count, 0);
    EXPECT_TRUE(StrContains(why, "built without CUDA")) << why;
    const std::string msg = CheckError(0);
    EXPECT_TRUE(StrContains(msg, "FERRY_SERVER_DEVICE=gpu:0: this Ferry was built without CUDA"))
        << msg;
    EXPECT_TRUE(StrContains(msg, "FERRY_SERVER_DEVICE=cpu")) << msg;
    EXPECT_STREQ(CudaArchitectures(), "");
    return;
  }
  EXPECT_NE(std::string(CudaArchitectures()), "");
  if (count == 0) {
    ASSERT_FALSE(testing::GpuRequired()) << "FERRY_REQUIRE_GPU=1, but " << why;
    EXPECT_FALSE(why.empty());
    const std::string msg = CheckError(0);
    EXPECT_TRUE(StrContains(msg, "FERRY_SERVER_DEVICE=gpu:0: no usable CUDA GPU: " + why)) << msg;
    EXPECT_TRUE(StrContains(msg, "FERRY_SERVER_DEVICE=cpu")) << msg;
    return;
  }
  const GpuInfo info = CheckGpuAvailable(0);
  EXPECT_EQ(info.device, 0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.major, 0);
  EXPECT_GT(info.memory_bytes, 0u);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_TRUE(StrContains(info.Describe(), "GPU 0 (" + info.name + ", compute capability "))
      << info.Describe();
}

TEST(GpuDeviceTest, MissingIndexIsNamed) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  const std::string msg = CheckError(200);
  EXPECT_TRUE(StrContains(msg, "FERRY_SERVER_DEVICE=gpu:200: ")) << msg;
  if (count > 0) {
    EXPECT_TRUE(StrContains(msg, "no GPU with index 200: this process sees " + std::to_string(count)))
        << msg;
  } else {
    EXPECT_TRUE(StrContains(msg, why)) << msg;
  }
}

// A summer can be made exactly where the check passes: without a usable GPU a
// FerryError says why (never a crash); with one, it sums.
TEST(GpuDeviceTest, SummerExistsWhereTheCheckPasses) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) {
    auto summer = GpuSummer::Create(GpuSummerOptions());
    const float one = 1, two = 2;
    summer->Add(1, &one, sizeof one, DataType::kFloat32);
    summer->Add(1, &two, sizeof two, DataType::kFloat32);
    const Buffer sum = summer->FinishAndWait(1);
    ASSERT_EQ(sum.size(), sizeof(float));
    EXPECT_EQ(*static_cast<const float*>(sum.data()), 3.0f);
    return;
  }
  ASSERT_FALSE(testing::GpuRequired()) << "FERRY_REQUIRE_GPU=1, but " << why;
  try {
    GpuSummer::Create(GpuSummerOptions());
    ADD_FAILURE() << "GpuSummer::Create succeeded without a GPU";
  } catch (const FerryError& e) {
    if (BuiltWithCuda()) {
      EXPECT_TRUE(StrContains(e.what(), "CUDA call cudaSetDevice")) << e.what();
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
      EXPECT_TRUE(StrContains(e.what(), "built without CUDA")) << e.what();
    }
  }
}

}  // namespace
}  // namespace ferry
