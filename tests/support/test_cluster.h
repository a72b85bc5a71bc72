#pragma once

// TestCluster: the one way integration tests start a Ferry job of real processes on
// loopback (a scheduler, servers and workers), wait for it with a deadline and read what
// it left (exit codes, output, FERRY_STATS_FILE counters). Built on ProcessGroup: every
// process is killed and its logs removed when the TestCluster goes, also when the test
// fails.
//
//   ClusterSpec spec;
//   spec.servers = 2;
//   spec.workers = 3;
//   spec.worker_args = {"--mode=sums", "--rounds=20"};
//   spec.env = {{"FERRY_PARTITION_BYTES", "1048576"}};
//   TestCluster c(spec);
//   c.Start();
//   ASSERT_TRUE(c.Succeeds(600000));  // every process exits 0 (deadline scaled)
//   EXPECT_NE(c.Output(c.workers()[0]).find("OK rounds=20"), std::string::npos);
//
// Tests with something special (one worker per argument list, local groups, a process
// that is not a role, a role started late) use the parts: StartScheduler, StartServer,
// StartWorker, Spawn, RoleEnv. Indices returned by the Start* calls are ProcessGroup
// indices (for Wait, Kill, Output). Deadlines in milliseconds are multiplied by
// TimeScale() (FERRY_TEST_TIME_SCALE) everywhere here.

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/process_group.h"
#include "tests/support/stats_files.h"

namespace ferry::testing {

using Env = std::map<std::string, std::string>;

struct ClusterSpec {
  int servers = 1;
  // DMLC_NUM_WORKER: worker ranks (machines, when local_size > 0).
  int workers = 1;
  // Worker processes per worker rank, with FERRY_LOCAL_SIZE / FERRY_LOCAL_RANK set
  // (worker/local/). 0: one plain worker process per rank, FERRY_LOCAL_* unset.
  int local_size = 0;
  std::string scheduler_program = "ferry-scheduler";
  std::string server_program = "ferry-server";
  std::string worker_program = "ferry-test-worker";
  std::vector<std::string> server_args;  // of every server
  // Arguments of every worker; per_worker_args[w], when given, follows them for rank w.
  std::vector<std::string> worker_args;
  std::vector<std::vector<std::string>> per_worker_args;
  // Environment beyond ClusterEnv: `env` for every role, then the role's own.
  Env env, scheduler_env, server_env, worker_env;
  // FERRY_STATS_FILE for every role, into stats() (StatsFiles).
  bool stats_files = false;
};

// `servers` servers and `workers` ferry-test-workers with `args`; `env` for every role.
ClusterSpec SpecOf(int servers, int workers, const std::vector<std::string>& args,
                   const Env& env = {});

class TestCluster {
 public:
  explicit TestCluster(ClusterSpec spec = {});
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  // The scheduler, then every server, then every worker (rank by rank, local ranks within).
  void Start();
  int StartScheduler(const Env& extra = {});
  // `name`: for the logs (default "server<n>").
  int StartServer(const Env& extra = {}, const std::string& name = "");
  // Worker rank `rank` (local rank `local_rank` when spec.local_size > 0), with the spec's
  // arguments followed by `extra_args`.
  int StartWorker(int rank, const std::vector<std::string>& extra_args = {}, const Env& extra = {},
                  int local_rank = 0);
  // Any program of the bin directory (a raw member, an intruder, a role alone), as
  // `role` with RoleEnv(role) plus `extra`, less the variables in `unset` (removed from
  // the inherited environment too). Not listed in servers() or workers().
  int Spawn(const std::string& name, const std::string& program,
            const std::vector<std::string>& args, const std::string& role, const Env& extra = {},
            const std::vector<std::string>& unset = {});

  // The environment a node of `role` gets: ClusterEnv, spec.env, the role's spec env,
  // FERRY_STATS_FILE when spec.stats_files.
  Env RoleEnv(const std::string& role) const;

  // Every process started so far exits 0 within `timeout_ms`; the failure names the
  // process and carries every process's output.
  ::testing::AssertionResult Succeeds(long timeout_ms);
  // Waits for every process (one deadline); kills what is left at it.
  std::vector<ChildResult> WaitAll(long timeout_ms) { return group_.WaitAll(Scaled(timeout_ms)); }
  ChildResult Wait(int index, long timeout_ms) { return group_.Wait(index, Scaled(timeout_ms)); }
  void Kill(int index, int signal) { group_.Kill(index, signal); }
  // Waits until process `index` printed `text`; fails after `timeout_ms`.
  ::testing::AssertionResult WaitForOutput(int index, const std::string& text, long timeout_ms);

  std::string Output(int index) const { return group_.Output(index); }
  std::string AllOutput() const { return group_.AllOutput(); }
  std::vector<std::string> Outputs(const std::vector<int>& indices) const;
  // The sum over the outputs of `indices` of the number logged before `label`
  // ("<n> <label>").
  uint64_t CountLogged(const std::vector<int>& indices, const std::string& label) const;

  int port() const { return port_; }
  int scheduler() const { return scheduler_; }
  const std::vector<int>& servers() const { return servers_; }
  // By start order: rank by rank (and local rank within a rank).
  const std::vector<int>& workers() const { return workers_; }
  const ClusterSpec& spec() const { return spec_; }
  // To change before Start (e.g. arguments naming files in dir()).
  ClusterSpec& spec() { return spec_; }
  // A temporary folder removed with the cluster (the processes' logs are there too).
  const std::string& dir() const { return group_.dir(); }
  ProcessGroup& group() { return group_; }
  const ProcessGroup& group() const { return group_; }
  // The stats files (spec.stats_files).
  const StatsFiles& stats() const { return *stats_; }

 private:
  static long Scaled(long ms) { return ms * TimeScale(); }

  ClusterSpec spec_;
  std::unique_ptr<StatsFiles> stats_;  // declared before group_: outlives the processes
  ProcessGroup group_;
  int port_;
  int scheduler_ = -1;
  std::vector<int> servers_, workers_;
};

}  // namespace ferry::testing
