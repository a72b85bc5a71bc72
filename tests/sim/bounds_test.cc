// T_opt and the ring all-reduce model (sim/bounds.h) against their formulas.

#include "sim/bounds.h"

#include <gtest/gtest.h>

#include "scheduler/scheduler.h"

namespace ferry::sim {
namespace {

// n worker hosts with colocated servers, k CPU-only server hosts.
Placing Unified(int n, int k) {
  Placing p;
  std::vector<bool> colocated;
  for (int i = 0; i < n; ++i) {
    p.host_of_worker.push_back(i);
    p.host_of_server.push_back(i);
    colocated.push_back(true);
  }
  for (int i = 0; i < k; ++i) {
    p.host_of_server.push_back(n + i);
    colocated.push_back(false);
  }
  p.weights = ServerWeights(colocated);
  return p;
}

TEST(TOptTest, TheUnifiedArchitectureTheorem) {
  const uint64_t m = 1 << 20;
  const double rate = 125;  // bytes per us
  for (int n : {2, 4, 8}) {
    for (int k = 0; k <= n; ++k) {
      const double theorem = 2.0 * n * (n - 1) * m / ((n * n + k * n - 2.0 * k) * rate);
      EXPECT_NEAR(TOptUs(Unified(n, k), m, rate), theorem, 1e-9 * theorem) << n << " " << k;
    }
  }
}

TEST(TOptTest, ServersOfTheirOwnGiveMOverTheEffectiveRate) {
  Placing p;
  p.host_of_worker = {0, 1, 2, 3};
  p.host_of_server = {4, 5};
  p.weights = {0.5, 0.5};
  // Each server receives 4 x M / 2: twice a worker's M.
  EXPECT_DOUBLE_EQ(TOptUs(p, 1000, 10), 200.0);
  p.host_of_server = {4, 5, 6, 7, 8, 9, 10, 11};
  p.weights.assign(8, 0.125);
  EXPECT_DOUBLE_EQ(TOptUs(p, 1000, 10), 100.0);  // the workers' links decide
}

TEST(TOptTest, OneHostNeedsNoLink) { EXPECT_EQ(TOptUs(Unified(1, 0), 1000, 10), 0.0); }

TEST(RingTest, TheRingAllreduceFormula) {
  EXPECT_EQ(RingAllreduceUs(1000, 1, 10, 5), 0.0);
  // 2 (N-1)/N x bytes / rate + 2 (N-1) x hop.
  EXPECT_DOUBLE_EQ(RingAllreduceUs(1000, 4, 10, 5), 1.5 * 100 + 6 * 5);
  EXPECT_DOUBLE_EQ(RingAllreduceUs(8000, 8, 100, 0), 2.0 * 7 / 8 * 80);
}

TEST(RingTest, BucketsOverlapBackwardAndTheStepWaitsForTheLast) {
  Workload w;
  // Forward order; backward runs from the last: c (ready at 1 ms after forward), b, a.
  w.layers = {{"a", 4000, 1.0, 1.0}, {"b", 4000, 1.0, 1.0}, {"c", 4000, 1.0, 1.0}};
  // 2 workers, 1 byte per us: each 4000-byte all-reduce takes 4000 us; buckets of 8000:
  // {c, b} closes at forward 3 ms + 2 ms = 5 ms and runs to 13 ms; {a} is ready at 6 ms
  // and runs 13 -> 17 ms.
  EXPECT_DOUBLE_EQ(RingIterationMs(w, 2, 1.0, 0, 8000), 17.0);
  // One worker: compute only.
  EXPECT_DOUBLE_EQ(RingIterationMs(w, 1, 1.0, 0, 8000), 6.0);
}

}  // namespace
}  // namespace ferry::sim
