#include "tests/support/test_cluster.h"

#include <algorithm>
#include <chrono>
#include <regex>
#include <thread>

namespace ferry::testing {

TestCluster::TestCluster(ClusterSpec spec)
    : spec_(std::move(spec)), stats_(std::make_unique<StatsFiles>()), port_(FreePort()) {}

Env TestCluster::RoleEnv(const std::string& role) const {
  Env e = ClusterEnv(role, spec_.workers, spec_.servers, port_);
  for (const auto& [k, v] : spec_.env) e[k] = v;
  const Env& own = role == "scheduler" ? spec_.scheduler_env
                   : role == "server"  ? spec_.server_env
                                       : spec_.worker_env;
  for (const auto& [k, v] : own) e[k] = v;
  if (spec_.stats_files) e["FERRY_STATS_FILE"] = stats_->path_template();
  return e;
}

void TestCluster::Start() {
  StartScheduler();
  for (int s = 0; s < spec_.servers; ++s) StartServer();
  for (int w = 0; w < spec_.workers; ++w) {
    for (int l = 0; l < std::max(1, spec_.local_size); ++l) StartWorker(w, {}, {}, l);
  }
}

ClusterSpec SpecOf(int servers, int workers, const std::vector<std::string>& args,
                   const Env& env) {
  ClusterSpec spec;
  spec.servers = servers;
  spec.workers = workers;
  spec.worker_args = args;
  spec.env = env;
  return spec;
}

int TestCluster::StartScheduler(const Env& extra) {
  Env e = RoleEnv("scheduler");
  for (const auto& [k, v] : extra) e[k] = v;
  scheduler_ = group_.Spawn("scheduler", {BinaryPath(spec_.scheduler_program)}, e);
  return scheduler_;
}

int TestCluster::StartServer(const Env& extra, const std::string& name) {
  Env e = RoleEnv("server");
  for (const auto& [k, v] : extra) e[k] = v;
  const std::string default_name =
      spec_.servers == 1 ? "server" : "server" + std::to_string(servers_.size());
  std::vector<std::string> argv = {BinaryPath(spec_.server_program)};
  argv.insert(argv.end(), spec_.server_args.begin(), spec_.server_args.end());
  const int s = group_.Spawn(name.empty() ? default_name : name, argv, e);
  servers_.push_back(s);
  return s;
}

int TestCluster::StartWorker(int rank, const std::vector<std::string>& extra_args, const Env& extra,
                             int local_rank) {
  Env e = RoleEnv("worker");
  e["DMLC_WORKER_ID"] = std::to_string(rank);
  std::string name = "worker" + std::to_string(rank);
  if (spec_.local_size > 0) {
    e["FERRY_LOCAL_SIZE"] = std::to_string(spec_.local_size);
    e["FERRY_LOCAL_RANK"] = std::to_string(local_rank);
    name += "." + std::to_string(local_rank);
  }
  for (const auto& [k, v] : extra) e[k] = v;
  std::vector<std::string> argv = {BinaryPath(spec_.worker_program)};
  argv.insert(argv.end(), spec_.worker_args.begin(), spec_.worker_args.end());
  if (rank < static_cast<int>(spec_.per_worker_args.size())) {
    argv.insert(argv.end(), spec_.per_worker_args[rank].begin(), spec_.per_worker_args[rank].end());
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  const int w = group_.Spawn(name, argv, e);
  workers_.push_back(w);
  return w;
}

int TestCluster::Spawn(const std::string& name, const std::string& program,
                       const std::vector<std::string>& args, const std::string& role,
                       const Env& extra, const std::vector<std::string>& unset) {
  Env e = RoleEnv(role);
  for (const auto& [k, v] : extra) e[k] = v;
  // ProcessGroup adds to the inherited environment, so unset through env -u (which
  // execs the program: the pid stays the program's).
  std::vector<std::string> argv;
  if (!unset.empty()) argv.push_back("/usr/bin/env");
  for (const std::string& k : unset) {
    e.erase(k);
    argv.push_back("-u");
    argv.push_back(k);
  }
  argv.push_back(BinaryPath(program));
  argv.insert(argv.end(), args.begin(), args.end());
  return group_.Spawn(name, argv, e);
}

::testing::AssertionResult TestCluster::Succeeds(long timeout_ms) {
  const std::vector<ChildResult> results = WaitAll(timeout_ms);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].exited) {
      return ::testing::AssertionFailure() << "process " << i << " hung\n" << AllOutput();
    }
    if (results[i].exit_code != 0) {
      return ::testing::AssertionFailure()
             << "process " << i << " exit code " << results[i].exit_code << " signal "
             << results[i].signal << "\n"
             << AllOutput();
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult TestCluster::WaitForOutput(int index, const std::string& text,
                                                      long timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(Scaled(timeout_ms));
  while (Output(index).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) {
      return ::testing::AssertionFailure()
             << "no '" << text << "' from process " << index << " in time\n"
             << AllOutput();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ::testing::AssertionSuccess();
}

std::vector<std::string> TestCluster::Outputs(const std::vector<int>& indices) const {
  std::vector<std::string> out;
  for (int i : indices) out.push_back(Output(i));
  return out;
}

uint64_t TestCluster::CountLogged(const std::vector<int>& indices, const std::string& label) const {
  uint64_t total = 0;
  const std::regex pattern("([0-9]+) " + label);
  for (const std::string& out : Outputs(indices)) {
    for (std::sregex_iterator it(out.begin(), out.end(), pattern), end; it != end; ++it) {
      total += std::stoull((*it)[1]);
    }
  }
  return total;
}

}  // namespace ferry::testing
