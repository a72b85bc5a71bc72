// Tests of the scheduler's server weights (scheduler/scheduler.h, BytePS OSDI'20
// Theorem 1): n colocated servers and k CPU-only servers; the CPU-only servers carry
// 2k(n-1)/(n^2+kn-2k) of the bytes together, split evenly; weights sum to 1.

#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace ferry {
namespace {

// `n` colocated servers, then `k` CPU-only ones.
std::vector<bool> Servers(int n, int k) {
  std::vector<bool> colocated(n, true);
  colocated.insert(colocated.end(), k, false);
  return colocated;
}

double Sum(const std::vector<double>& w) { return std::accumulate(w.begin(), w.end(), 0.0); }

double CpuShare(const std::vector<bool>& colocated, const std::vector<double>& w) {
  double share = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!colocated[i]) share += w[i];
  }
  return share;
}

TEST(ServerWeightsTest, NoServers) { EXPECT_TRUE(ServerWeights({}).empty()); }

TEST(ServerWeightsTest, OnlyColocatedServersShareEqually) {
  for (int n = 1; n <= 8; ++n) {
    SCOPED_TRACE(n);
    std::vector<double> w = ServerWeights(Servers(n, 0));
    ASSERT_EQ(w.size(), static_cast<size_t>(n));
    for (double x : w) EXPECT_DOUBLE_EQ(x, 1.0 / n);
    EXPECT_NEAR(Sum(w), 1.0, 1e-12);
  }
}

TEST(ServerWeightsTest, OnlyCpuServersShareEqually) {
  for (int k = 1; k <= 8; ++k) {
    SCOPED_TRACE(k);
    std::vector<double> w = ServerWeights(Servers(0, k));
    ASSERT_EQ(w.size(), static_cast<size_t>(k));
    for (double x : w) EXPECT_DOUBLE_EQ(x, 1.0 / k);
    EXPECT_NEAR(Sum(w), 1.0, 1e-12);
  }
}

TEST(ServerWeightsTest, AsManyCpuServersAsColocatedTakeEverything) {
  for (int n = 2; n <= 8; ++n) {
    SCOPED_TRACE(n);
    std::vector<bool> colocated = Servers(n, n);
    std::vector<double> w = ServerWeights(colocated);
    ASSERT_EQ(w.size(), colocated.size());
    for (size_t i = 0; i < w.size(); ++i) {
      if (colocated[i]) {
        EXPECT_NEAR(w[i], 0.0, 1e-12) << i;
      } else {
        EXPECT_NEAR(w[i], 1.0 / n, 1e-12) << i;
      }
    }
    EXPECT_NEAR(CpuShare(colocated, w), 1.0, 1e-12);
    EXPECT_NEAR(Sum(w), 1.0, 1e-12);
  }
}

TEST(ServerWeightsTest, FourColocatedTwoCpu) {
  // n = 4, k = 2: 2*2*3 / (16 + 8 - 4) = 12/20 = 0.6 on the CPU-only servers.
  std::vector<bool> colocated = Servers(4, 2);
  std::vector<double> w = ServerWeights(colocated);
  ASSERT_EQ(w.size(), 6u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(w[i], 0.4 / 4, 1e-12) << i;
  for (int i = 4; i < 6; ++i) EXPECT_NEAR(w[i], 0.6 / 2, 1e-12) << i;
  EXPECT_NEAR(CpuShare(colocated, w), 0.6, 1e-12);
  EXPECT_NEAR(Sum(w), 1.0, 1e-12);
}

TEST(ServerWeightsTest, OrderOfServersDoesNotMatter) {
  // Server i's weight depends only on its kind.
  std::vector<bool> colocated = {false, true, true, false, true, true};
  std::vector<double> w = ServerWeights(colocated);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], colocated[i] ? 0.1 : 0.3, 1e-12) << i;
}

TEST(ServerWeightsTest, MatchesTheFormulaAndSumsToOne) {
  // Every mix with at most as many CPU-only servers as colocated ones (k <= n), except
  // n = k = 1 (see the disabled test below).
  for (int n = 1; n <= 16; ++n) {
    for (int k = 0; k <= n; ++k) {
      if (n == 1 && k == 1) continue;
      SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k);
      std::vector<bool> colocated = Servers(n, k);
      std::vector<double> w = ServerWeights(colocated);
      ASSERT_EQ(w.size(), colocated.size());
      EXPECT_NEAR(Sum(w), 1.0, 1e-9);
      double expected = k == 0 ? 0.0 : 2.0 * k * (n - 1) / (n * n + k * n - 2.0 * k);
      EXPECT_NEAR(CpuShare(colocated, w), expected, 1e-9);
      for (double x : w) {
        EXPECT_TRUE(std::isfinite(x));
        EXPECT_GE(x, 0.0);
        EXPECT_LE(x, 1.0);
      }
    }
  }
}

// Outside the theorem's range (n >= 2, k <= n) the weights must stay valid too: n = 1,
// k = 1 is 0/0 in the formula, and k > n would give colocated servers negative
// weights. ServerWeights gives the CPU-only servers nothing when n <= 1 and everything
// when k >= n.
TEST(ServerWeightsTest, WeightsStayValidForAnyMix) {
  for (int n = 0; n <= 8; ++n) {
    for (int k = 0; k <= 8; ++k) {
      if (n + k == 0) continue;
      SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k);
      std::vector<double> w = ServerWeights(Servers(n, k));
      EXPECT_NEAR(Sum(w), 1.0, 1e-9);
      for (double x : w) {
        EXPECT_TRUE(std::isfinite(x));
        EXPECT_GE(x, 0.0);
        EXPECT_LE(x, 1.0);
      }
    }
  }
}

TEST(ServerWeightsTest, OutsideTheTheoremsRange) {
  // n = 1, k = 1: all bytes on the colocated server.
  EXPECT_EQ(ServerWeights({true, false}), (std::vector<double>{1.0, 0.0}));
  // n = 2, k = 3: the CPU-only servers carry everything, a third each.
  std::vector<double> w = ServerWeights(Servers(2, 3));
  ASSERT_EQ(w.size(), 5u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w[i], 0.0) << i;
  for (int i = 2; i < 5; ++i) EXPECT_NEAR(w[i], 1.0 / 3, 1e-12) << i;
}

// The kind of a server: FERRY_NODE_KIND when set, else by address (DMLC_NODE_HOST).
TEST(ServerKindTest, NodeKindWins) {
  const std::set<std::string> workers = {"10.0.0.1", "10.0.0.2"};
  EXPECT_EQ(ServerKind("cpu", "10.0.0.1", workers), "cpu");        // despite a worker there
  EXPECT_EQ(ServerKind("colocated", "10.0.0.9", workers), "colocated");  // despite none
}

TEST(ServerKindTest, ByDefaultColocatedWhereAWorkerAdvertisesTheSameAddress) {
  const std::set<std::string> workers = {"10.0.0.1", "10.0.0.2"};
  EXPECT_EQ(ServerKind("", "10.0.0.1", workers), "colocated");
  EXPECT_EQ(ServerKind("", "10.0.0.2", workers), "colocated");
  EXPECT_EQ(ServerKind("", "10.0.0.3", workers), "cpu");
  // Addresses compare exactly: another loopback address is another machine.
  EXPECT_EQ(ServerKind("", "127.0.0.2", {"127.0.0.1"}), "cpu");
  EXPECT_EQ(ServerKind("", "127.0.0.1", {"127.0.0.1"}), "colocated");
  // No workers at all (a job still registering cannot be classified otherwise).
  EXPECT_EQ(ServerKind("", "10.0.0.1", {}), "cpu");
}

TEST(ServerKindTest, KindsFeedTheWeights) {
  // Four servers beside workers on hosts a..d and two on hosts e, f: weights 0.1 and 0.3.
  const std::set<std::string> workers = {"a", "b", "c", "d"};
  const std::vector<std::string> hosts = {"a", "e", "b", "c", "f", "d"};
  std::vector<bool> colocated;
  for (const auto& h : hosts) colocated.push_back(ServerKind("", h, workers) == "colocated");
  EXPECT_EQ(colocated, (std::vector<bool>{true, false, true, true, false, true}));
  std::vector<double> w = ServerWeights(colocated);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], colocated[i] ? 0.1 : 0.3, 1e-12) << i;
}

}  // namespace
}  // namespace ferry
