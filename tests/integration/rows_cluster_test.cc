// Sparse rows (Worker::PushPullRows) on a real cluster: scheduler, servers and workers
// as processes on loopback (ferry-test-worker --mode=rows*). Every test cleans up its
// processes, also when it fails (TestCluster).

#include <gtest/gtest.h>

#include <regex>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

// `num_servers` servers and `num_workers` workers running `worker_binary` with
// `worker_args`; `extra` for every role.
ClusterSpec Spec(int num_servers, int num_workers, const std::vector<std::string>& worker_args,
                 const Env& extra = {}, const std::string& worker_binary = "ferry-test-worker") {
  ClusterSpec spec;
  spec.servers = num_servers;
  spec.workers = num_workers;
  spec.worker_program = worker_binary;
  spec.worker_args = worker_args;
  spec.env = extra;
  return spec;
}

// Every process exits 0 within `timeout_ms`, and every worker printed `ok`.
void ExpectSuccess(TestCluster& c, int64_t timeout_ms, const std::string& ok) {
  ASSERT_TRUE(c.Succeeds(timeout_ms));
  for (int w : c.workers()) EXPECT_NE(c.Output(w).find(ok), std::string::npos) << c.Output(w);
}

TEST(RowsClusterTest, ThreeWorkersTwoServersSumRowsExactly) {
  // [100000, 8] float32 in 64 KiB partitions: the rows spread over both servers.
  TestCluster c(Spec(2, 3, {"--mode=rows", "--rounds=8"}, {{"FERRY_PARTITION_BYTES", "65536"}}));
  c.Start();
  ExpectSuccess(c, 120000, "OK rows rounds=8");
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("error as expected"), std::string::npos);  // bad row ids
  }
  // Each server summed rows: the placement split them.
  for (int s : c.servers()) {
    EXPECT_GT(c.CountLogged({s}, "rows pushes of"), 0u) << c.Output(s);
  }
}

TEST(RowsClusterTest, DroppedMessagesAreResentAndRowSumsStayExact) {
  // 10% of data messages (row pushes, acks, sums, pulls) dropped in every transport.
  // A lost acknowledgement needs no resend when the sums follow; over 30 rounds of 2
  // workers x 2 servers some 24 pushes or sums are lost, so resends are all but certain.
  TestCluster c(Spec(2, 2, {"--mode=rows", "--rounds=30"},
                     {{"FERRY_PARTITION_BYTES", "65536"},
                      {"FERRY_TEST_DROP_PERCENT", "10"},
                      {"FERRY_TEST_DELAY_MS", "5"},
                      {"FERRY_RESEND_TIMEOUT_MS", "200"}}));
  c.Start();
  ExpectSuccess(c, 300000, "OK rows rounds=30");
  const std::vector<int>& workers = c.workers();
  const std::vector<int>& servers = c.servers();
  const uint64_t dropped = c.CountLogged(workers, "messages dropped by fault injection") +
                           c.CountLogged(servers, "messages dropped by fault injection");
  const uint64_t resent =
      c.CountLogged(workers, "pushes sent again") + c.CountLogged(workers, "pulls");
  const uint64_t deduplicated =
      c.CountLogged(servers, "duplicates dropped") + c.CountLogged(servers, "sums sent again");
  EXPECT_GT(dropped, 0u) << c.AllOutput();
  EXPECT_GT(resent, 0u) << c.AllOutput();
  EXPECT_GT(deduplicated, 0u) << c.AllOutput();
  std::printf(
      "fault injection: %llu messages dropped, %llu resends and pulls, %llu answered "
      "from the server's records\n",
      static_cast<unsigned long long>(dropped), static_cast<unsigned long long>(resent),
      static_cast<unsigned long long>(deduplicated));
}

TEST(RowsClusterTest, BytesOnTheWireGrowWithTheRowsNotTheTensor) {
  TestCluster c(Spec(2, 2, {"--mode=rows_bytes"}));
  c.Start();
  ExpectSuccess(c, 60000, "OK rows bytes scale with rows");
  std::smatch m;
  const std::string out = c.Output(c.workers()[0]);
  ASSERT_TRUE(std::regex_search(out, m, std::regex("10 rows ([0-9]+), 1000 rows ([0-9]+)"))) << out;
  const uint64_t small = std::stoull(m[1]), large = std::stoull(m[2]);
  const uint64_t dense = 1000000ull * 16 * 4;
  EXPECT_GT(large, 50 * small) << out;   // 100x the rows: close to 100x the bytes
  EXPECT_LT(large * 500, dense) << out;  // 1000 of 1M rows: under 0.2% of the dense size
  std::printf("bytes sent by one worker: 10 rows %llu, 1000 rows %llu; dense tensor %llu\n",
              static_cast<unsigned long long>(small), static_cast<unsigned long long>(large),
              static_cast<unsigned long long>(dense));
}

TEST(RowsClusterTest, MismatchedRowsFailByNameAndOtherKeysKeepServing) {
  TestCluster c(Spec(2, 2, {"--mode=rows_mismatch"}));
  c.Start();
  ExpectSuccess(c, 60000, "OK other keys still served");
}

TEST(RowsClusterTest, RowsWithoutTheOtherWorkersEndAtTheOperationDeadline) {
  TestCluster c(Spec(1, 2, {"--mode=rows_timeout"}, {{"FERRY_OP_TIMEOUT_MS", "3000"}}));
  c.Start();
  ExpectSuccess(c, 60000, "");
  EXPECT_NE(c.Output(c.workers()[0]).find("OK rows timeout"), std::string::npos) << c.AllOutput();
}

TEST(RowsClusterTest, TheCApiSumsRowsAndRefusesBadIds) {
  TestCluster c(Spec(2, 3, {}, {}, "ferry-test-c-rows"));
  c.Start();
  ExpectSuccess(c, 60000, "OK c api rows");
}

// The C API's lifetime rule (worker/binding_core.h): ferry_shutdown() while another thread
// is inside push_pull / wait calls lets those finish and fails the next with kShutdown;
// no crash, no "not initialised" (tests/integration/c_api_shutdown_worker.c).
TEST(RowsClusterTest, TheCApiShutsDownUnderACallOnAnotherThread) {
  TestCluster c(Spec(1, 1, {}, {}, "ferry-test-c-shutdown"));
  c.Start();
  ExpectSuccess(c, 60000, "OK c api shutdown");
}

}  // namespace
}  // namespace ferry::testing
