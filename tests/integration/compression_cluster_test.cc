// Gradient compression (common/compress/, worker/push_compression.h,
// server/sum_compression.h) with a real scheduler, servers and workers as processes: every
// compressor's results equal, bit for bit, what the codecs compute for the whole job
// (ferry-test-worker --mode=compression: rank-order sums, error feedback on both sides,
// momentum, random-k's sums in compressed form), the same on every worker; workers that
// disagree on a tensor's compression fail it on every worker, naming both.

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

// The text after `prefix` in `out`, up to the end of its line.
std::string After(const std::string& out, const std::string& prefix) {
  const size_t at = out.find(prefix);
  if (at == std::string::npos) return "";
  const size_t from = at + prefix.size();
  return out.substr(from, out.find('\n', from) - from);
}

class CompressionClusterTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CompressionClusterTest, SumsEqualTheCodecsReferenceOnEveryWorker) {
  const std::string spec = GetParam();
  ClusterSpec c;
  c.servers = 2;
  c.workers = 3;
  c.worker_args = {"--mode=compression", "--compression=" + spec, "--rounds=4"};
  c.env = {{"FERRY_COMPRESSION", spec},
           {"FERRY_DETERMINISTIC", "1"},  // rank-order sums: the reference's order
           {"FERRY_PARTITION_BYTES", "4194304"}};
  TestCluster cluster(c);
  cluster.Start();
  ASSERT_TRUE(cluster.Succeeds(120000));
  std::set<std::string> checksums;
  for (int w : cluster.workers()) {
    const std::string out = cluster.Output(w);
    const std::string line = After(out, "OK compression ");
    ASSERT_FALSE(line.empty()) << out;
    checksums.insert(After(line, "checksum ").substr(0, 16));
    const long long raw = std::stoll(After(line, "raw_bytes="));
    const long long wire = std::stoll(After(line, "wire_bytes="));
    EXPECT_GT(raw, 0) << line;
    EXPECT_LT(wire, raw) << line;
  }
  EXPECT_EQ(checksums.size(), 1u) << "the workers' results differ";
}

INSTANTIATE_TEST_SUITE_P(Compressors, CompressionClusterTest,
                         ::testing::Values("onebit+ef", "topk:0.05+ef+momentum:0.9",
                                           "randomk:0.1", "randomk:0.1+ef", "dither:16+ef",
                                           "dither:8:linear", "fp16", "bf16+ef"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name;
                           for (const char* p = info.param; *p; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

TEST(CompressionClusterTest, WorkersThatDisagreeFailTheTensorNamingBoth) {
  ClusterSpec c;
  c.servers = 1;
  c.workers = 2;
  c.worker_args = {"--mode=compression_mismatch"};
  TestCluster cluster(c);
  cluster.Start();
  ASSERT_TRUE(cluster.Succeeds(60000));
  for (int w : cluster.workers()) {
    const std::string out = cluster.Output(w);
    EXPECT_NE(out.find("disagree on the compression"), std::string::npos) << out;
    EXPECT_NE(out.find("onebit"), std::string::npos) << out;
    EXPECT_NE(out.find("topk:0.1"), std::string::npos) << out;
    EXPECT_NE(out.find("OK other keys still served"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace ferry::testing
