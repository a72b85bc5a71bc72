// Tests of partitioning and placement (worker/placement.h): exact partition byte
// ranges, the greedy weighted placement (balance, determinism, weights), and the
// tensor hash every push carries.

#include "worker/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace ferry {
namespace {

void ExpectPart(const PartitionSpec& p, uint32_t index, uint64_t offset, uint64_t bytes) {
  EXPECT_EQ(p.index, index);
  EXPECT_EQ(p.offset, offset);
  EXPECT_EQ(p.bytes, bytes);
  EXPECT_EQ(p.server, 0);
}

TEST(SplitTensorTest, ExactOffsetsWithRemainder) {
  // 10 floats in partitions of 4 floats: 16 + 16 + 8 bytes.
  auto parts = SplitTensor(40, 4, 16);
  ASSERT_EQ(parts.size(), 3u);
  ExpectPart(parts[0], 0, 0, 16);
  ExpectPart(parts[1], 1, 16, 16);
  ExpectPart(parts[2], 2, 32, 8);
}

TEST(SplitTensorTest, ExactMultipleHasNoEmptyTail) {
  auto parts = SplitTensor(48, 4, 16);
  ASSERT_EQ(parts.size(), 3u);
  ExpectPart(parts[2], 2, 32, 16);
}

TEST(SplitTensorTest, SmallTensorIsOnePartition) {
  auto parts = SplitTensor(12, 4, 4194304);
  ASSERT_EQ(parts.size(), 1u);
  ExpectPart(parts[0], 0, 0, 12);
  // A tensor of exactly one partition.
  parts = SplitTensor(4194304, 4, 4194304);
  ASSERT_EQ(parts.size(), 1u);
  ExpectPart(parts[0], 0, 0, 4194304);
}

TEST(SplitTensorTest, EmptyTensorIsOneEmptyPartition) {
  auto parts = SplitTensor(0, 4, 1024);
  ASSERT_EQ(parts.size(), 1u);
  ExpectPart(parts[0], 0, 0, 0);
}

TEST(SplitTensorTest, PartitionSizeRoundsDownToWholeElements) {
  // float64 in partitions of 20 bytes: 16-byte steps.
  auto parts = SplitTensor(40, 8, 20);
  ASSERT_EQ(parts.size(), 3u);
  ExpectPart(parts[0], 0, 0, 16);
  ExpectPart(parts[1], 1, 16, 16);
  ExpectPart(parts[2], 2, 32, 8);

  // float16 with an odd partition size: 1025 -> 1024.
  parts = SplitTensor(4096, 2, 1025);
  ASSERT_EQ(parts.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) ExpectPart(parts[i], i, i * 1024u, 1024);

  // A partition of exactly one element.
  parts = SplitTensor(24, 8, 8);
  ASSERT_EQ(parts.size(), 3u);
  ExpectPart(parts[2], 2, 16, 8);

  // Partition size below two elements: one element per partition.
  parts = SplitTensor(12, 4, 7);
  ASSERT_EQ(parts.size(), 3u);
  ExpectPart(parts[1], 1, 4, 4);
}

TEST(SplitTensorTest, DefaultPartitionSize) {
  // 10 MiB + 4 bytes of float32 in 4 MiB partitions.
  const uint64_t bytes = 10 * 1048576ull + 4;
  auto parts = SplitTensor(bytes, 4, 4194304);
  ASSERT_EQ(parts.size(), 3u);
  ExpectPart(parts[0], 0, 0, 4194304);
  ExpectPart(parts[1], 1, 4194304, 4194304);
  ExpectPart(parts[2], 2, 8388608, 2097156);
}

TEST(SplitTensorTest, RandomSplitsCoverTheTensorExactly) {
  std::mt19937_64 rng(12345);
  const size_t kElements[] = {1, 2, 4, 8};
  for (int trial = 0; trial < 500; ++trial) {
    size_t element = kElements[rng() % 4];
    uint64_t bytes = (rng() % 100000) * element;
    uint64_t partition = element + rng() % 5000;
    uint64_t step = partition - partition % element;
    auto parts = SplitTensor(bytes, element, partition);
    ASSERT_FALSE(parts.empty());
    uint64_t offset = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      ASSERT_EQ(parts[i].index, i);
      ASSERT_EQ(parts[i].offset, offset);
      ASSERT_EQ(parts[i].bytes % element, 0u);
      if (i + 1 < parts.size()) {
        ASSERT_EQ(parts[i].bytes, step);
      } else {
        ASSERT_LE(parts[i].bytes, step);
        ASSERT_TRUE(parts[i].bytes > 0 || bytes == 0);
      }
      offset += parts[i].bytes;
    }
    ASSERT_EQ(offset, bytes);
    ASSERT_EQ(parts.size(), bytes == 0 ? 1 : (bytes + step - 1) / step);
  }
}

std::vector<uint64_t> RandomSizes(size_t n, uint64_t max, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> sizes(n);
  for (auto& s : sizes) s = 1 + rng() % max;
  return sizes;
}

TEST(PlacementTest, EqualWeightsBalance) {
  const uint64_t kMaxPartition = 4194304;
  for (int servers : {2, 3, 4, 8}) {
    SCOPED_TRACE(servers);
    std::vector<uint64_t> sizes = RandomSizes(2000, kMaxPartition, 7 + servers);
    Placement placement(std::vector<double>(servers, 1.0 / servers));
    uint64_t total = 0, largest = 0;
    for (uint64_t s : sizes) {
      int server = placement.Assign(s);
      ASSERT_GE(server, 0);
      ASSERT_LT(server, servers);
      total += s;
      largest = std::max(largest, s);
    }
    const auto& loads = placement.loads();
    ASSERT_EQ(loads.size(), static_cast<size_t>(servers));
    EXPECT_EQ(std::accumulate(loads.begin(), loads.end(), uint64_t{0}), total);
    uint64_t max = *std::max_element(loads.begin(), loads.end());
    uint64_t min = *std::min_element(loads.begin(), loads.end());
    // Greedy least-loaded placement keeps every load within one partition of each
    // other, so the most loaded server exceeds the mean by less than one partition.
    EXPECT_LE(max - min, largest);
    double mean = static_cast<double>(total) / servers;
    EXPECT_LE(max / mean, 1.0 + static_cast<double>(largest) / mean);
    // 2000 partitions of at most 4 MiB on <= 8 servers: within 2% of perfect.
    EXPECT_LE(max / mean, 1.02);
  }
}

TEST(PlacementTest, TiesGoToTheLowestRank) {
  Placement placement({1.0, 1.0, 1.0});
  std::vector<int> got;
  for (int i = 0; i < 6; ++i) got.push_back(placement.Assign(100));
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(placement.loads(), (std::vector<uint64_t>{200, 200, 200}));
  // A big partition goes to server 0; the next ones fill 1 and 2 first.
  EXPECT_EQ(placement.Assign(1000), 0);
  EXPECT_EQ(placement.Assign(10), 1);
  EXPECT_EQ(placement.Assign(10), 2);
  EXPECT_EQ(placement.Assign(10), 1);
}

TEST(PlacementTest, IsDeterministic) {
  std::vector<uint64_t> sizes = RandomSizes(5000, 8 << 20, 99);
  const std::vector<double> weights = {0.3, 0.2, 0.2, 0.15, 0.15};
  Placement p1(weights), p2(weights);
  for (uint64_t s : sizes) ASSERT_EQ(p1.Assign(s), p2.Assign(s));
  EXPECT_EQ(p1.loads(), p2.loads());
  EXPECT_EQ(p1.weights(), weights);
}

TEST(PlacementTest, SkipsWeightZeroServers) {
  Placement placement({0.0, 0.5, 0.0, 0.5});
  std::vector<uint64_t> sizes = RandomSizes(1000, 1 << 20, 3);
  std::set<int> used;
  for (uint64_t s : sizes) used.insert(placement.Assign(s));
  EXPECT_EQ(used, (std::set<int>{1, 3}));
  EXPECT_EQ(placement.loads()[0], 0u);
  EXPECT_EQ(placement.loads()[2], 0u);

  // One positive weight takes everything.
  Placement single({0.0, 0.0, 1.0});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(single.Assign(1 + i), 2);
}

TEST(PlacementTest, WeightsGiveProportionalBytes) {
  const std::vector<double> weights = {0.5, 0.25, 0.25};
  const uint64_t kPartition = 1 << 20;
  Placement placement(weights);
  uint64_t total = 0;
  for (int i = 0; i < 1001; ++i) {
    placement.Assign(kPartition);
    total += kPartition;
    // Equal partitions: every server is within one partition of its share at all times.
    for (size_t s = 0; s < weights.size(); ++s) {
      double share = weights[s] * static_cast<double>(total);
      ASSERT_LE(std::abs(static_cast<double>(placement.loads()[s]) - share),
                static_cast<double>(kPartition))
          << "server " << s << " after " << i + 1 << " partitions";
    }
  }
  // Every 4 partitions the split is exact: 2 / 1 / 1.
  Placement exact(weights);
  for (int i = 0; i < 400; ++i) exact.Assign(kPartition);
  EXPECT_EQ(exact.loads(), (std::vector<uint64_t>{200 * kPartition, 100 * kPartition,
                                                  100 * kPartition}));
}

TEST(PlacementTest, WeightsWithRandomSizes) {
  const std::vector<double> weights = {0.5, 0.25, 0.25};
  std::vector<uint64_t> sizes = RandomSizes(3000, 4 << 20, 17);
  Placement placement(weights);
  uint64_t total = 0, largest = 0;
  for (uint64_t s : sizes) {
    placement.Assign(s);
    total += s;
    largest = std::max(largest, s);
  }
  EXPECT_EQ(placement.total(), total);
  for (size_t s = 0; s < weights.size(); ++s) {
    double share = weights[s] * static_cast<double>(total);
    // No server ends a partition or more above its share (see placement.h)...
    EXPECT_LT(static_cast<double>(placement.loads()[s]) - share, static_cast<double>(largest)) << s;
    // ... and, in practice, within 1% of it for this many partitions.
    EXPECT_NEAR(static_cast<double>(placement.loads()[s]) / static_cast<double>(total), weights[s],
                0.01)
        << s;
  }
}

// Checks after every partition that no server holds a partition's worth of bytes (or
// more) above its share: the guarantee in placement.h, for any weights.
void ExpectNeverAheadOfShare(const std::vector<double>& weights, const std::vector<uint64_t>& sizes) {
  double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  Placement placement(weights);
  uint64_t total = 0, largest = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    placement.Assign(sizes[i]);
    total += sizes[i];
    largest = std::max(largest, sizes[i]);
    for (size_t s = 0; s < weights.size(); ++s) {
      double ahead = static_cast<double>(placement.loads()[s]) -
                     weights[s] / sum * static_cast<double>(total);
      ASSERT_LT(ahead, static_cast<double>(largest))
          << "server " << s << " (weight " << weights[s] << ") after " << i + 1 << " partitions";
    }
  }
}

TEST(PlacementTest, NoServerRunsAPartitionAheadOfItsShare) {
  // 4 colocated + 2 CPU-only servers (BytePS weights), equal and random sizes.
  const std::vector<double> mixed = {0.1, 0.1, 0.1, 0.1, 0.3, 0.3};
  ExpectNeverAheadOfShare(mixed, std::vector<uint64_t>(500, 1 << 20));
  ExpectNeverAheadOfShare(mixed, RandomSizes(2000, 4 << 20, 5));
  // Weights that do not sum to 1 give the same placement as their normalized ratios.
  ExpectNeverAheadOfShare({2, 1, 1}, RandomSizes(1000, 1 << 20, 6));
  // Random weights, some zero, on up to 20 servers.
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 50; ++trial) {
    SCOPED_TRACE(trial);
    std::vector<double> w(2 + rng() % 19);
    for (auto& x : w) x = (rng() % 4 == 0) ? 0.0 : static_cast<double>(1 + rng() % 1000);
    w[rng() % w.size()] = 1.0;  // at least one positive
    bool equal_sizes = trial % 2 == 0;
    ExpectNeverAheadOfShare(w, equal_sizes ? std::vector<uint64_t>(300, 4096)
                                           : RandomSizes(300, 4 << 20, 100 + trial));
  }
}

TEST(PlacementTest, HeavyServerBesideManyLightOnesKeepsItsShare) {
  // One server of weight 0.5 beside 50 of 0.01. Placing by argmin (load + bytes) / weight
  // (the previous rule) gave the heavy server the first 49 partitions, 24.5 above its
  // share. Now it takes every other one (for the first 50; then a light server's
  // shortfall, 0.51 partitions, passes the heavy one's 0.5 once).
  std::vector<double> w(51, 0.01);
  w[0] = 0.5;
  Placement placement(w);
  const uint64_t kPart = 1 << 20;
  for (int i = 0; i < 100; ++i) {
    int server = placement.Assign(kPart);
    if (i >= 50) continue;
    if (i % 2 == 0) {
      EXPECT_EQ(server, 0) << "partition " << i;
    } else {
      EXPECT_EQ(server, 1 + i / 2) << "partition " << i;
    }
  }
  EXPECT_EQ(placement.loads()[0], 50 * kPart);
  for (int s = 1; s <= 50; ++s) EXPECT_EQ(placement.loads()[s], kPart) << s;
}

TEST(PlacementTest, FourColocatedTwoCpuExactEveryTenPartitions) {
  // Weights 0.1 x 4 and 0.3 x 2: every 10 equal partitions split exactly 1/1/1/1/3/3.
  Placement placement({0.1, 0.1, 0.1, 0.1, 0.3, 0.3});
  const uint64_t kPart = 65536;
  for (int block = 1; block <= 20; ++block) {
    for (int i = 0; i < 10; ++i) placement.Assign(kPart);
    std::vector<uint64_t> expected = {1, 1, 1, 1, 3, 3};
    for (auto& e : expected) e *= block * kPart;
    ASSERT_EQ(placement.loads(), expected) << "after " << block * 10 << " partitions";
  }
}

TEST(TensorHashTest, StableValues) {
  // FNV-1a over name, int32 dtype and int64 dims (little endian): every worker, on every
  // build, must compute the same value.
  EXPECT_EQ(TensorHash("", DataType::kFloat32, {}), 0x315446a086a23133ull);
  EXPECT_EQ(TensorHash("layer1.weight", DataType::kFloat32, {256, 128}), 0x28af86e669d743dcull);
  EXPECT_EQ(TensorHash("grad", DataType::kFloat64, {10}), 0x600627fe9683ebf6ull);
  EXPECT_EQ(TensorHash("grad", DataType::kFloat64, {10}), TensorHash("grad", DataType::kFloat64, {10}));
}

TEST(TensorHashTest, DiffersWhenNameDtypeOrShapeDiffer) {
  const uint64_t base = TensorHash("layer1.weight", DataType::kFloat32, {256, 128});
  EXPECT_NE(base, TensorHash("layer1.bias", DataType::kFloat32, {256, 128}));
  EXPECT_NE(base, TensorHash("layer1.weigh", DataType::kFloat32, {256, 128}));
  EXPECT_NE(base, TensorHash("layer1.weight", DataType::kFloat16, {256, 128}));
  EXPECT_NE(base, TensorHash("layer1.weight", DataType::kInt32, {256, 128}));
  EXPECT_NE(base, TensorHash("layer1.weight", DataType::kFloat32, {128, 256}));
  EXPECT_NE(base, TensorHash("layer1.weight", DataType::kFloat32, {256 * 128}));
  EXPECT_NE(base, TensorHash("layer1.weight", DataType::kFloat32, {256, 128, 1}));
  EXPECT_NE(base, TensorHash("layer1.weight", DataType::kFloat32, {}));

  // Every dtype gives a distinct hash for one name and shape.
  std::set<uint64_t> by_dtype;
  for (int t = 0; t < kNumDataTypes; ++t) {
    by_dtype.insert(TensorHash("x", static_cast<DataType>(t), {4}));
  }
  EXPECT_EQ(by_dtype.size(), static_cast<size_t>(kNumDataTypes));

  // Many distinct declarations: no collision.
  std::set<uint64_t> hashes;
  for (int i = 0; i < 2000; ++i) {
    hashes.insert(TensorHash("layer" + std::to_string(i), DataType::kFloat32, {i, 3}));
  }
  EXPECT_EQ(hashes.size(), 2000u);
}

}  // namespace
}  // namespace ferry
