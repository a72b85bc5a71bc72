#pragma once

// ProcessGroup: real processes for integration tests, always cleaned up.
//
// Every child runs in one process group of its own and gets SIGKILL if the test
// process dies (PR_SET_PDEATHSIG); the destructor kills whatever is still running,
// so a failing test leaves no process behind. Output goes to one file per child.

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ferry::testing {

struct ChildResult {
  bool exited = false;    // false: still running at the deadline (then killed)
  int exit_code = -1;     // valid when exited normally
  int signal = 0;         // the signal that ended it, if any
  long elapsed_ms = 0;    // from spawn to exit
};

class ProcessGroup {
 public:
  ProcessGroup();
  ~ProcessGroup();

  // Starts `argv` with the current environment plus `env`. Returns the child's index.
  int Spawn(const std::string& name, const std::vector<std::string>& argv,
            const std::map<std::string, std::string>& env);
  // Waits for child `index` up to `timeout_ms`; kills it if it is still running.
  ChildResult Wait(int index, long timeout_ms);
  // Waits for every child with one overall deadline.
  std::vector<ChildResult> WaitAll(long timeout_ms);
  void Kill(int index, int signal);
  // Combined stdout and stderr of the child so far.
  std::string Output(int index) const;
  // Every child's output, headed by its name (for failure messages).
  std::string AllOutput() const;
  pid_t pid(int index) const { return children_[index].pid; }
  const std::string& dir() const { return dir_; }

 private:
  struct Child {
    std::string name;
    pid_t pid = -1;
    std::string log;
    long start_ms = 0;
    bool reaped = false;
    ChildResult result;
  };
  std::string dir_;
  std::vector<Child> children_;
};

// A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range (so
// no node's own bind to port 0 takes it before the scheduler binds it).
int FreePort();

// Paths of the built programs: the build's bin directory (set by CMake), or
// $FERRY_TEST_BIN_DIR when set (programs copied elsewhere: scripts/gpu-checks --pack).
std::string BinaryPath(const std::string& name);

// Slow builds (the sanitizers) stretch two kinds of times, each by its own factor:
// - TimeScale() (FERRY_TEST_TIME_SCALE, default 1): deadlines, the most a test waits for
//   something that should happen. They cost nothing while the test passes, so they can be
//   generous.
// - DetectionScale() (FERRY_TEST_DETECTION_SCALE, default TimeScale()): the times a test
//   sits out because the behaviour under test is a timeout (a dead node's heartbeat
//   timeout, an operation's deadline, a stall longer than it). Every test waits them
//   out, so a stage sets only what its slowdown needs for a live process never to be
//   mistaken for a dead one.
int TimeScale();
int DetectionScale();
constexpr int kHeartbeatTimeoutMs = 3000;  // before scaling (by DetectionScale)

// The environment of a cluster on loopback, for one role (deadlines scaled).
std::map<std::string, std::string> ClusterEnv(const std::string& role, int workers, int servers,
                                              int scheduler_port);

}  // namespace ferry::testing
