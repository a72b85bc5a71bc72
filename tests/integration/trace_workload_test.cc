// Workloads from traces: ferry-train-sim replays a tiny workload on a real
// local cluster (scheduler, two servers, two workers on loopback) with FERRY_TRACE_DIR;
// the traces read back (sim/trace_workload.h) give the workload's layers, its bytes
// exactly and its compute times, and ferry-sim --workload <that dir> predicts an
// iteration from them.

#include "sim/trace_workload.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

// bytes, fwd_ms, bwd_ms of each layer, in backprop order as the CSVs list them.
struct Row {
  uint64_t bytes;
  double fwd_ms, bwd_ms;
};
const std::vector<Row> kRows = {{4000, 0.5, 1.0},  {262144, 1.5, 0.5}, {12, 0.2, 0.3},
                                {80000, 1.0, 2.0}, {1024, 0.3, 0.6},   {400000, 2.0, 1.5}};

std::string WriteWorkload(const std::string& dir) {
  std::string path = dir + "/traced_layers.csv";
  std::ofstream out(path);
  out << "# traced: a test workload\nrow,name,params,bytes,ntensors,fwd_ms,bwd_ms\n";
  for (size_t i = 0; i < kRows.size(); ++i) {
    out << i + 1 << ",layer" << i << "," << kRows[i].bytes / 4 << "," << kRows[i].bytes << ",1,"
        << kRows[i].fwd_ms << "," << kRows[i].bwd_ms << "\n";
  }
  return path;
}

// Sleeps on a nominal clock: the spans are the nominal intervals, so they match closely;
// the tolerance is generous all the same (no timed assertion beyond sanity).
void ExpectNear(double traced, double nominal, const std::string& what) {
  EXPECT_LE(std::abs(traced - nominal), std::max(0.5 * nominal, 1.0))
      << what << ": traced " << traced << " ms, the workload's " << nominal << " ms";
}

TEST(TraceWorkloadTest, TrainSimTracesReadBackAsItsWorkload) {
  TestCluster c;
  const std::string workload = WriteWorkload(c.dir());
  const std::string trace_dir = c.dir() + "/traced";
  ASSERT_EQ(mkdir(trace_dir.c_str(), 0755), 0);
  ClusterSpec spec;
  spec.servers = 2;
  spec.workers = 2;
  spec.worker_program = "ferry-train-sim";
  spec.worker_args = {"--workload=" + workload, "--iterations=4", "--warmup=1", "--check",
                      "--json"};
  spec.env = {{"FERRY_TRACE_DIR", trace_dir}, {"FERRY_PARTITION_BYTES", "65536"}};
  c.spec() = spec;
  c.Start();
  ASSERT_TRUE(c.Succeeds(120000));

  const Workload expected = LoadWorkload(workload);
  const Workload traced = LoadTraceWorkload(trace_dir);
  EXPECT_EQ(traced.model, "traced");
  ASSERT_EQ(traced.layers.size(), expected.layers.size());
  for (size_t l = 0; l < expected.layers.size(); ++l) {
    const Layer& want = expected.layers[l];
    const Layer& got = traced.layers[l];
    SCOPED_TRACE(want.name);
    std::printf("%s: %llu bytes, fwd %.3f ms (workload %.3f), bwd %.3f ms (workload %.3f)\n",
                got.name.c_str(), static_cast<unsigned long long>(got.bytes), got.fwd_ms,
                want.fwd_ms, got.bwd_ms, want.bwd_ms);
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.bytes, want.bytes);
    ExpectNear(got.fwd_ms, want.fwd_ms, "fwd_ms");
    ExpectNear(got.bwd_ms, want.bwd_ms, "bwd_ms");
    EXPECT_GT(got.fwd_ms, 0);
    EXPECT_GT(got.bwd_ms, 0);
  }

  // ferry-sim replays the directory.
  ProcessGroup& g = c.group();
  const int sim =
      g.Spawn("ferry-sim",
              {std::string(FERRY_BINARY_DIR) + "/ferry-sim", "--workload", trace_dir, "--workers",
               "2", "--servers", "2", "--rate", "1gbit", "--iterations", "5"},
              {});
  ChildResult r = c.Wait(sim, 60000);
  EXPECT_TRUE(r.exited && r.exit_code == 0) << g.Output(sim);
  EXPECT_NE(g.Output(sim).find("iteration  median"), std::string::npos) << g.Output(sim);
  EXPECT_NE(g.Output(sim).find("traced (6 layers"), std::string::npos) << g.Output(sim);
}

}  // namespace
}  // namespace ferry::testing
