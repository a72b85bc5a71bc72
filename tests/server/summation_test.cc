// The CPU summation (server/summation.h) with pushes lent through the shared-memory lane
// (Buffer::Lent: a worker's slot, which must go back): the first is adopted only until the
// second, which is summed with it in one pass into the round's own buffer (from the shared
// allocator when it gives one); a sum of one lent push is copied out at Finish. Exact values,
// and each slot is let go exactly when the test says.

#include "server/summation.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace ferry {
namespace {

constexpr size_t kCount = 100003;  // large enough for the pool to split (split 4096 bytes)

// A lent buffer of `count` floats, value seed + i % 1000; *released turns true when the last
// holder lets go (the slot going back to its worker).
Buffer LentPush(float seed, bool* released) {
  struct Slot {
    std::vector<float> bytes;
    bool* released;
    ~Slot() { *released = true; }
  };
  auto slot = std::make_shared<Slot>();
  slot->bytes.resize(kCount);
  slot->released = released;
  for (size_t i = 0; i < kCount; ++i) slot->bytes[i] = seed + static_cast<float>(i % 1000);
  float* data = slot->bytes.data();
  return Buffer::Lent(data, kCount * sizeof(float), std::move(slot));
}

TEST(SummationTest, ALentFirstPushIsSummedWithTheSecondInOnePassAndGoesBack) {
  SumPool pool(2, 4096);
  int shared_allocations = 0;
  auto summation = MakeCpuSummation(&pool, [&](uint64_t bytes) {
    shared_allocations++;
    return Buffer::Allocate(bytes);
  });
  bool first_back = false, second_back = false;
  Buffer sum;
  const uint64_t length = kCount * sizeof(float);
  summation->Add(1, DataType::kFloat32, length, sum, LentPush(1.0f, &first_back));
  EXPECT_FALSE(first_back) << "adopted until the next push";
  summation->Add(1, DataType::kFloat32, length, sum, LentPush(10.0f, &second_back));
  EXPECT_TRUE(first_back && second_back) << "both slots go back once summed";
  EXPECT_FALSE(sum.lent());
  EXPECT_EQ(shared_allocations, 1);
  ASSERT_TRUE(summation->Finish(1, 0, sum));
  const float* s = static_cast<const float*>(sum.data());
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(s[i], 11.0f + 2.0f * static_cast<float>(i % 1000)) << "element " << i;
  }
}

TEST(SummationTest, ASumOfOneLentPushIsCopiedOutAtFinish) {
  SumPool pool(0, 0);
  auto summation = MakeCpuSummation(&pool, [](uint64_t) { return Buffer(); });  // no room
  bool back = false;
  Buffer sum;
  summation->Add(2, DataType::kFloat32, kCount * sizeof(float), sum, LentPush(3.0f, &back));
  EXPECT_FALSE(back);
  ASSERT_TRUE(summation->Finish(2, 0, sum));
  EXPECT_TRUE(back);
  EXPECT_FALSE(sum.lent());
  const float* s = static_cast<const float*>(sum.data());
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(s[i], 3.0f + static_cast<float>(i % 1000));
}

TEST(SummationTest, ALentFirstPushUnderMaxIsCombinedAndGoesBack) {
  SumPool pool(0, 0);
  auto summation = MakeCpuSummation(&pool);
  bool first_back = false, second_back = false;
  Buffer sum;
  const uint64_t length = kCount * sizeof(float);
  summation->Add(3, DataType::kFloat32, length, sum, LentPush(5.0f, &first_back), ReduceOp::kMax);
  summation->Add(3, DataType::kFloat32, length, sum, LentPush(2.0f, &second_back), ReduceOp::kMax);
  EXPECT_TRUE(first_back && second_back);
  ASSERT_TRUE(summation->Finish(3, 0, sum));
  const float* s = static_cast<const float*>(sum.data());
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(s[i], 5.0f + static_cast<float>(i % 1000));
}

}  // namespace
}  // namespace ferry
