// Live metrics through a real cluster (FERRY_METRICS_PORT): while 2 workers push_pull
// against 2 servers, a reader thread keeps fetching /metrics and /api/status (the HTTP
// thread against the IO, heartbeat and engine threads: run under ThreadSanitizer in CI);
// after the job, while the scheduler lingers, the exposition's numbers agree exactly
// across nodes: every link's bytes as its sender counted them equal what its receiver
// counted, every worker ran its operations, and the servers completed one round per
// partition per operation.

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "tests/support/http_get.h"
#include "tests/support/process_group.h"
#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

constexpr int kRounds = 10;
constexpr int kTensorBytes = 4 << 16;  // ferry-test-worker --mode=loop: 65536 floats
constexpr int kPartitionBytes = 65536;

// The exposition's samples: "name{labels}" -> value.
std::map<std::string, double> Samples(const std::string& reply) {
  std::map<std::string, double> out;
  std::istringstream in(reply.substr(reply.find("\r\n\r\n") + 4));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

double At(const std::map<std::string, double>& s, const std::string& key) {
  auto it = s.find(key);
  EXPECT_NE(it, s.end()) << "no sample " << key;
  return it == s.end() ? -1 : it->second;
}

std::string Link(const char* name, const char* role, int rank, const std::string& peer) {
  return std::string(name) + "{role=\"" + role + "\",rank=\"" + std::to_string(rank) +
         "\",peer=\"" + peer + "\"}";
}

TEST(MetricsClusterTest, NumbersAgreeAcrossNodesWhileReadersRace) {
  const int port = FreePort();
  ClusterSpec spec;
  spec.servers = 2;
  spec.workers = 2;
  // The pause after each round (the last one too) lets the servers' heartbeats carry their
  // final counts before the job ends.
  spec.worker_args = {"--mode=loop", "--loop_rounds=" + std::to_string(kRounds), "--loop_sleep_ms=500"};
  spec.env = {{"FERRY_METRICS_PORT", std::to_string(port)},
              {"FERRY_METRICS_LINGER_MS", "20000"},
              {"FERRY_HEARTBEAT_INTERVAL_MS", "100"},
              {"FERRY_PARTITION_BYTES", std::to_string(kPartitionBytes)}};
  TestCluster c(spec);
  c.Start();
  std::atomic<bool> stop{false};
  std::atomic<int> answers{0};
  std::thread reader([&] {
    while (!stop) {
      for (const char* path : {"/metrics", "/api/status", "/"}) {
        if (HttpGet(port, path).rfind("HTTP/1.1 200", 0) == 0) answers++;
      }
    }
  });
  for (int w : c.workers()) {
    ChildResult r = c.Wait(w, 120000);
    EXPECT_TRUE(r.exited && r.exit_code == 0) << c.AllOutput();
  }
  const std::string reply = HttpGet(port, "/metrics");  // the scheduler lingers
  stop = true;
  reader.join();
  ASSERT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply;
  EXPECT_GT(answers.load(), 0);
  const std::map<std::string, double> s = Samples(reply);
  double rounds = 0;
  for (int server = 0; server < 2; ++server) {
    rounds += At(s, "ferry_rounds_completed_total{role=\"server\",rank=\"" + std::to_string(server) + "\"}");
  }
  EXPECT_EQ(rounds, kRounds * (kTensorBytes / kPartitionBytes)) << reply;
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(At(s, "ferry_operations_total{role=\"worker\",rank=\"" + std::to_string(w) + "\"}"), kRounds);
    double pushed = 0;
    for (int server = 0; server < 2; ++server) {
      const std::string to_server = "server-" + std::to_string(server);
      const std::string to_worker = "worker-" + std::to_string(w);
      const double sent = At(s, Link("ferry_bytes_sent_total", "worker", w, to_server));
      EXPECT_EQ(sent, At(s, Link("ferry_bytes_received_total", "server", server, to_worker))) << reply;
      EXPECT_EQ(At(s, Link("ferry_bytes_sent_total", "server", server, to_worker)),
                At(s, Link("ferry_bytes_received_total", "worker", w, to_server)))
          << reply;
      pushed += sent;
    }
    EXPECT_GE(pushed, kRounds * kTensorBytes) << reply;  // more only if a push was resent
  }
  // Every node was up until the job ended; now each is listed as ended with it.
  EXPECT_NE(reply.find("ferry_node_up{role=\"worker\",rank=\"1\",node=\"4\",reason=\"the job finished\"} 0"),
            std::string::npos)
      << reply;
  c.Kill(c.scheduler(), SIGKILL);  // no need to wait out the linger
  for (int server : c.servers()) EXPECT_TRUE(c.Wait(server, 60000).exited);
}

}  // namespace
}  // namespace ferry::testing
