// Sparse rows (Worker::PushPullRows) on a real cluster: scheduler, servers and workers
// as processes on loopback (ferry-test-worker --mode=rows*). Every test cleans up its
// processes, also when it fails (ProcessGroup).

#include <gtest/gtest.h>

#include <regex>

#include "tests/support/process_group.h"

namespace ferry::testing {
namespace {

struct RowsCluster {
  ProcessGroup group;
  int port = FreePort();
  std::vector<int> servers, workers;

  void Start(int num_servers, int num_workers, const std::vector<std::string>& worker_args,
             const std::map<std::string, std::string>& extra = {},
             const std::string& worker_binary = "ferry-test-worker") {
    auto env = [&](const std::string& role) {
      auto e = ClusterEnv(role, num_workers, num_servers, port);
      for (const auto& [k, v] : extra) e[k] = v;
      return e;
    };
    group.Spawn("scheduler", {BinaryPath("ferry-scheduler")}, env("scheduler"));
    for (int s = 0; s < num_servers; ++s) {
      servers.push_back(
          group.Spawn("server" + std::to_string(s), {BinaryPath("ferry-server")}, env("server")));
    }
    for (int w = 0; w < num_workers; ++w) {
      auto e = env("worker");
      e["DMLC_WORKER_ID"] = std::to_string(w);
      std::vector<std::string> argv = {BinaryPath(worker_binary)};
      argv.insert(argv.end(), worker_args.begin(), worker_args.end());
      workers.push_back(group.Spawn("worker" + std::to_string(w), argv, e));
    }
  }

  // Every process exits 0 within `timeout_ms`, and every worker printed `ok`.
  void ExpectSuccess(int64_t timeout_ms, const std::string& ok) {
    auto results = group.WaitAll(timeout_ms * TimeScale());
    for (size_t i = 0; i < results.size(); ++i) {
      ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << group.AllOutput();
      ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << group.AllOutput();
    }
    for (int w : workers) EXPECT_NE(group.Output(w).find(ok), std::string::npos) << group.Output(w);
  }
};

// The sum over `outputs` of the number logged before `label` ("<n> <label>").
uint64_t CountLogged(const std::vector<std::string>& outputs, const std::string& label) {
  uint64_t total = 0;
  std::regex pattern("([0-9]+) " + label);
  for (const auto& out : outputs) {
    for (std::sregex_iterator it(out.begin(), out.end(), pattern), end; it != end; ++it) {
      total += std::stoull((*it)[1]);
    }
  }
  return total;
}

TEST(RowsClusterTest, ThreeWorkersTwoServersSumRowsExactly) {
  // [100000, 8] float32 in 64 KiB partitions: the rows spread over both servers.
  RowsCluster c;
  c.Start(2, 3, {"--mode=rows", "--rounds=8"}, {{"FERRY_PARTITION_BYTES", "65536"}});
  c.ExpectSuccess(120000, "OK rows rounds=8");
  for (int w : c.workers) {
    EXPECT_NE(c.group.Output(w).find("error as expected"), std::string::npos);  // bad row ids
  }
  // Each server summed rows: the placement split them.
  for (int s : c.servers) {
    EXPECT_GT(CountLogged({c.group.Output(s)}, "rows pushes of"), 0u) << c.group.Output(s);
  }
}

TEST(RowsClusterTest, DroppedMessagesAreResentAndRowSumsStayExact) {
  // 10% of data messages (row pushes, acks, sums, pulls) dropped in every transport.
  // A lost acknowledgement needs no resend when the sums follow; over 30 rounds of 2
  // workers x 2 servers some 24 pushes or sums are lost, so resends are all but certain.
  RowsCluster c;
  c.Start(2, 2, {"--mode=rows", "--rounds=30"},
          {{"FERRY_PARTITION_BYTES", "65536"},
           {"FERRY_TEST_DROP_PERCENT", "10"},
           {"FERRY_TEST_DELAY_MS", "5"},
           {"FERRY_RESEND_TIMEOUT_MS", "200"}});
  c.ExpectSuccess(300000, "OK rows rounds=30");
  std::vector<std::string> workers, servers;
  for (int w : c.workers) workers.push_back(c.group.Output(w));
  for (int s : c.servers) servers.push_back(c.group.Output(s));
  const uint64_t dropped = CountLogged(workers, "messages dropped by fault injection") +
                           CountLogged(servers, "messages dropped by fault injection");
  const uint64_t resent = CountLogged(workers, "pushes sent again") + CountLogged(workers, "pulls");
  const uint64_t deduplicated =
      CountLogged(servers, "duplicates dropped") + CountLogged(servers, "sums sent again");
  EXPECT_GT(dropped, 0u) << c.group.AllOutput();
  EXPECT_GT(resent, 0u) << c.group.AllOutput();
  EXPECT_GT(deduplicated, 0u) << c.group.AllOutput();
  std::printf(
      "fault injection: %llu messages dropped, %llu resends and pulls, %llu answered "
      "from the server's records\n",
      static_cast<unsigned long long>(dropped), static_cast<unsigned long long>(resent),
      static_cast<unsigned long long>(deduplicated));
}

TEST(RowsClusterTest, BytesOnTheWireGrowWithTheRowsNotTheTensor) {
  RowsCluster c;
  c.Start(2, 2, {"--mode=rows_bytes"});
  c.ExpectSuccess(60000, "OK rows bytes scale with rows");
  std::smatch m;
  const std::string out = c.group.Output(c.workers[0]);
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
  RowsCluster c;
  c.Start(2, 2, {"--mode=rows_mismatch"});
  c.ExpectSuccess(60000, "OK other keys still served");
}

TEST(RowsClusterTest, RowsWithoutTheOtherWorkersEndAtTheOperationDeadline) {
  RowsCluster c;
  c.Start(1, 2, {"--mode=rows_timeout"}, {{"FERRY_OP_TIMEOUT_MS", "3000"}});
  c.ExpectSuccess(60000, "");
  EXPECT_NE(c.group.Output(c.workers[0]).find("OK rows timeout"), std::string::npos)
      << c.group.AllOutput();
}

TEST(RowsClusterTest, TheCApiSumsRowsAndRefusesBadIds) {
  RowsCluster c;
  c.Start(2, 3, {}, {}, "ferry-test-c-rows");
  c.ExpectSuccess(60000, "OK c api rows");
}

// The C API's lifetime rule (worker/binding_core.h): ferry_shutdown() while another thread
// is inside push_pull / wait calls lets those finish and fails the next with kShutdown;
// no crash, no "not initialised" (tests/integration/c_api_shutdown_worker.c).
TEST(RowsClusterTest, TheCApiShutsDownUnderACallOnAnotherThread) {
  RowsCluster c;
  c.Start(1, 1, {}, {}, "ferry-test-c-shutdown");
  c.ExpectSuccess(60000, "OK c api shutdown");
}

}  // namespace
}  // namespace ferry::testing
