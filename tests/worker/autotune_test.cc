// Tests of the Autotuner (worker/partition_scheduling/autotune.h): the grid, the state machine
// that every worker runs in step, the scoring (warm-up iteration not scored) and the
// decision from summed scores.

#include "worker/partition_scheduling/autotune.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ferry {
namespace {

TEST(AutotuneTest, DefaultGridAroundTheConfiguration) {
  auto grid = Autotuner::Grid(4 << 20, 4, {}, {}, 1024, 64 << 20);
  ASSERT_EQ(grid.size(), 9u);
  EXPECT_EQ(grid[0], (SchedulingChoice{1 << 20, 2 * (1 << 20)}));
  EXPECT_EQ(grid[4], (SchedulingChoice{4 << 20, 4 * (4 << 20)}));
  EXPECT_EQ(grid[8], (SchedulingChoice{16 << 20, 8 * (16 << 20)}));
}

TEST(AutotuneTest, GridClampsAndDropsDuplicates) {
  // P/4 and P clamp to the same minimum; credit 1 gives C/2 = 1 = C.
  auto grid = Autotuner::Grid(2048, 1, {}, {}, 2048, 4096);
  ASSERT_EQ(grid.size(), 4u);
  EXPECT_EQ(grid[0], (SchedulingChoice{2048, 2048}));
  EXPECT_EQ(grid[1], (SchedulingChoice{2048, 4096}));
  EXPECT_EQ(grid[2], (SchedulingChoice{4096, 4096}));
  EXPECT_EQ(grid[3], (SchedulingChoice{4096, 8192}));
  auto given = Autotuner::Grid(1 << 20, 4, {8192, 16384}, {3}, 1024, 1 << 30);
  EXPECT_EQ(given, (std::vector<SchedulingChoice>{{8192, 3 * 8192}, {16384, 3 * 16384}}));
}

TEST(AutotuneTest, ExpandMultipliesByGainsAndFrames) {
  const std::vector<SchedulingChoice> base = {{1 << 20, 4 << 20, 2.0, 0}, {4 << 20, 16 << 20, 2.0, 0}};
  auto grid = Autotuner::Expand(base, {1, 2}, {0, 262144});
  ASSERT_EQ(grid.size(), 8u);
  EXPECT_EQ(grid[0], (SchedulingChoice{1 << 20, 4 << 20, 1.0, 0}));
  EXPECT_EQ(grid[1], (SchedulingChoice{1 << 20, 4 << 20, 1.0, 262144}));
  EXPECT_EQ(grid[2], (SchedulingChoice{1 << 20, 4 << 20, 2.0, 0}));
  EXPECT_EQ(grid[7], (SchedulingChoice{4 << 20, 16 << 20, 2.0, 262144}));
  // Empty axes keep each choice's own value; no duplicates.
  EXPECT_EQ(Autotuner::Expand(base, {}, {}), base);
  EXPECT_EQ(Autotuner::Expand(base, {2, 2}, {}), base);
  // A frame size that would cut a partition into more than 65536 frames is raised.
  auto big = Autotuner::Expand({{1 << 30, 1 << 30, 0.0, 0}}, {}, {4096});
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].frame_bytes, 16384);
  EXPECT_EQ(Describe(grid[1]), "partition 1048576 bytes, window gain 1, frames 262144 bytes");
  EXPECT_EQ(Describe(base[0]), "partition 1048576 bytes, window gain 2");
  EXPECT_EQ(Describe(SchedulingChoice{1 << 20, 3 << 20}), "partition 1048576 bytes, credit 3145728 bytes");
}

TEST(AutotuneTest, TriesEachCandidateThenAsksForADecision) {
  std::vector<SchedulingChoice> grid = {{1024, 1024}, {2048, 4096}, {4096, 4096}};
  Autotuner t(grid, /*steps=*/3);
  auto a = t.OnStep(-1);  // the first boundary
  EXPECT_EQ(a.kind, Autotuner::Action::kSwitch);
  EXPECT_EQ(a.choice, grid[0]);
  std::vector<Autotuner::Action::Kind> kinds;
  // Candidate c's iterations last 100 (warm-up, not scored), then 10 * (c + 1) each.
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(t.OnStep(100).kind, Autotuner::Action::kNone);
    EXPECT_EQ(t.OnStep(10.0 * (c + 1)).kind, Autotuner::Action::kNone);
    auto end = t.OnStep(10.0 * (c + 1));
    if (c < 2) {
      EXPECT_EQ(end.kind, Autotuner::Action::kSwitch);
      EXPECT_EQ(end.choice, grid[c + 1]);
    } else {
      EXPECT_EQ(end.kind, Autotuner::Action::kDecide);
    }
  }
  EXPECT_EQ(t.scores(), (std::vector<double>{20, 40, 60}));
  EXPECT_EQ(t.OnStep(5).kind, Autotuner::Action::kNone);  // waits for Decide
  // The workers' sums decide, not this worker's own scores.
  EXPECT_EQ(t.Decide({300, 100, 200}), 1u);
  EXPECT_TRUE(t.done());
  EXPECT_EQ(t.OnStep(5).kind, Autotuner::Action::kNone);
}

TEST(AutotuneTest, TiesGoToTheLowerIndex) {
  Autotuner t({{1024, 1}, {2048, 1}, {4096, 1}}, 2);
  t.OnStep(-1);
  while (t.OnStep(1).kind != Autotuner::Action::kDecide) {
  }
  EXPECT_EQ(t.Decide({7, 5, 5}), 1u);
}

TEST(AutotuneTest, WorkersWithDifferentTimesSwitchAtTheSameBoundaries) {
  std::vector<SchedulingChoice> grid = {{1024, 1}, {2048, 1}};
  Autotuner fast(grid, 4), slow(grid, 4);
  for (int step = 0; step < 12; ++step) {
    auto a = fast.OnStep(step == 0 ? -1 : 1.0);
    auto b = slow.OnStep(step == 0 ? -1 : 1000.0 * step);
    EXPECT_EQ(a.kind, b.kind) << "boundary " << step;
    EXPECT_EQ(a.choice, b.choice) << "boundary " << step;
  }
}

TEST(AutotuneTest, PartitionBytesForRateIsWhatTheLinkSendsInTheTime) {
  constexpr int64_t kFloor = 131072, kCeiling = 1048576;
  // 200 Mbit/s shared by a worker's pushes and its server's sums (~20 MB/s each) for 4 ms
  // is 80 KB: the floor. 1 Gbit/s (110 MB/s): 440 KB, so 256 KiB. Loopback: the ceiling.
  EXPECT_EQ(PartitionBytesForRate(20e6, 4, kFloor, kCeiling), kFloor);
  EXPECT_EQ(PartitionBytesForRate(110e6, 4, kFloor, kCeiling), 262144);
  EXPECT_EQ(PartitionBytesForRate(1e9, 4, kFloor, kCeiling), kCeiling);
  // Exactly 512 KiB in the time: 512 KiB; one byte less: 256 KiB.
  EXPECT_EQ(PartitionBytesForRate(524288e3, 1, kFloor, kCeiling), 524288);
  EXPECT_EQ(PartitionBytesForRate(524287e3, 1, kFloor, kCeiling), 262144);
  // Nothing measured: the ceiling (the configured size stays).
  EXPECT_EQ(PartitionBytesForRate(0, 4, kFloor, kCeiling), kCeiling);
  EXPECT_EQ(PartitionBytesForRate(std::nan(""), 4, kFloor, kCeiling), kCeiling);
  // A ceiling that is no power of two times the floor is reached only as itself.
  EXPECT_EQ(PartitionBytesForRate(600e6, 1, kFloor, 1000000), 524288);
  EXPECT_EQ(PartitionBytesForRate(2e9, 1, kFloor, 1000000), 1000000);
  EXPECT_EQ(PartitionBytesForRate(1e6, 4, kFloor, kFloor), kFloor);
}

}  // namespace
}  // namespace ferry
