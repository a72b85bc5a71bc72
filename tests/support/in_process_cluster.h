#pragma once

// InProcessCluster: a whole Ferry job inside the test process, for fast tests. The
// scheduler, the servers and the workers are the library's role objects (Scheduler,
// Server, Worker), each on a thread of its own with a Config of its own (read from a
// map: MapEnvironment, so the process environment is never touched), talking over real
// ZeroMQ sockets on loopback. No program is started: a job costs milliseconds, not the
// hundreds a process needs, and ThreadSanitizer sees every role's threads at once.
//
//   InProcessCluster cluster({/*servers=*/2, /*workers=*/2});
//   cluster.RunWorkers([](Worker& w) {
//     std::vector<float> g(1000, w.rank() + 1.0f);
//     w.PushPull("g", g.data(), g.data(), DataType::kFloat32, g.size(), false);
//     EXPECT_EQ(g[0], 3.0f);
//   });
//   EXPECT_TRUE(cluster.Finish(10000));
//
// The scheduler and the servers start in the constructor; RunWorkers creates the workers
// (Worker::Create blocks until the whole job registered, so each on its own thread), runs
// the test's function on each and shuts every worker down, after which the scheduler and
// the servers end. What a process would do around its role is not done: no glog set-up
// (the roles log to stderr), no signal handling, no exit.

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config/config.h"
#include "worker/worker.h"

namespace ferry::testing {

// gloo's spawn(): runs fn(rank) for every rank in [0, n), each on a thread of its own,
// and returns once all returned. An exception from fn fails the test naming the rank.
void SpawnThreads(int n, const std::function<void(int rank)>& fn);

class InProcessCluster {
 public:
  struct Options {
    int servers = 2;
    int workers = 2;
    // Beyond ClusterEnv (tests/support/process_group.h), for every role.
    std::map<std::string, std::string> env;
  };

  // Starts the scheduler and the servers, each on its thread.
  explicit InProcessCluster(Options options);
  // Waits for every role's thread (the roles end at their own deadlines at the latest:
  // FERRY_CONNECT_TIMEOUT_MS, FERRY_HEARTBEAT_TIMEOUT_MS).
  ~InProcessCluster();
  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  // One thread per worker rank: Worker::Create, fn(worker), Worker::Shutdown. Returns once
  // every worker thread returned. An exception (from Create, fn or Shutdown) fails the
  // test naming the rank; the worker is destroyed without Shutdown then. Call once.
  void RunWorkers(const std::function<void(Worker& worker)>& fn);

  // The scheduler's and every server's Run() returned 0 within `timeout_ms` (scaled by
  // FERRY_TEST_TIME_SCALE).
  ::testing::AssertionResult Finish(long timeout_ms);

  // The environment of a role (as ClusterEnv plus Options::env).
  std::map<std::string, std::string> RoleEnv(const std::string& role) const;
  int port() const { return port_; }

 private:
  // A scheduler or server on its thread: `run` builds the role object from `config`
  // and returns its Run()'s result (1 for a FerryError, logged).
  struct Role {
    std::string name;
    std::unique_ptr<Config> config;  // the role object borrows it: outlives the thread
    std::future<int> exit_code;
    std::thread thread;
  };
  void StartRole(const std::string& name, NodeRole role, std::function<int(const Config&)> run);

  Options options_;
  int port_;
  std::vector<std::unique_ptr<Role>> roles_;  // the scheduler, then the servers
};

}  // namespace ferry::testing
