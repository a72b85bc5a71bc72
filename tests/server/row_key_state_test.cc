#include "server/row_key_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

namespace ferry {
namespace {

// A push of `ids` whose row for id i holds values(i, k), k < dim, as float32.
template <typename T>
RowsPush MakePush(const std::vector<int64_t>& ids, uint64_t dim,
                  const std::function<T(int64_t, uint64_t)>& value) {
  RowsPush p;
  p.num_rows = ids.size();
  p.payload = Buffer::Allocate(ids.size() * (sizeof(int64_t) + dim * sizeof(T)));
  if (!ids.empty()) std::memcpy(p.payload.data(), ids.data(), ids.size() * sizeof(int64_t));
  T* values = reinterpret_cast<T*>(p.payload.bytes() + ids.size() * sizeof(int64_t));
  for (size_t j = 0; j < ids.size(); ++j) {
    for (uint64_t k = 0; k < dim; ++k) values[j * dim + k] = value(ids[j], k);
  }
  return p;
}

std::vector<float> Floats(const Buffer& b) {
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

TEST(SumRowsTest, OverlappingDisjointAndDuplicateRowsSumExactly) {
  const uint64_t dim = 3;
  // Worker a: rows 5, 9, 5 (duplicate), 100; worker b: rows 9, 7; worker c: no rows.
  RowsPush a = MakePush<float>({5, 9, 5, 100}, dim,
                               [](int64_t id, uint64_t k) { return static_cast<float>(id + k); });
  RowsPush b = MakePush<float>(
      {9, 7}, dim, [](int64_t id, uint64_t k) { return static_cast<float>(1000 + id * 10 + k); });
  RowsPush c = MakePush<float>({}, dim, [](int64_t, uint64_t) { return 0.0f; });
  std::vector<Buffer> out = SumRows({&a, &b, &c}, dim, DataType::kFloat32);
  ASSERT_EQ(out.size(), 3u);
  // Row 5: twice from a = 2 * (5 + k). Row 9: a (9 + k) + b (1090 + k). Row 100: a only.
  EXPECT_EQ(Floats(out[0]),
            (std::vector<float>{10, 12, 14, 1099, 1101, 1103, 10, 12, 14, 100, 101, 102}));
  EXPECT_EQ(Floats(out[1]), (std::vector<float>{1099, 1101, 1103, 1070, 1071, 1072}));
  EXPECT_TRUE(out[2].empty());
}

TEST(SumRowsTest, Float16GoesThroughTheReduceKernels) {
  const uint64_t dim = 4;
  RowsPush a = MakePush<uint16_t>({1, 2}, dim, [](int64_t id, uint64_t k) {
    return FloatToHalf(static_cast<float>(id) + 0.5f * k);
  });
  RowsPush b =
      MakePush<uint16_t>({2, 2}, dim, [](int64_t, uint64_t k) { return FloatToHalf(0.25f * k); });
  std::vector<Buffer> out = SumRows({&a, &b}, dim, DataType::kFloat16);
  const uint16_t* row2 = reinterpret_cast<const uint16_t*>(out[0].bytes()) + dim;
  for (uint64_t k = 0; k < dim; ++k) {
    // 2 + 0.5k + 0.25k + 0.25k: exact in float16.
    EXPECT_EQ(HalfToFloat(row2[k]), 2.0f + 1.0f * k) << k;
    EXPECT_EQ(reinterpret_cast<const uint16_t*>(out[1].bytes())[k], row2[k]);
  }
}

TEST(SumRowsTest, RankOrderMakesTheBitsIndependentOfArrival) {
  // 1e8 + 1 - 1e8 depends on the order; SumRows adds in the order given (rank order).
  auto v = [](float x) { return [x](int64_t, uint64_t) { return x; }; };
  RowsPush a = MakePush<float>({0}, 1, std::function<float(int64_t, uint64_t)>(v(1e8f)));
  RowsPush b = MakePush<float>({0}, 1, std::function<float(int64_t, uint64_t)>(v(1.0f)));
  RowsPush c = MakePush<float>({0}, 1, std::function<float(int64_t, uint64_t)>(v(-1e8f)));
  EXPECT_EQ(Floats(SumRows({&a, &b, &c}, 1, DataType::kFloat32)[0])[0], (1e8f + 1.0f) - 1e8f);
}

TEST(RowKeyStateTest, RoundsDuplicatesAndResendsOfThePreviousRound) {
  RowKeyState s;
  const std::vector<bool> joined(2, false);
  auto value = std::function<float(int64_t, uint64_t)>(
      [](int64_t id, uint64_t) { return static_cast<float>(id); });
  EXPECT_EQ(s.Classify(0, 0, 10, 2, DataType::kFloat32, 7, 2), PushVerdict::kAccumulate);
  EXPECT_FALSE(s.Record(0, MakePush<float>({3, 4}, 2, value), joined));
  EXPECT_EQ(s.Classify(0, 0, 10, 2, DataType::kFloat32, 7, 2), PushVerdict::kDuplicate);
  EXPECT_EQ(s.Classify(1, 1, 10, 2, DataType::kFloat32, 7, 2), PushVerdict::kAhead);
  EXPECT_EQ(s.Classify(1, 0, 10, 2, DataType::kFloat32, 7, 2), PushVerdict::kAccumulate);
  EXPECT_TRUE(s.Record(1, MakePush<float>({4}, 2, value), joined));
  std::vector<Buffer> results = s.SumRound();
  EXPECT_EQ(Floats(results[0]), (std::vector<float>{3, 3, 8, 8}));
  EXPECT_EQ(Floats(results[1]), (std::vector<float>{8, 8}));
  s.NextRound(results, 2);
  EXPECT_EQ(s.round, 1u);
  EXPECT_EQ(s.Classify(1, 0, 10, 2, DataType::kFloat32, 7, 2), PushVerdict::kPrevious);
  EXPECT_EQ(Floats(s.last_results[1]), (std::vector<float>{8, 8}));
  EXPECT_EQ(s.last_contributors, 2u);
}

TEST(RowKeyStateTest, ShapeDtypeOrHashMismatchAndBadRowIds) {
  RowKeyState s;
  EXPECT_EQ(s.Classify(0, 0, 10, 2, DataType::kFloat32, 7, 2), PushVerdict::kAccumulate);
  EXPECT_EQ(s.Classify(1, 0, 11, 2, DataType::kFloat32, 7, 2), PushVerdict::kMismatch);
  EXPECT_EQ(s.Classify(1, 0, 10, 3, DataType::kFloat32, 7, 2), PushVerdict::kMismatch);
  EXPECT_EQ(s.Classify(1, 0, 10, 2, DataType::kFloat16, 7, 2), PushVerdict::kMismatch);
  EXPECT_EQ(s.Classify(1, 0, 10, 2, DataType::kFloat32, 8, 2), PushVerdict::kMismatch);
  const int64_t good[] = {0, 9};
  const int64_t high[] = {0, 10};
  const int64_t negative[] = {-1};
  EXPECT_EQ(s.CheckRowIds(good, 2), "");
  EXPECT_EQ(s.CheckRowIds(high, 2),
            "row id 10 (position 1 of 2) is outside the tensor's rows 0..9");
  EXPECT_NE(s.CheckRowIds(negative, 1).find("row id -1"), std::string::npos);
  s.failure = "failed";
  EXPECT_EQ(s.Classify(0, 0, 10, 2, DataType::kFloat32, 7, 2), PushVerdict::kFailed);
}

TEST(RowKeyStateTest, AJoinedWorkerCompletesTheRoundWithoutIt) {
  RowKeyState s;
  EXPECT_EQ(s.Classify(0, 0, 10, 1, DataType::kFloat32, 7, 2), PushVerdict::kAccumulate);
  auto value = std::function<float(int64_t, uint64_t)>([](int64_t, uint64_t) { return 2.0f; });
  EXPECT_FALSE(s.Record(0, MakePush<float>({1}, 1, value), {false, false}));
  EXPECT_TRUE(s.Complete({false, true}));
  EXPECT_EQ(s.Contributors(), 1);
  s.NextRound(s.SumRound(), 2);
  s.Restart(2);
  EXPECT_EQ(s.round, 0u);
  EXPECT_EQ(s.Classify(0, 0, 10, 1, DataType::kFloat32, 7, 2), PushVerdict::kAccumulate);
}

}  // namespace
}  // namespace ferry
