// Heterogeneous placement with real processes: a scheduler, colocated and CPU-only
// servers and two workers on loopback. The scheduler publishes the server weights
// (BytePS OSDI'20: k CPU-only servers beside n colocated ones carry
// 2k(n-1)/(n^2+kn-2k) of the bytes); the workers place partitions by them; and the
// bytes each server counts itself (its "server done: ... bytes summed" line) must
// match its weight within one partition.
//
// A server's kind comes from FERRY_NODE_KIND, or, when unset, from its address:
// colocated when a worker advertises the same DMLC_NODE_HOST. The CPU-only servers of
// the by-address test listen on 127.0.0.2 (loopback too, another address).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

constexpr int kWorkers = 2;
constexpr int kRounds = 3;
constexpr uint64_t kPartitionBytes = 65536;

// What a server says about itself in its log.
struct ServerReport {
  int rank = -1;     // from "joined the cluster as server R"
  std::string kind;  // from "; kind K, weight W of the bytes"
  double weight = -1;
  int done_rank = -1;  // the log prefix of the "server done" line
  uint64_t bytes_summed = 0;
};

ServerReport ParseServerLog(const std::string& log) {
  ServerReport r;
  std::smatch m;
  static const std::regex kJoined(
      R"(joined the cluster as server (\d+) \(.*; kind (\w+), weight ([0-9.e+-]+) of the bytes)");
  if (std::regex_search(log, m, kJoined)) {
    r.rank = std::stoi(m[1]);
    r.kind = m[2];
    r.weight = std::stod(m[3]);
  }
  // "I1129 15:40:01.123456 server 3 server.cc:53] server done: 10 pushes, 5 rounds, N bytes summed"
  static const std::regex kDone(
      R"( server (\d+) \S+:\d+\] server done: \d+ pushes, \d+ rounds, (\d+) bytes summed)");
  if (std::regex_search(log, m, kDone)) {
    r.done_rank = std::stoi(m[1]);
    r.bytes_summed = std::stoull(m[2]);
  }
  return r;
}

// "placed bytes per server: b0,b1,...; tensor bytes T" from a test worker.
bool ParseWorkerPlacement(const std::string& log, std::vector<uint64_t>* placed, uint64_t* total) {
  std::smatch m;
  static const std::regex kPlaced(R"(placed bytes per server: ([0-9,]+); tensor bytes (\d+))");
  if (!std::regex_search(log, m, kPlaced)) return false;
  placed->clear();
  std::string list = m[1];
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    placed->push_back(std::stoull(list.substr(start, comma - start)));
    start = comma + 1;
  }
  *total = std::stoull(m[2]);
  return true;
}

enum class KindFrom { kNodeKind, kNodeHost };

// Runs a job with `n` colocated and `k` CPU-only servers, whose kinds are set by
// FERRY_NODE_KIND or by address, and checks every server's counted bytes against its
// weight. `cpu_share`: what the CPU-only servers carry together, 2k(n-1)/(n^2+kn-2k)
// worked out by hand in each test.
void RunAndCheck(int n, int k, KindFrom from, double cpu_share) {
  const int servers = n + k;
  ClusterSpec spec;
  spec.servers = servers;
  spec.workers = kWorkers;
  spec.worker_args = {"--mode=sums", "--tensors=30", "--max_bytes=4194304",
                      "--rounds=" + std::to_string(kRounds)};
  spec.env = {{"FERRY_PARTITION_BYTES", std::to_string(kPartitionBytes)}};
  TestCluster g(spec);
  g.StartScheduler();
  // Interleave the kinds, so that neither spawn order nor registration order lines
  // up with them.
  std::map<int, std::string> kind_of;  // process index -> the kind it was given
  int colocated_left = n, cpu_left = k;
  for (int s = 0; s < servers; ++s) {
    bool cpu = cpu_left > 0 && (s % 2 == 1 || colocated_left == 0);
    std::string kind = cpu ? "cpu" : "colocated";
    (cpu ? cpu_left : colocated_left)--;
    Env e;
    if (from == KindFrom::kNodeKind) {
      e["FERRY_NODE_KIND"] = kind;
    } else {
      e["DMLC_NODE_HOST"] = cpu ? "127.0.0.2" : "127.0.0.1";
    }
    kind_of[g.StartServer(e, "server" + std::to_string(s) + "-" + kind)] = kind;
  }
  for (int w = 0; w < kWorkers; ++w) g.StartWorker(w);
  const std::vector<int>& workers = g.workers();
  ASSERT_TRUE(g.Succeeds(180000));

  // Both workers placed the same bytes on the same servers.
  std::vector<uint64_t> placed, placed1;
  uint64_t total = 0, total1 = 0;
  ASSERT_TRUE(ParseWorkerPlacement(g.Output(workers[0]), &placed, &total)) << g.Output(workers[0]);
  ASSERT_TRUE(ParseWorkerPlacement(g.Output(workers[1]), &placed1, &total1))
      << g.Output(workers[1]);
  ASSERT_EQ(placed, placed1);
  ASSERT_EQ(total, total1);
  ASSERT_EQ(placed.size(), static_cast<size_t>(servers));
  ASSERT_EQ(std::accumulate(placed.begin(), placed.end(), uint64_t{0}), total);
  // Enough partitions that a wrong split shows: the smallest nonzero share is
  // several partitions.
  ASSERT_GT(total, 100 * kPartitionBytes);

  const double colocated_weight = n > 0 ? (1 - cpu_share) / n : 0;
  const double cpu_weight = k > 0 ? cpu_share / k : 0;
  std::vector<bool> seen(servers, false);
  uint64_t counted = 0;
  for (const auto& [process, kind] : kind_of) {
    SCOPED_TRACE(::testing::Message() << "server process " << process << " (" << kind << ")");
    ServerReport r = ParseServerLog(g.Output(process));
    ASSERT_GE(r.rank, 0) << g.Output(process);
    ASSERT_LT(r.rank, servers);
    ASSERT_FALSE(seen[r.rank]) << "two servers with rank " << r.rank;
    seen[r.rank] = true;
    ASSERT_EQ(r.done_rank, r.rank) << g.Output(process);
    // The scheduler classified it as it was set up, and published its weight.
    EXPECT_EQ(r.kind, kind);
    const double weight = kind == "cpu" ? cpu_weight : colocated_weight;
    EXPECT_NEAR(r.weight, weight, 1e-6);
    // The server summed exactly what the workers placed on it, every round...
    EXPECT_EQ(r.bytes_summed, uint64_t{kWorkers} * kRounds * placed[r.rank]);
    counted += r.bytes_summed;
    // ... which is its weight's share of the bytes within one partition.
    double per_round = static_cast<double>(r.bytes_summed) / (kWorkers * kRounds);
    EXPECT_LE(std::abs(per_round - weight * static_cast<double>(total)),
              static_cast<double>(kPartitionBytes))
        << "server " << r.rank << " summed " << per_round << " bytes a round of " << total
        << "; weight " << weight;
    if (weight == 0) {
      EXPECT_EQ(r.bytes_summed, 0u);
    }
  }
  EXPECT_EQ(counted, uint64_t{kWorkers} * kRounds * total);
}

TEST(PlacementClusterTest, FourColocatedTwoCpuByNodeKind) {
  // n = 4, k = 2: 2*2*3 / (16 + 8 - 4) = 0.6 of the bytes on the CPU-only servers,
  // 0.3 each; 0.1 on each colocated server.
  RunAndCheck(4, 2, KindFrom::kNodeKind, 0.6);
}

TEST(PlacementClusterTest, FourColocatedTwoCpuByNodeHost) {
  // No FERRY_NODE_KIND: the servers sharing the workers' address are colocated.
  RunAndCheck(4, 2, KindFrom::kNodeHost, 0.6);
}

TEST(PlacementClusterTest, OnlyColocatedServersShareEqually) {
  // k = 0: a third each.
  RunAndCheck(3, 0, KindFrom::kNodeKind, 0.0);
}

TEST(PlacementClusterTest, AsManyCpuAsColocatedServersCarryEverything) {
  // k = n = 2: 2*2*1 / (4 + 4 - 4) = 1: a classic parameter server.
  RunAndCheck(2, 2, KindFrom::kNodeKind, 1.0);
}

}  // namespace
}  // namespace ferry::testing
