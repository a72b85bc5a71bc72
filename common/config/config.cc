#include "common/config/config.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/config/config_scheduling.h"
#include "common/config/env_reader.h"
#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry {

using config_internal::ApplyTransportDefaults;
using config_internal::ReadScheduling;
using config_internal::ValidFrameBytes;

namespace {

NodeRole ParseRole(const std::string& text) {
  if (text == "scheduler") return NodeRole::kScheduler;
  if (text == "server") return NodeRole::kServer;
  if (text == "worker") return NodeRole::kWorker;
  ThrowInvalidConfig("DMLC_ROLE", text, "expected scheduler, server or worker");
}

void ParseLogLevel(const std::string& variable, const std::string& text, Config* c) {
  const std::string s = AsciiToUpper(text);
  c->diagnostics.log_verbosity = 0;
  if (s == "TRACE") {
    c->diagnostics.log_level = 0;
    c->diagnostics.log_verbosity = 2;
  } else if (s == "DEBUG") {
    c->diagnostics.log_level = 0;
    c->diagnostics.log_verbosity = 1;
  } else if (s == "INFO" || s.empty()) {
    c->diagnostics.log_level = 0;
  } else if (s == "WARNING" || s == "WARN") {
    c->diagnostics.log_level = 1;
  } else if (s == "ERROR" || s == "FATAL") {
    c->diagnostics.log_level = 2;
  } else {
    ThrowInvalidConfig(variable, text, "expected TRACE, DEBUG, INFO, WARNING or ERROR");
  }
}

std::string ReadSecret(const EnvReader& r, std::vector<std::string>* warnings) {
  std::string secret = r.Str("FERRY_SECRET", nullptr, "");
  std::string file = r.Str("FERRY_SECRET_FILE", nullptr, "");
  if (r.Has("FERRY_SECRET") && secret.empty()) {
    ThrowInvalidConfig("FERRY_SECRET", "", "must not be empty when set (unset it to run without security)");
  }
  if (!file.empty()) {
    if (!secret.empty()) {
      warnings->push_back("FERRY_SECRET overrides FERRY_SECRET_FILE='" + file + "'");
      return secret;
    }
    std::ifstream in(file);
    if (!in) ThrowInvalidConfig("FERRY_SECRET_FILE", file, StrCat("cannot read the file: ", std::strerror(errno)));
    std::getline(in, secret);
    while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) secret.pop_back();
    if (secret.empty()) ThrowInvalidConfig("FERRY_SECRET_FILE", file, "the file's first line is empty");
  }
  if (!secret.empty() && secret.size() < 16) {
    warnings->push_back(StrCat("the cluster secret is only ", secret.size(),
                               " characters long; use at least 16 random characters"));
  }
  return secret;
}

// FERRY_DETERMINISTIC, FERRY_SERVER_SPLIT_BYTES (docs/servers.md).
void ReadServerEngine(const EnvReader& r, Config* c) {
  c->server.deterministic = r.Bool("FERRY_DETERMINISTIC", nullptr, false);
  c->server.split_bytes =
      r.Int("FERRY_SERVER_SPLIT_BYTES", nullptr, c->server.split_bytes, 0, 1LL << 40);
  c->server.inline_bytes =
      r.Int("FERRY_SERVER_INLINE_BYTES", nullptr, c->server.inline_bytes, 0, 1LL << 30);
  c->server.backup_workers = static_cast<int>(
      r.Int("FERRY_BACKUP_WORKERS", nullptr, 0, 0, c->cluster.num_workers - 1));
  if (c->server.backup_workers > 0 && (c->server.deterministic || c->server.async)) {
    ThrowInvalidConfig("FERRY_BACKUP_WORKERS", std::to_string(c->server.backup_workers),
            c->server.deterministic
                ? "a round closed without the latest pushes cannot be summed in rank order "
                  "(FERRY_DETERMINISTIC=1): which ranks make a sum depends on timing; unset one"
                : "asynchronous training (FERRY_ENABLE_ASYNC=1) has no rounds to close early; "
                  "unset one of them");
  }
  if (c->server.deterministic && c->server.async) {
    ThrowInvalidConfig("FERRY_DETERMINISTIC", "1",
            "asynchronous training (FERRY_ENABLE_ASYNC=1) has no rounds to sum in rank order: "
            "every push is applied as it arrives; unset one of them");
  }
}

// FERRY_METRICS_*: the scheduler's metrics endpoint (scheduler/cluster_metrics.h).
void ReadMetrics(const EnvReader& r, Config* c) {
  Config::Diagnostics& d = c->diagnostics;
  d.metrics_port = static_cast<int>(r.Int("FERRY_METRICS_PORT", nullptr, 0, 0, 65535));
  d.metrics_bind = r.Str("FERRY_METRICS_BIND", nullptr, d.metrics_bind);
  in_addr addr{};
  if (inet_pton(AF_INET, d.metrics_bind.c_str(), &addr) != 1) {
    ThrowInvalidConfig("FERRY_METRICS_BIND", d.metrics_bind,
            "expected an IPv4 address (127.0.0.1, 0.0.0.0 or this host's, e.g. a pod IP)");
  }
  d.metrics_linger_ms = r.Int("FERRY_METRICS_LINGER_MS", nullptr, 0, 0, 3600000);
}

}  // namespace

int64_t Config::Scheduling::InitialPartitionBytes() const {
  return policy == SchedulingPolicy::kP3 ? p3_slice_bytes : partition_bytes;
}

int64_t Config::Scheduling::CreditBytesFor(int64_t partition) const {
  return credit_bytes > 0 ? credit_bytes : credit * partition;
}

const char* NodeRoleName(NodeRole role) {
  switch (role) {
    case NodeRole::kScheduler: return "scheduler";
    case NodeRole::kServer: return "server";
    case NodeRole::kWorker: return "worker";
  }
  return "unknown";
}

EnvLookup ProcessEnvironment() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

EnvLookup MapEnvironment(const std::map<std::string, std::string>& env) {
  return [env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

std::string ResolveHost(const std::string& variable, const std::string& host) {
  if (host.empty()) ThrowInvalidConfig(variable, host, "expected an IPv4 address or a host name");
  in_addr addr{};
  if (inet_pton(AF_INET, host.c_str(), &addr) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || !result) {
    ThrowInvalidConfig(variable, host, StrCat("cannot resolve host name (", gai_strerror(rc), ")"));
  }
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(result->ai_addr)->sin_addr, buf, sizeof buf);
  freeaddrinfo(result);
  return buf;
}

std::string LocalAddressFor(const std::string& remote_ip) {
  // A connected UDP socket makes the kernel pick the route's source address; no packet
  // is sent by connect() on a datagram socket.
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return "127.0.0.1";
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(9);
  inet_pton(AF_INET, remote_ip.c_str(), &remote.sin_addr);
  std::string result = "127.0.0.1";
  if (connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
      result = buf;
    }
  }
  close(fd);
  return result;
}

namespace {

// FERRY_SERVER_DEVICE: cpu (or unset/empty), gpu, gpu:N; FERRY_SERVER_GPU_STREAMS.
void ReadServerDevice(const EnvReader& r, Config* c) {
  const std::string text = r.Str("FERRY_SERVER_DEVICE", nullptr, "");
  const char* kAllowed = "expected cpu, gpu or gpu:N (N: a CUDA device index from 0 to 255)";
  if (text.empty() || text == "cpu") {
    c->server.device = ServerDevice::kCpu;
  } else if (text == "gpu") {
    c->server.device = ServerDevice::kGpu;
  } else if (StartsWith(text, "gpu:") && text.size() > 4 && text.size() <= 7 &&
             text.find_first_not_of("0123456789", 4) == std::string::npos &&
             std::stoi(text.substr(4)) <= 255) {
    c->server.device = ServerDevice::kGpu;
    c->server.gpu = std::stoi(text.substr(4));
  } else {
    ThrowInvalidConfig("FERRY_SERVER_DEVICE", text, kAllowed);
  }
  c->server.gpu_streams =
      static_cast<int>(r.Int("FERRY_SERVER_GPU_STREAMS", nullptr, c->server.gpu_streams, 1, 64));
}

// FERRY_LOCAL_SIZE, FERRY_LOCAL_RANK (and the BYTEPS_ names), FERRY_LOCAL_SOCKET.
// FERRY_ELASTIC and its companions; after the training mode and the local group, which
// it refuses for now (docs/design/elastic.md, decision 8).
// FERRY_SCHEDULERS and, for a scheduler, which of them it is.
void ReadSchedulers(const EnvReader& r, Config* c) {
  Config::Transport& t = c->transport;
  t.schedulers = {{t.root_host, t.root_port}};
  const std::string list = r.Str("FERRY_SCHEDULERS", nullptr, "");
  if (!list.empty()) {
    t.schedulers.clear();
    std::istringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      const size_t colon = item.rfind(':');
      if (colon == std::string::npos || colon == 0) {
        ThrowInvalidConfig("FERRY_SCHEDULERS", list, StrCat("'", item, "' is not host:port"));
      }
      char* end = nullptr;
      const long port = std::strtol(item.c_str() + colon + 1, &end, 10);
      if (*end != '\0' || port < 1 || port > 65535) {
        ThrowInvalidConfig("FERRY_SCHEDULERS", list, StrCat("'", item, "' has no port in 1..65535"));
      }
      t.schedulers.push_back({ResolveHost("FERRY_SCHEDULERS", item.substr(0, colon)),
                              static_cast<int>(port)});
    }
    const auto& first = t.schedulers.front();
    if (first.host != t.root_host || first.port != t.root_port) {
      ThrowInvalidConfig("FERRY_SCHEDULERS", list,
                         StrCat("its first entry (", first.host, ":", first.port,
                                ") must be the scheduler of DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT (",
                                t.root_host, ":", t.root_port, ")"));
    }
  }
  if (c->role != NodeRole::kScheduler || !r.Has("DMLC_PORT")) return;
  // A standby knows itself by the address it is given.
  const int port = static_cast<int>(r.Int("DMLC_PORT", nullptr, 0, 1, 65535));
  const std::string host_text = r.Str("DMLC_NODE_HOST", nullptr, "");
  const std::string host = host_text.empty() ? "" : ResolveHost("DMLC_NODE_HOST", host_text);
  for (size_t i = 0; i < t.schedulers.size(); ++i) {
    if (t.schedulers[i].port == port && (host.empty() || t.schedulers[i].host == host)) {
      t.scheduler_index = static_cast<int>(i);
      return;
    }
  }
  ThrowInvalidConfig("DMLC_PORT", std::to_string(port),
                     StrCat("this scheduler's address (DMLC_NODE_HOST ",
                            host.empty() ? "unset" : host, ", DMLC_PORT ", port,
                            ") is not one of FERRY_SCHEDULERS (", list.empty() ? "unset" : list, ")"));
}

void ReadElastic(const EnvReader& r, Config* c) {
  Config::Cluster& k = c->cluster;
  k.elastic = r.Bool("FERRY_ELASTIC", nullptr, false);
  k.spare = r.Bool("FERRY_SPARE", nullptr, false);
  k.min_workers = static_cast<int>(r.Int("FERRY_MIN_WORKERS", nullptr, 1, 1, k.num_workers));
  k.max_workers = static_cast<int>(
      r.Int("FERRY_MAX_WORKERS", nullptr, k.num_workers, k.num_workers, 65535));
  k.min_workers_timeout_ms = r.Int("FERRY_MIN_WORKERS_TIMEOUT_MS", nullptr,
                                   k.min_workers_timeout_ms, 100, 30 * 86400000LL);
  if (k.spare && (!k.elastic || c->role != NodeRole::kServer)) {
    ThrowInvalidConfig("FERRY_SPARE", "1",
            c->role != NodeRole::kServer
                ? "only a server can be a spare (ferry-server)"
                : "a spare waits for a dead server's slot, which only an elastic job "
                  "(FERRY_ELASTIC=1) gives; set FERRY_ELASTIC=1 on every node");
  }
  if (!k.elastic) return;
  if (c->server.async) {
    ThrowInvalidConfig("FERRY_ELASTIC", "1",
            "not with asynchronous training (FERRY_ENABLE_ASYNC=1): there the servers hold the "
            "parameters, and a dead server takes its share of them with it");
  }
  if (c->local.size > 1) {
    ThrowInvalidConfig("FERRY_ELASTIC", "1",
            StrCat("not with local groups (FERRY_LOCAL_SIZE=", c->local.size,
                   ") yet: a local root's death would take its local ranks with it"));
  }
}

void ReadLocalGroup(const EnvReader& r, Config* c) {
  std::string used;
  const char* size = r.Get("FERRY_LOCAL_SIZE", "BYTEPS_LOCAL_SIZE", &used);
  // "gpus" is ferry-launch's to resolve; a server or scheduler sharing the workers'
  // environment (a k8s ConfigMap) ignores it, a worker needs the number.
  if (size && std::string(size) == "gpus" && c->role != NodeRole::kWorker) {
    c->local.size = 1;
  } else {
    c->local.size = static_cast<int>(r.Int("FERRY_LOCAL_SIZE", "BYTEPS_LOCAL_SIZE", 1, 1, 9999));
  }
  c->local.rank =
      static_cast<int>(r.Int("FERRY_LOCAL_RANK", "BYTEPS_LOCAL_RANK", 0, 0, c->local.size - 1));
  if (c->role == NodeRole::kWorker && c->local.size > 1 && !r.Has("FERRY_LOCAL_RANK") &&
      !r.Has("BYTEPS_LOCAL_RANK")) {
    ThrowInvalidConfig("FERRY_LOCAL_RANK", "",
            StrCat("must be set (0..", c->local.size - 1, ") in each of the FERRY_LOCAL_SIZE=",
                   c->local.size, " processes of a machine; ferry-launch --local-size sets it"));
  }
  c->local.socket = r.Str("FERRY_LOCAL_SOCKET", nullptr, "");
  const bool socket_ok =
      c->local.socket.size() <= 100 && c->local.socket.find_first_not_of(
                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789._:-") == std::string::npos;
  if (!socket_ok) {
    ThrowInvalidConfig("FERRY_LOCAL_SOCKET", c->local.socket,
            "expected at most 100 characters from A-Z a-z 0-9 . _ : - (an abstract socket name)");
  }
  if (c->role == NodeRole::kWorker && c->local.size > 1 && c->server.backup_workers > 0) {
    ThrowInvalidConfig("FERRY_BACKUP_WORKERS", std::to_string(c->server.backup_workers),
            StrCat("not with FERRY_LOCAL_SIZE=", c->local.size, ": a machine pushes one sum for "
                   "its local ranks, so a round could only close without a whole machine; run "
                   "one process per worker (FERRY_LOCAL_SIZE=1) to use backup workers"));
  }
  if (c->role == NodeRole::kWorker && c->local.size > 1 && c->server.async) {
    ThrowInvalidConfig("FERRY_ENABLE_ASYNC", "1",
            StrCat("asynchronous training is not supported with FERRY_LOCAL_SIZE=", c->local.size,
                   " (the local reduction sums gradients, not parameters)"));
  }
}

}  // namespace

Config Config::FromEnvironment(const EnvLookup& env, const NodeRole* fixed_role) {
  Config c;
  EnvReader r(env, &c.warnings);

  std::string role_text = r.Str("DMLC_ROLE", nullptr, "");
  if (fixed_role) {
    c.role = *fixed_role;
    if (!role_text.empty() && ParseRole(role_text) != c.role) {
      ThrowInvalidConfig("DMLC_ROLE", role_text, StrCat("this program is the ", NodeRoleName(c.role)));
    }
  } else {
    if (role_text.empty()) ThrowInvalidConfig("DMLC_ROLE", "", "must be set to scheduler, server or worker");
    c.role = ParseRole(role_text);
  }

  for (const char* required : {"DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI",
                               "DMLC_PS_ROOT_PORT"}) {
    if (!r.Has(required)) ThrowInvalidConfig(required, "", "must be set");
  }
  c.cluster.num_workers = static_cast<int>(r.Int("DMLC_NUM_WORKER", nullptr, 0, 1, 65535));
  c.cluster.num_servers = static_cast<int>(r.Int("DMLC_NUM_SERVER", nullptr, 0, 1, 65535));
  c.transport.root_uri = r.Str("DMLC_PS_ROOT_URI", nullptr, "");
  c.transport.root_host = ResolveHost("DMLC_PS_ROOT_URI", c.transport.root_uri);
  c.transport.root_port = static_cast<int>(r.Int("DMLC_PS_ROOT_PORT", nullptr, 0, 1, 65535));
  // DMLC_WORKER_ID: this worker's rank; unset = ranks in join order.
  c.cluster.worker_id =
      static_cast<int>(r.Int("DMLC_WORKER_ID", nullptr, -1, 0, c.cluster.num_workers - 1));

  if (c.role == NodeRole::kScheduler) {
    ReadSchedulers(r, &c);
    const Config::Transport::Endpoint& own = c.transport.schedulers[c.transport.scheduler_index];
    c.transport.node_host = own.host;
    c.transport.node_port = own.port;
  } else {
    ReadSchedulers(r, &c);
    std::string host = r.Str("DMLC_NODE_HOST", nullptr, "");
    c.transport.node_host =
        host.empty() ? LocalAddressFor(c.transport.root_host) : ResolveHost("DMLC_NODE_HOST", host);
    c.transport.node_port = static_cast<int>(r.Int("DMLC_PORT", nullptr, 0, 0, 65535));
  }
  std::string bind = r.Str("FERRY_BIND_ADDR", nullptr, "");
  c.transport.bind_host = bind.empty() ? c.transport.node_host
                                       : (bind == "*" ? "*" : ResolveHost("FERRY_BIND_ADDR", bind));

  c.cluster.node_kind = r.Str("FERRY_NODE_KIND", nullptr, "");
  if (!c.cluster.node_kind.empty() && c.cluster.node_kind != "colocated" &&
      c.cluster.node_kind != "cpu") {
    ThrowInvalidConfig("FERRY_NODE_KIND", c.cluster.node_kind,
            "expected colocated or cpu (or unset: automatic)");
  }

  c.scheduling.partition_bytes = r.Int("FERRY_PARTITION_BYTES", "BYTEPS_PARTITION_BYTES",
                                       c.scheduling.partition_bytes, 1024, 1LL << 30);
  c.scheduling.credit = static_cast<int>(r.Int(
      "FERRY_SCHEDULING_CREDIT", "BYTEPS_SCHEDULING_CREDIT", c.scheduling.credit, 1, 1 << 20));
  c.scheduling.credit_bytes = r.Int("FERRY_SCHEDULING_CREDIT_BYTES", nullptr, 0, 0, 1LL << 40);
  c.server.engine_threads =
      static_cast<int>(r.Int("FERRY_SERVER_ENGINE_THREADS", "BYTEPS_SERVER_ENGINE_THREAD",
                             c.server.engine_threads, 1, 256));
  ReadServerDevice(r, &c);
  const std::string device_api = r.Str("FERRY_DEVICE_API", nullptr, "cuda");
  if (device_api == "fake") {
    c.device_api = DeviceApiKind::kFake;
  } else if (!device_api.empty() && device_api != "cuda") {
    ThrowInvalidConfig("FERRY_DEVICE_API", device_api,
            "expected cuda, or fake (tests of the device path without a GPU)");
  }
  c.server.async = r.Bool("FERRY_ENABLE_ASYNC", "BYTEPS_ENABLE_ASYNC", false);
  ReadServerEngine(r, &c);
  ReadLocalGroup(r, &c);
  ReadElastic(r, &c);

  c.cluster.connect_timeout_ms =
      r.Int("FERRY_CONNECT_TIMEOUT_MS", nullptr, c.cluster.connect_timeout_ms, 100, 86400000);
  c.cluster.heartbeat_interval_ms =
      r.Int("FERRY_HEARTBEAT_INTERVAL_MS", nullptr, c.cluster.heartbeat_interval_ms, 10, 3600000);
  c.cluster.heartbeat_timeout_ms =
      r.Int("FERRY_HEARTBEAT_TIMEOUT_MS", nullptr, c.cluster.heartbeat_timeout_ms, 50, 86400000);
  if (c.cluster.heartbeat_timeout_ms < 2 * c.cluster.heartbeat_interval_ms) {
    ThrowInvalidConfig("FERRY_HEARTBEAT_TIMEOUT_MS", std::to_string(c.cluster.heartbeat_timeout_ms),
            StrCat("must be at least twice FERRY_HEARTBEAT_INTERVAL_MS (",
                   c.cluster.heartbeat_interval_ms, ")"));
  }
  // Unset: 60 s, or the heartbeat timeout when that is longer.
  c.cluster.scheduler_timeout_ms =
      r.Int("FERRY_SCHEDULER_TIMEOUT_MS", nullptr,
            std::max(c.cluster.scheduler_timeout_ms, c.cluster.heartbeat_timeout_ms), 100,
            7 * 86400000LL);
  if (c.cluster.scheduler_timeout_ms < c.cluster.heartbeat_timeout_ms) {
    ThrowInvalidConfig("FERRY_SCHEDULER_TIMEOUT_MS", std::to_string(c.cluster.scheduler_timeout_ms),
                       StrCat("must be at least FERRY_HEARTBEAT_TIMEOUT_MS (",
                              c.cluster.heartbeat_timeout_ms, ")"));
  }
  c.cluster.op_timeout_ms =
      r.Int("FERRY_OP_TIMEOUT_MS", nullptr, c.cluster.op_timeout_ms, 100, 7 * 86400000LL);
  c.cluster.join_timeout_ms =
      r.Int("FERRY_JOIN_TIMEOUT_MS", nullptr, c.cluster.join_timeout_ms, 100, 30 * 86400000LL);
  c.cluster.stall_warning_ms =
      r.Int("FERRY_STALL_WARNING_MS", nullptr, c.cluster.stall_warning_ms, 0, 30 * 86400000LL);
  c.cluster.stall_shutdown_ms =
      r.Int("FERRY_STALL_SHUTDOWN_MS", nullptr, c.cluster.stall_shutdown_ms, 0, 30 * 86400000LL);
  if (c.cluster.stall_warning_ms > 0 && c.cluster.stall_warning_ms < 100) {
    ThrowInvalidConfig("FERRY_STALL_WARNING_MS", std::to_string(c.cluster.stall_warning_ms),
            "must be 0 (off) or at least 100");
  }
  if (c.cluster.stall_shutdown_ms > 0 && c.cluster.stall_shutdown_ms < c.cluster.stall_warning_ms) {
    ThrowInvalidConfig("FERRY_STALL_SHUTDOWN_MS", std::to_string(c.cluster.stall_shutdown_ms),
            StrCat("must be 0 (never) or at least FERRY_STALL_WARNING_MS (",
                   c.cluster.stall_warning_ms, "): the job ends after the warning"));
  }
  c.transport.resend_timeout_ms = r.Int("FERRY_RESEND_TIMEOUT_MS", "PS_RESEND_TIMEOUT",
                                        c.transport.resend_timeout_ms, 0, 3600000);
  c.transport.link_timeout_ms =
      r.Int("FERRY_LINK_TIMEOUT_MS", nullptr, c.transport.link_timeout_ms, 0, 3600000);
  if (c.transport.link_timeout_ms > 0 && c.transport.link_timeout_ms < 300) {
    ThrowInvalidConfig("FERRY_LINK_TIMEOUT_MS", std::to_string(c.transport.link_timeout_ms),
            "must be 0 (off) or at least 300");
  }
  c.transport.handshake_timeout_ms = r.Int("FERRY_HANDSHAKE_TIMEOUT_MS", nullptr,
                                           c.transport.handshake_timeout_ms, 100, 3600000);
  c.transport.control_lane = r.Bool("FERRY_CONTROL_LANE", nullptr, c.transport.control_lane);
  c.transport.tcp_notsent_lowat = r.Int("FERRY_TCP_NOTSENT_LOWAT", nullptr,
                                        c.transport.tcp_notsent_lowat, 0, 64 << 20);
  c.transport.watermark_bytes = r.Int("FERRY_TRANSPORT_WATERMARK_BYTES", nullptr,
                                      c.transport.watermark_bytes, 0, 1LL << 30);
  c.transport.shm = r.Bool("FERRY_SHM", nullptr, c.transport.shm);
  c.transport.shm_bytes =
      r.Int("FERRY_SHM_BYTES", nullptr, c.transport.shm_bytes, 4LL << 20, 1LL << 40);
  if (c.transport.tcp_notsent_lowat > 0 && c.transport.tcp_notsent_lowat < 4096) {
    ThrowInvalidConfig("FERRY_TCP_NOTSENT_LOWAT", std::to_string(c.transport.tcp_notsent_lowat),
            "must be 0 (the kernel's default) or at least 4096");
  }
  c.transport.test_drop_percent = r.Double("FERRY_TEST_DROP_PERCENT", 0.0, 0.0, 100.0);
  c.transport.test_delay_ms = r.Int("FERRY_TEST_DELAY_MS", nullptr, 0, 0, 60000);
  if (c.transport.test_drop_percent > 0 && c.transport.resend_timeout_ms == 0) {
    ThrowInvalidConfig("FERRY_TEST_DROP_PERCENT", StrCat(c.transport.test_drop_percent),
            "dropping messages needs resends: set FERRY_RESEND_TIMEOUT_MS above 0");
  }
  if (c.transport.test_drop_percent > 0 || c.transport.test_delay_ms > 0) {
    c.warnings.push_back(
        StrCat("fault injection is on (FERRY_TEST_DROP_PERCENT=", c.transport.test_drop_percent,
               ", FERRY_TEST_DELAY_MS=", c.transport.test_delay_ms, "): for tests only"));
  }
  c.transport.max_message_bytes =
      r.Int("FERRY_MAX_MESSAGE_BYTES", nullptr, c.transport.max_message_bytes, 65536, (1LL << 40));
  if (c.transport.max_message_bytes < c.scheduling.partition_bytes + 4096) {
    ThrowInvalidConfig(
        "FERRY_MAX_MESSAGE_BYTES", std::to_string(c.transport.max_message_bytes),
        StrCat("must exceed FERRY_PARTITION_BYTES (", c.scheduling.partition_bytes, ") by 4096"));
  }

  c.transport.frame_bytes = r.Int("FERRY_FRAME_BYTES", nullptr, c.transport.frame_bytes, 0,
                                  c.transport.max_message_bytes);
  if (!ValidFrameBytes(c.transport.frame_bytes)) {
    ThrowInvalidConfig("FERRY_FRAME_BYTES", std::to_string(c.transport.frame_bytes),
            "must be 0 (whole partitions) or a multiple of 8 of at least 4096 (whole elements of "
            "every dtype)");
  }

  ReadScheduling(r, &c);
  if (c.server.backup_workers > 0 && c.scheduling.partition_per_link) {
    ThrowInvalidConfig("FERRY_PARTITION_PER_LINK", "1",
            StrCat("not with FERRY_BACKUP_WORKERS=", c.server.backup_workers, ": a round that "
                   "may close without the latest pushes needs every worker to cut its keys alike; "
                   "unset one of them"));
  }
  // Pieces per link or per layer are 32 KiB x 2^k, capped by the frame size: a cap above
  // 32 KiB off that ladder would give cuts that do not nest (a key cut so fails).
  const int64_t frame = c.transport.frame_bytes;
  if ((c.scheduling.partition_per_link || c.scheduling.decompose_per_layer) && frame > 32768 &&
      (frame % 32768 != 0 || ((frame / 32768) & (frame / 32768 - 1)) != 0)) {
    ThrowInvalidConfig("FERRY_FRAME_BYTES", std::to_string(frame),
            StrCat("with ", c.scheduling.partition_per_link ? "FERRY_PARTITION_PER_LINK=1"
                                                             : "FERRY_DECOMPOSE=per-layer",
                   " frames above 32768 bytes must be 32768 x 2^k (65536, 131072, ...), so that "
                   "every worker's pieces nest"));
  }
  if (c.scheduling.decompose_per_layer && (c.server.backup_workers > 0 || c.server.async)) {
    ThrowInvalidConfig("FERRY_DECOMPOSE", "per-layer",
            c.server.async ? "asynchronous training (FERRY_ENABLE_ASYNC=1) pushes whole keys; "
                             "unset one of them"
                           : StrCat("not with FERRY_BACKUP_WORKERS=", c.server.backup_workers,
                                    ": a round that may close without the latest pushes needs "
                                    "every worker to cut its keys alike; unset one of them"));
  }
  c.diagnostics.trace_dir = r.Str("FERRY_TRACE_DIR", nullptr, "");
  c.diagnostics.stats_file = r.Str("FERRY_STATS_FILE", nullptr, "");
  ReadMetrics(r, &c);
  const std::string compression = r.Str("FERRY_COMPRESSION", nullptr, "none");
  if (Status s = CompressionSpec::Parse(compression, &c.compression.spec); !s.ok()) {
    ThrowInvalidConfig("FERRY_COMPRESSION", compression, s.message());
  }
  c.compression.min_bytes = r.Int("FERRY_COMPRESSION_MIN_BYTES", nullptr,
                                  c.compression.min_bytes, 0, 1LL << 40);
  if (!c.compression.spec.none() && c.server.async) {
    ThrowInvalidConfig("FERRY_COMPRESSION", compression,
                       "asynchronous training (FERRY_ENABLE_ASYNC=1) pushes parameters' "
                       "updates, which are not compressed; unset one of the two");
  }
  ApplyTransportDefaults(r, &c);
  if (c.transport.frame_bytes > 0 &&
      (c.scheduling.partition_bytes - 1) / c.transport.frame_bytes >= 65536) {
    ThrowInvalidConfig("FERRY_FRAME_BYTES", std::to_string(c.transport.frame_bytes),
            StrCat("cuts a ", c.scheduling.partition_bytes,
                   "-byte partition (FERRY_PARTITION_BYTES) into more than 65536 frames"));
  }
  c.transport.secret = ReadSecret(r, &c.warnings);

  std::string used;
  const char* level = r.Get("FERRY_LOG_LEVEL", "BYTEPS_LOG_LEVEL", &used);
  if (level) ParseLogLevel(used, level, &c);
  return c;
}

std::string Config::Transport::Endpoint::ZmqEndpoint() const {
  return StrCat("tcp://", host, ":", port);
}

std::string Config::LocalSocketName() const {
  if (!local.socket.empty()) return local.socket;
  return StrCat("ferry-local-", transport.root_host, ":", transport.root_port, "-w",
                cluster.worker_id < 0 ? std::string("any") : std::to_string(cluster.worker_id));
}

std::string Config::Summary() const {
  return StrCat(
      "role=", NodeRoleName(role), " workers=", cluster.num_workers,
      " servers=", cluster.num_servers, " scheduler=", transport.root_host, ":",
      transport.root_port, " host=", transport.node_host,
      " policy=", SchedulingPolicyName(scheduling.policy),
      scheduling.trirace_on_sends.any() ? " (trirace once sends are seen)" : "",
      " partition_bytes=", scheduling.InitialPartitionBytes(), " credit=", scheduling.credit,
      (scheduling.credit_bytes > 0 ? StrCat(" credit_bytes=", scheduling.credit_bytes)
                                   : std::string()),
      " engine_threads=", server.engine_threads, " split_bytes=", server.split_bytes,
      server.deterministic ? " deterministic" : "", server.async ? " async" : "",
      server.backup_workers > 0 ? StrCat(" backup_workers=", server.backup_workers) : std::string(),
      cluster.elastic ? (cluster.spare ? " elastic spare" : " elastic") : "",
      (server.device == ServerDevice::kGpu
           ? StrCat(" device=gpu:", server.gpu, " gpu_streams=", server.gpu_streams)
           : std::string()),
      " heartbeat=", cluster.heartbeat_interval_ms, "/", cluster.heartbeat_timeout_ms, "ms",
      " resend=", transport.resend_timeout_ms, "ms link_timeout=", transport.link_timeout_ms, "ms",
      transport.control_lane ? " control_lane" : "",
      transport.tcp_notsent_lowat > 0 ? StrCat(" notsent_lowat=", transport.tcp_notsent_lowat)
                                      : std::string(),
      transport.frame_bytes > 0 ? StrCat(" frames=", transport.frame_bytes) : std::string(),
      transport.watermark_bytes > 0 ? StrCat(" watermark=", transport.watermark_bytes)
                                    : std::string(),
      transport.shm ? StrCat(" shm=", transport.shm_bytes >> 20, "MiB") : std::string(" shm=off"),
      " security=", transport.secret.empty() ? "none" : "CURVE",
      " connect_timeout=", cluster.connect_timeout_ms, "ms");
}

}  // namespace ferry
