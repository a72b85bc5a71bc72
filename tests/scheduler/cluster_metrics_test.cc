// ClusterMetrics (scheduler/cluster_metrics.h): live nodes from the table, dead ones kept
// with their reason (ferry_node_up 0, their own series no longer exported), a spare in a
// dead slot as a new node, rates over the window and delay quantiles over the minute from
// the heartbeats' snapshots, on a fake clock.

#include "scheduler/cluster_metrics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "common/metrics/series.h"

namespace ferry {
namespace {

proto::NodeInfo Info(int id, proto::Role role, int rank) {
  proto::NodeInfo n;
  n.set_id(id);
  n.set_role(role);
  n.set_rank(rank);
  n.set_host("127.0.0.1");
  return n;
}

// Scheduler 0, servers 1 and 2, workers 3 and 4 (ranks 0, 1), at `epoch`.
NodeTable Table(uint32_t epoch, bool with_worker_1 = true) {
  proto::NodeTable t;
  *t.add_nodes() = Info(0, proto::SCHEDULER, 0);
  *t.add_nodes() = Info(1, proto::SERVER, 0);
  *t.add_nodes() = Info(2, proto::SERVER, 1);
  *t.add_nodes() = Info(3, proto::WORKER, 0);
  if (with_worker_1) *t.add_nodes() = Info(4, proto::WORKER, 1);
  t.set_num_servers(2);
  t.set_num_workers(with_worker_1 ? 2 : 1);
  t.set_epoch(epoch);
  return NodeTable(t);
}

proto::MetricsSnapshot WorkerSnapshot(double sent_to_server_0, const Histogram& urgent) {
  proto::MetricsSnapshot s;
  static const metrics::Series kSent{"ferry_bytes_sent_total", metrics::Kind::kCounter, "sent"};
  static const metrics::Series kUrgent{"ferry_urgent_queue_delay_seconds",
                                       metrics::Kind::kHistogram, "urgent delays"};
  metrics::AddValue(&s, kSent, sent_to_server_0, {{"peer", "server-0"}});
  metrics::AddHistogram(&s, kUrgent, urgent);
  return s;
}

class ClusterMetricsTest : public ::testing::Test {
 protected:
  int64_t now_ms_ = 1000;
  ClusterMetrics m_{[this] { return now_ms_; }};

  nlohmann::json Node(const nlohmann::json& status, const std::string& role, int rank, bool alive) {
    for (const auto& n : status["nodes"]) {
      if (n["role"] == role && n["rank"] == rank && n["alive"] == alive) return n;
    }
    return nullptr;
  }
};

TEST_F(ClusterMetricsTest, RatesOverTheWindowAndUrgentDelayOverTheMinute) {
  m_.SetTable(Table(0));
  Histogram urgent;
  m_.Heartbeat(3, nullptr);  // no metrics yet: alive, no links
  auto s0 = WorkerSnapshot(0, urgent);
  m_.Heartbeat(3, &s0);
  for (int i = 1; i <= 20; ++i) {  // 1 MB/s for 20 s; 100 urgent waits of 1 ms, one of 2 s
    now_ms_ += 1000;
    for (int k = 0; k < 5; ++k) urgent.Record(1000);
    if (i == 20) urgent.Record(2000000);
    auto s = WorkerSnapshot(1e6 * i, urgent);
    m_.Heartbeat(3, &s);
  }
  const nlohmann::json status = nlohmann::json::parse(m_.StatusJson());
  EXPECT_EQ(status["job"]["state"], "running");
  EXPECT_EQ(status["nodes"][0]["role"], "scheduler");
  const nlohmann::json w0 = Node(status, "worker", 0, true);
  ASSERT_FALSE(w0.is_null()) << status.dump(2);
  ASSERT_EQ(w0["links"].size(), 1u);
  EXPECT_EQ(w0["links"][0]["peer"], "server-0");
  EXPECT_DOUBLE_EQ(w0["links"][0]["sent_bytes_per_s"].get<double>(), 1e6);
  EXPECT_DOUBLE_EQ(w0["links"][0]["sent_bytes_per_s_minute"].get<double>(), 1e6);
  EXPECT_DOUBLE_EQ(w0["window_s"].get<double>(), 10.0);
  EXPECT_EQ(w0["urgent_queue_delay"]["count"], 101);
  EXPECT_DOUBLE_EQ(w0["urgent_queue_delay"]["p50_ms"].get<double>(), 1.023);  // 2^10 - 1 us
  EXPECT_DOUBLE_EQ(w0["urgent_queue_delay"]["p99_ms"].get<double>(), 1.023);
  // A server that sent no metrics has no links and no rate.
  EXPECT_TRUE(Node(status, "server", 0, true)["links"].empty());
}

TEST_F(ClusterMetricsTest, DeadNodeKeepsItsReasonAndDropsItsSeries) {
  m_.SetTable(Table(0));
  Histogram urgent;
  auto s = WorkerSnapshot(123, urgent);
  m_.Heartbeat(4, &s);
  m_.Died(4, "worker 1 sent no heartbeat for 3001 ms; it is presumed dead");
  m_.SetTable(Table(1, /*with_worker_1=*/false));
  m_.Heartbeat(4, &s);  // late: ignored
  const nlohmann::json status = nlohmann::json::parse(m_.StatusJson());
  const nlohmann::json dead = Node(status, "worker", 1, false);
  ASSERT_FALSE(dead.is_null()) << status.dump(2);
  EXPECT_NE(dead["reason"].get<std::string>().find("presumed dead"), std::string::npos);
  EXPECT_TRUE(dead["links"].empty()) << dead.dump();  // no frozen rates for the dead
  EXPECT_FALSE(dead.contains("urgent_queue_delay")) << dead.dump();
  EXPECT_EQ(status["job"]["epoch"], 1);
  const std::string text = m_.Exposition();
  EXPECT_NE(text.find("ferry_node_up{role=\"worker\",rank=\"1\",node=\"4\",reason=\"worker 1 sent no "
                      "heartbeat for 3001 ms; it is presumed dead\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ferry_node_up{role=\"worker\",rank=\"0\",node=\"3\"} 1\n"), std::string::npos);
  EXPECT_EQ(text.find("ferry_bytes_sent_total{role=\"worker\",rank=\"1\""), std::string::npos) << text;
  EXPECT_EQ(text.find("ferry_heartbeat_age_seconds{role=\"worker\",rank=\"1\""), std::string::npos);
  EXPECT_NE(text.find("ferry_membership_epoch{role=\"scheduler\",rank=\"0\"} 1\n"), std::string::npos);
}

TEST_F(ClusterMetricsTest, ASpareInADeadSlotIsANewNode) {
  m_.SetTable(Table(0));
  m_.Died(2, "server 1 sent no heartbeat");
  m_.SetTable(Table(1));  // a spare took id 2
  const nlohmann::json status = nlohmann::json::parse(m_.StatusJson());
  const nlohmann::json s1 = Node(status, "server", 1, true);
  ASSERT_FALSE(s1.is_null()) << status.dump(2);
  EXPECT_EQ(s1["reason"], "");
  EXPECT_TRUE(Node(status, "server", 1, false).is_null());
}

TEST_F(ClusterMetricsTest, JobEndStatesAndHeartbeatAge) {
  m_.SetTable(Table(0));
  now_ms_ += 2500;
  m_.Heartbeat(3, nullptr);
  nlohmann::json status = nlohmann::json::parse(m_.StatusJson());
  EXPECT_DOUBLE_EQ(Node(status, "worker", 0, true)["heartbeat_age_s"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(Node(status, "worker", 1, true)["heartbeat_age_s"].get<double>(), 2.5);
  m_.Died(4, "gone");
  m_.JobEnded("worker 1 is gone");
  status = nlohmann::json::parse(m_.StatusJson());
  EXPECT_EQ(status["job"]["state"], "failed");
  EXPECT_EQ(status["job"]["failure"], "worker 1 is gone");
  // Every process ends with the job: none is listed alive while the scheduler lingers.
  EXPECT_EQ(Node(status, "worker", 1, false)["reason"], "gone");
  EXPECT_EQ(Node(status, "worker", 0, false)["reason"], "the job failed");
  EXPECT_NE(m_.Exposition().find("ferry_node_up{role=\"worker\",rank=\"0\",node=\"3\",reason=\"the job "
                                 "failed\"} 0\n"),
            std::string::npos);
}

TEST_F(ClusterMetricsTest, AFinishedJobKeepsItsFinalNumbers) {
  m_.SetTable(Table(0));
  Histogram urgent;
  auto s = WorkerSnapshot(4096, urgent);
  m_.Heartbeat(3, &s);
  m_.JobEnded("");
  const std::string text = m_.Exposition();
  EXPECT_NE(text.find("ferry_node_up{role=\"worker\",rank=\"0\",node=\"3\",reason=\"the job finished\"} 0\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_bytes_sent_total{role=\"worker\",rank=\"0\",peer=\"server-0\"} 4096\n"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("ferry_heartbeat_age_seconds{role=\"worker\""), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(m_.StatusJson())["job"]["state"], "done");
}

TEST_F(ClusterMetricsTest, InvalidUtf8IsReplacedNotAnError) {
  proto::NodeTable t = Table(0).proto();
  t.mutable_nodes(3)->set_host("h\xFFst");
  m_.SetTable(NodeTable(t));
  m_.Died(4, "tensor 'w\xC3' is gone");
  const nlohmann::json status = nlohmann::json::parse(m_.StatusJson());  // throws if invalid
  EXPECT_EQ(Node(status, "worker", 0, true)["host"], "h\xEF\xBF\xBDst");
  EXPECT_EQ(Node(status, "worker", 1, false)["reason"], "tensor 'w\xEF\xBF\xBD' is gone");
  EXPECT_NE(m_.Exposition().find("reason=\"tensor 'w\xEF\xBF\xBD' is gone\""), std::string::npos);
}

TEST(QuantileMsTest, FromBucketDeltas) {
  // Cumulative counts at 127, 255, 511 us ...: 10 samples <= 127 us before, then 10 more
  // of which 9 <= 255 us and one <= 511 us.
  std::vector<uint64_t> older(19, 10), newer(19, 20);
  newer[0] = 10;
  newer[1] = 19;
  EXPECT_DOUBLE_EQ(QuantileMs(newer, 20, older, 10, 0.5), 0.255);
  EXPECT_DOUBLE_EQ(QuantileMs(newer, 20, older, 10, 0.95), 0.511);
  EXPECT_EQ(QuantileMs(older, 10, older, 10, 0.5), -1);
  std::vector<uint64_t> beyond(19, 0);
  EXPECT_TRUE(std::isinf(QuantileMs(beyond, 1, {}, 0, 0.5)));
}

}  // namespace
}  // namespace ferry
