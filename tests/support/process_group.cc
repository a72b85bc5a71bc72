#include "tests/support/process_group.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ferry::testing {
namespace {

long NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ProcessGroup::ProcessGroup() {
  char tmpl[] = "/tmp/ferry-test-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
}

ProcessGroup::~ProcessGroup() {
  for (size_t i = 0; i < children_.size(); ++i) {
    if (!children_[i].reaped) {
      kill(children_[i].pid, SIGKILL);
      waitpid(children_[i].pid, nullptr, 0);
    }
  }
  if (!std::getenv("FERRY_TEST_KEEP_LOGS")) {
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0) {
      // Leftover logs in /tmp are harmless.
    }
  }
}

int ProcessGroup::Spawn(const std::string& name, const std::vector<std::string>& argv,
                        const std::map<std::string, std::string>& env) {
  Child c;
  c.name = name;
  c.log = dir_ + "/" + name + ".log";
  c.start_ms = NowMs();
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  c.pid = pid;
  children_.push_back(c);
  return static_cast<int>(children_.size()) - 1;
}

ChildResult ProcessGroup::Wait(int index, long timeout_ms) {
  Child& c = children_[index];
  if (c.reaped) return c.result;
  long deadline = NowMs() + timeout_ms;
  int status = 0;
  while (true) {
    pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) break;
    if (NowMs() > deadline) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      c.reaped = true;
      c.result.exited = false;
      c.result.signal = SIGKILL;
      c.result.elapsed_ms = NowMs() - c.start_ms;
      return c.result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  c.reaped = true;
  c.result.elapsed_ms = NowMs() - c.start_ms;
  if (WIFEXITED(status)) {
    c.result.exited = true;
    c.result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    c.result.exited = true;
    c.result.signal = WTERMSIG(status);
  }
  return c.result;
}

std::vector<ChildResult> ProcessGroup::WaitAll(long timeout_ms) {
  long deadline = NowMs() + timeout_ms;
  std::vector<ChildResult> results;
  for (size_t i = 0; i < children_.size(); ++i) {
    results.push_back(Wait(static_cast<int>(i), std::max(0L, deadline - NowMs())));
  }
  return results;
}

void ProcessGroup::Kill(int index, int signal) {
  if (!children_[index].reaped) kill(children_[index].pid, signal);
}

std::string ProcessGroup::Output(int index) const {
  std::ifstream in(children_[index].log);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ProcessGroup::AllOutput() const {
  std::string all;
  for (size_t i = 0; i < children_.size(); ++i) {
    all += "===== " + children_[i].name + " =====\n" + Output(static_cast<int>(i));
  }
  return all;
}

namespace {

// Binds a TCP socket on 127.0.0.1 to `port` (0: any) and returns the port it got, or -1.
int BindOnce(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int got = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    got = ntohs(addr.sin_port);
  }
  close(fd);
  return got;
}

// The lowest port the kernel hands out for binds to port 0 and for connections.
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  in >> low;
  return low;
}

}  // namespace

// Below the kernel's ephemeral range: the nodes' own listeners (bound to port 0) and
// connections take their ports from that range, so none can take this one between this
// check and the scheduler's bind (an ephemeral port that was free once could: a server
// bound it first and the scheduler could not listen).
int FreePort() {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  const int low = 10000, high = EphemeralLow() - 1;
  if (high - low >= 1000) {
    std::uniform_int_distribution<int> pick(low, high);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = pick(rng);
      if (BindOnce(port) == port) return port;
    }
  }
  const int port = BindOnce(0);
  if (port <= 0) throw std::runtime_error("bind failed");
  return port;
}

std::string BinaryPath(const std::string& name) {
  // FERRY_TEST_BIN_DIR: programs copied to another machine (scripts/gpu-checks --pack).
  const char* dir = std::getenv("FERRY_TEST_BIN_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : FERRY_BINARY_DIR) + "/" + name;
}

namespace {
int ScaleFromEnv(const char* name, int otherwise) {
  const char* s = std::getenv(name);
  const int v = s ? std::atoi(s) : 0;
  return v > 0 ? v : otherwise;
}
}  // namespace

int TimeScale() { return ScaleFromEnv("FERRY_TEST_TIME_SCALE", 1); }

int DetectionScale() { return ScaleFromEnv("FERRY_TEST_DETECTION_SCALE", TimeScale()); }

std::map<std::string, std::string> ClusterEnv(const std::string& role, int workers, int servers,
                                              int scheduler_port) {
  const int scale = TimeScale(), detection = DetectionScale();
  return {{"DMLC_ROLE", role},
          {"DMLC_NUM_WORKER", std::to_string(workers)},
          {"DMLC_NUM_SERVER", std::to_string(servers)},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", std::to_string(scheduler_port)},
          {"DMLC_NODE_HOST", "127.0.0.1"},
          {"FERRY_HEARTBEAT_INTERVAL_MS", std::to_string(200 * detection)},
          {"FERRY_HEARTBEAT_TIMEOUT_MS", std::to_string(kHeartbeatTimeoutMs * detection)},
          {"FERRY_CONNECT_TIMEOUT_MS", std::to_string(30000 * scale)},
          {"FERRY_OP_TIMEOUT_MS", std::to_string(60000 * scale)}};
}

}  // namespace ferry::testing
