// NCCL smoke test: the NCCL found at build time works with one rank on one GPU. Built
// where NCCL is found; skipped (with the reason) where no GPU is present.
//   - ncclGetUniqueId + ncclCommInitRank make a communicator of one rank;
//   - an all-reduce (sum) over one rank gives back its input, bit for bit, for every
//     data type Ferry sums, out of place and in place.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tests/server/gpu/gpu_test_support.h"

namespace ferry {
namespace {

#define ASSERT_NCCL(call)                                                      \
  do {                                                                         \
    const ncclResult_t nccl_result = (call);                                   \
    ASSERT_EQ(nccl_result, ncclSuccess) << #call << ": " << ncclGetErrorString(nccl_result); \
  } while (0)
#define ASSERT_CUDA(call)                                                      \
  do {                                                                         \
    const cudaError_t cuda_result = (call);                                    \
    ASSERT_EQ(cuda_result, cudaSuccess) << #call << ": " << cudaGetErrorString(cuda_result); \
  } while (0)

class NcclSmokeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_SKIP_WITHOUT_GPU();
    ASSERT_CUDA(cudaSetDevice(0));
    ncclUniqueId id;
    ASSERT_NCCL(ncclGetUniqueId(&id));
    ASSERT_NCCL(ncclCommInitRank(&comm_, 1, id, 0));
    ASSERT_CUDA(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

TEST_F(NcclSmokeTest, OneRankCommunicator) {
  int count = 0, rank = -1, device = -1;
  ASSERT_NCCL(ncclCommCount(comm_, &count));
  ASSERT_NCCL(ncclCommUserRank(comm_, &rank));
  ASSERT_NCCL(ncclCommCuDevice(comm_, &device));
  EXPECT_EQ(count, 1);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(device, 0);
  int version = 0;
  ASSERT_NCCL(ncclGetVersion(&version));
  EXPECT_GE(version, NCCL_VERSION(2, 0, 0));
}

TEST_F(NcclSmokeTest, AllReduceOfOneRankIsTheInput) {
  const struct {
    ncclDataType_t type;
    size_t size;
  } kTypes[] = {{ncclFloat32, 4}, {ncclFloat16, 2}, {ncclBfloat16, 2},
                {ncclFloat64, 8}, {ncclInt32, 4},   {ncclInt64, 8}};
  const size_t count = 100003;  // odd
  std::mt19937 rng(1);
  for (const auto& t : kTypes) {
    SCOPED_TRACE(static_cast<int>(t.type));
    std::vector<uint8_t> in(count * t.size), out(count * t.size);
    // Finite values only: NaN payloads need not survive.
    for (size_t i = 0; i < count; ++i) {
      const float v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 8;
      const double d = v;
      uint8_t* p = in.data() + i * t.size;
      switch (t.type) {
        case ncclFloat32: std::memcpy(p, &v, 4); break;
        case ncclFloat64: std::memcpy(p, &d, 8); break;
        case ncclInt32: { const int32_t x = static_cast<int32_t>(rng()); std::memcpy(p, &x, 4); break; }
        case ncclInt64: { const int64_t x = (int64_t{static_cast<int32_t>(rng())} << 32) | rng(); std::memcpy(p, &x, 8); break; }
        default: {  // 16-bit floats: a finite pattern (exponent field not all ones)
          uint16_t x = static_cast<uint16_t>(rng());
          if (t.type == ncclFloat16 && (x & 0x7C00) == 0x7C00) x &= 0xBFFF;
          if (t.type == ncclBfloat16 && (x & 0x7F80) == 0x7F80) x &= 0xBFFF;
          std::memcpy(p, &x, 2);
        }
      }
    }
    void* send = nullptr;
    void* recv = nullptr;
    ASSERT_CUDA(cudaMalloc(&send, in.size()));
    ASSERT_CUDA(cudaMalloc(&recv, in.size()));
    ASSERT_CUDA(cudaMemcpy(send, in.data(), in.size(), cudaMemcpyHostToDevice));
    ASSERT_NCCL(ncclAllReduce(send, recv, count, t.type, ncclSum, comm_, stream_));
    ASSERT_NCCL(ncclAllReduce(send, send, count, t.type, ncclSum, comm_, stream_));  // in place
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    ASSERT_CUDA(cudaMemcpy(out.data(), recv, out.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(out, in) << "out of place";
    ASSERT_CUDA(cudaMemcpy(out.data(), send, out.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(out, in) << "in place";
    cudaFree(send);
    cudaFree(recv);
  }
}

}  // namespace
}  // namespace ferry
