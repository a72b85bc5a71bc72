#include "tests/support/in_process_cluster.h"

#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <exception>

#include "common/util/status.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tests/support/process_group.h"

namespace ferry::testing {

void SpawnThreads(int n, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&fn, rank] {
      const std::string name = "rank" + std::to_string(rank);
      pthread_setname_np(pthread_self(), name.c_str());
      try {
        fn(rank);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << " threw: " << e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

InProcessCluster::InProcessCluster(Options options)
    : options_(std::move(options)), port_(FreePort()) {
  StartRole("scheduler", NodeRole::kScheduler, [](const Config& config) {
    Scheduler scheduler(config);
    return scheduler.Run();
  });
  for (int s = 0; s < options_.servers; ++s) {
    StartRole("server" + std::to_string(s), NodeRole::kServer, [](const Config& config) {
      CheckServerSettings(config);
      Server server(config);
      return server.Run();
    });
  }
}

InProcessCluster::~InProcessCluster() {
  for (auto& role : roles_) {
    if (role->thread.joinable()) role->thread.join();
  }
}

std::map<std::string, std::string> InProcessCluster::RoleEnv(const std::string& role) const {
  auto env = ClusterEnv(role, options_.workers, options_.servers, port_);
  for (const auto& [k, v] : options_.env) env[k] = v;
  return env;
}

void InProcessCluster::StartRole(const std::string& name, NodeRole node_role,
                                 std::function<int(const Config&)> run) {
  auto role = std::make_unique<Role>();
  role->name = name;
  role->config = std::make_unique<Config>(
      Config::FromEnvironment(MapEnvironment(RoleEnv(NodeRoleName(node_role))), &node_role));
  std::packaged_task<int()> task([config = role->config.get(), run = std::move(run), name] {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    try {
      return run(*config);
    } catch (const FerryError& e) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
      return 1;
    }
  });
  role->exit_code = task.get_future();
  role->thread = std::thread(std::move(task));
  roles_.push_back(std::move(role));
}

void InProcessCluster::RunWorkers(const std::function<void(Worker& worker)>& fn) {
  SpawnThreads(options_.workers, [&](int rank) {
    auto env = RoleEnv("worker");
    env["DMLC_WORKER_ID"] = std::to_string(rank);
    const NodeRole role = NodeRole::kWorker;
    std::unique_ptr<Worker> worker =
        Worker::Create(Config::FromEnvironment(MapEnvironment(env), &role));
    fn(*worker);
    worker->Shutdown();
  });
}

::testing::AssertionResult InProcessCluster::Finish(long timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms * TimeScale());
  for (auto& role : roles_) {
    if (!role->exit_code.valid()) continue;  // collected by an earlier Finish
    if (role->exit_code.wait_until(deadline) != std::future_status::ready) {
      return ::testing::AssertionFailure() << role->name << " still running at the deadline";
    }
    const int code = role->exit_code.get();
    if (code != 0) return ::testing::AssertionFailure() << role->name << " returned " << code;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ferry::testing
