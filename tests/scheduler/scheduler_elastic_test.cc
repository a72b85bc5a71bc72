// The scheduler's elastic membership (FERRY_ELASTIC=1; scheduler.h) with raw members: a
// Scheduler on a thread and bare ClusterClients (each with its Van) as workers, over real
// sockets on loopback. A member "dies" when its client and Van are destroyed (its
// heartbeats stop).

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster/cluster_client.h"
#include "common/config/config.h"
#include "common/transport/van.h"
#include "common/util/error.h"
#include "scheduler/scheduler.h"
#include "tests/support/process_group.h"

namespace ferry::testing {
namespace {

// A worker that registers and heartbeats, and no more.
struct Member {
  explicit Member(const Config& config) : van(VanOptionsFor("member", config)), client(config, &van, 0) {
    van.Start([this](Message&& m, const Origin& o) { client.HandleMessage(m, o); });
  }
  ~Member() { van.Stop(); }
  Van van;
  ClusterClient client;
};

class SchedulerElasticTest : public ::testing::Test {
 protected:
  static constexpr int kWorkers = 3;

  void SetUp() override {
    env_ = ClusterEnv("scheduler", kWorkers, 1, FreePort());
    env_["FERRY_ELASTIC"] = "1";
    // Short, but with room for a loaded machine (a late heartbeat would be a death).
    env_["FERRY_HEARTBEAT_INTERVAL_MS"] = std::to_string(50 * DetectionScale());
    env_["FERRY_HEARTBEAT_TIMEOUT_MS"] = std::to_string(1500 * DetectionScale());
    scheduler_config_ = Config::FromEnvironment(MapEnvironment(env_));
    scheduler_ = std::make_unique<Scheduler>(scheduler_config_);
    run_ = std::async(std::launch::async, [this] { return scheduler_->Run(); });
    // The server slot: a member as a server would register (port 1: never connected to).
    server_config_ = ConfigFor("server", {});
    for (int r = 0; r < kWorkers; ++r) {
      worker_configs_.push_back(ConfigFor("worker", {{"DMLC_WORKER_ID", std::to_string(r)}}));
    }
    std::vector<std::future<void>> registering;
    server_ = std::make_unique<Member>(server_config_);
    registering.push_back(std::async(std::launch::async, [this] { server_->client.Register(); }));
    for (int r = 0; r < kWorkers; ++r) {
      workers_.push_back(std::make_unique<Member>(worker_configs_[r]));
      Member* w = workers_.back().get();
      registering.push_back(std::async(std::launch::async, [w] { w->client.Register(); }));
    }
    for (auto& f : registering) f.get();
  }

  void TearDown() override {
    workers_.clear();
    server_.reset();
    if (run_.valid()) run_.wait_for(std::chrono::seconds(10));  // every member gone: fails
  }

  Config ConfigFor(const std::string& role, const std::map<std::string, std::string>& extra) {
    std::map<std::string, std::string> env = env_;
    env["DMLC_ROLE"] = role;
    for (const auto& [k, v] : extra) env[k] = v;
    return Config::FromEnvironment(MapEnvironment(env));
  }

  // Waits until `m` saw epoch `epoch` (at most 10 s).
  static bool WaitForEpoch(Member& m, uint32_t epoch) {
    for (int i = 0; i < 1000 && m.client.epoch() < epoch; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return m.client.epoch() == epoch;
  }

  std::map<std::string, std::string> env_;
  Config scheduler_config_;
  std::unique_ptr<Scheduler> scheduler_;
  std::future<int> run_;
  Config server_config_;
  std::vector<Config> worker_configs_;
  std::unique_ptr<Member> server_;
  std::vector<std::unique_ptr<Member>> workers_;
};

TEST_F(SchedulerElasticTest, ADeadWorkerStartsAnEpochWithTheOthersRenumbered) {
  ASSERT_EQ(workers_[2]->client.my_rank(), 2);
  workers_[1].reset();  // worker 1 dies
  for (int r : {0, 2}) ASSERT_TRUE(WaitForEpoch(*workers_[r], 1)) << "worker " << r;
  ASSERT_TRUE(WaitForEpoch(*server_, 1));
  EXPECT_EQ(workers_[0]->client.my_rank(), 0);
  EXPECT_EQ(workers_[2]->client.my_rank(), 1);  // renumbered in the old order
  EXPECT_EQ(workers_[0]->client.table().num_workers(), 2);
  // The ids stay: worker 2 keeps its id, so the servers know its connection.
  EXPECT_EQ(workers_[2]->client.table().node(workers_[2]->client.my_id()).rank(), 1);
}

TEST_F(SchedulerElasticTest, ABarrierOfAnOlderEpochIsNeverCountedInTheNewOne) {
  workers_[1].reset();
  for (int r : {0, 2}) ASSERT_TRUE(WaitForEpoch(*workers_[r], 1));
  // A worker still in epoch 0 (it has not reset) cannot enter a barrier.
  try {
    workers_[0]->client.Barrier(proto::GROUP_WORKERS, 5000, nullptr, /*epoch=*/0);
    ADD_FAILURE() << "a barrier of epoch 0 was entered in epoch 1";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMembershipChanged) << e.what();
  }
  // A BARRIER stamped with epoch 0 that reaches the scheduler now (sent before its
  // sender heard of epoch 1) is dropped. Were it counted, worker 2's arrival would complete
  // the barrier with it (released to the stale request) and worker 0's own arrival would
  // open a barrier nobody completes; dropped, both live workers are released together.
  Message stale = MakeMessage(proto::BARRIER, workers_[0]->client.my_id());
  stale.envelope.set_epoch(0);
  stale.envelope.set_request_id(999);
  stale.envelope.mutable_barrier()->set_group(proto::GROUP_WORKERS);
  workers_[0]->van.Send(kSchedulerId, std::move(stale));
  auto a = std::async(std::launch::async,
                      [this] { return workers_[0]->client.Barrier(proto::GROUP_WORKERS, 5000); });
  auto b = std::async(std::launch::async,
                      [this] { return workers_[2]->client.Barrier(proto::GROUP_WORKERS, 5000); });
  EXPECT_NO_THROW(a.get());
  EXPECT_NO_THROW(b.get());
}

TEST_F(SchedulerElasticTest, ABarrierWaitingAtTheChangeThrowsMembershipChanged) {
  auto waiting = std::async(std::launch::async, [this] {
    return workers_[0]->client.Barrier(proto::GROUP_WORKERS, 10000);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  workers_[1].reset();
  try {
    waiting.get();
    ADD_FAILURE() << "the barrier returned across a membership change";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMembershipChanged) << e.what();
  }
}

TEST_F(SchedulerElasticTest, TheLastServerDyingEndsTheJob) {
  server_.reset();
  EXPECT_EQ(run_.get(), 1);
  for (int r = 0; r < kWorkers; ++r) {
    // The NODE_FAILED left with the scheduler's end; its handling may still be under way.
    for (int i = 0; i < 1000 && !workers_[r]->client.failed(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(workers_[r]->client.failed()) << "worker " << r;
    EXPECT_NE(workers_[r]->client.failure().find("no live server is left"), std::string::npos)
        << workers_[r]->client.failure();
  }
}

TEST_F(SchedulerElasticTest, AWorkerEnteringABarrierAgainReplacesItsEarlierArrival) {
  // Its first wait ends at its deadline while the scheduler still counts it; entered again
  // before the others come, the second request must be the one released (before: "twice;
  // ignored", and the release went to the request nobody waited for).
  EXPECT_THROW(workers_[0]->client.Barrier(proto::GROUP_WORKERS, 300), FerryError);
  std::vector<std::future<int>> all;
  for (int r = 0; r < kWorkers; ++r) {
    all.push_back(std::async(std::launch::async, [this, r] {
      return workers_[r]->client.Barrier(proto::GROUP_WORKERS, 5000);
    }));
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it is first
  }
  for (auto& f : all) EXPECT_NO_THROW(f.get());
}

TEST(SchedulerRegistrationTest, AServerRegisteringAgainWhileOthersAreMissingIsNoSpare) {
  // Nodes send their REGISTER again every heartbeat interval until the table comes: a
  // server's repeats while the worker is late must not register it as a spare (it would
  // then take its own slot when it dies).
  auto env = ClusterEnv("scheduler", 1, 1, FreePort());
  env["FERRY_ELASTIC"] = "1";
  env["FERRY_HEARTBEAT_INTERVAL_MS"] = std::to_string(50 * DetectionScale());
  env["FERRY_HEARTBEAT_TIMEOUT_MS"] = std::to_string(1500 * DetectionScale());
  const Config scheduler_config = Config::FromEnvironment(MapEnvironment(env));
  Scheduler scheduler(scheduler_config);
  auto run = std::async(std::launch::async, [&scheduler] { return scheduler.Run(); });
  env["DMLC_ROLE"] = "server";
  const Config server_config = Config::FromEnvironment(MapEnvironment(env));
  env["DMLC_ROLE"] = "worker";
  const Config worker_config = Config::FromEnvironment(MapEnvironment(env));
  auto server = std::make_unique<Member>(server_config);
  auto registering = std::async(std::launch::async, [&server] { server->client.Register(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // about 8 repeats
  Member worker(worker_config);
  worker.client.Register();
  registering.get();
  server.reset();  // dies: no spare may take its slot
  for (int i = 0; i < 1000 && !worker.client.failed(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * DetectionScale()));
  }
  ASSERT_TRUE(worker.client.failed());
  EXPECT_NE(worker.client.failure().find("no live server is left"), std::string::npos)
      << worker.client.failure();
  EXPECT_EQ(worker.client.epoch(), 0u);  // no epoch with a "spare" in the slot
  EXPECT_EQ(run.get(), 1);
}

}  // namespace
}  // namespace ferry::testing
