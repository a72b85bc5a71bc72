// Tests of Config::FromEnvironment (common/config): defaults, DMLC_ROLE, required
// variables, integer validation, the BYTEPS_* aliases and their precedence, and the
// cross-variable checks. Every environment is injected with MapEnvironment, so the
// process environment never matters.

#include "common/config/config.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/util/error.h"

namespace ferry {
namespace {

using Env = std::map<std::string, std::string>;

// The smallest valid worker environment. DMLC_NODE_HOST is fixed so no route lookup
// decides the node's address.
Env BaseEnv() {
  return {{"DMLC_ROLE", "worker"},
          {"DMLC_NUM_WORKER", "2"},
          {"DMLC_NUM_SERVER", "1"},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", "9000"},
          {"DMLC_NODE_HOST", "127.0.0.1"}};
}

Env With(Env env, const Env& extra) {
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

Env Without(Env env, const std::string& name) {
  env.erase(name);
  return env;
}

Config Read(const Env& env) { return Config::FromEnvironment(MapEnvironment(env)); }

// Expects FromEnvironment to refuse `env` with kInvalidConfig and a message naming
// `variable`; returns the message for further checks.
std::string ExpectInvalid(const Env& env, const std::string& variable,
                          const NodeRole* fixed_role = nullptr) {
  try {
    Config::FromEnvironment(MapEnvironment(env), fixed_role);
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find(variable), std::string::npos)
        << "message does not name " << variable << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "FromEnvironment accepted the environment; expected an error naming "
                << variable;
  return "";
}

TEST(ConfigTest, Defaults) {
  Config c = Read(BaseEnv());
  EXPECT_EQ(c.role, NodeRole::kWorker);
  EXPECT_EQ(c.cluster.num_workers, 2);
  EXPECT_EQ(c.cluster.num_servers, 1);
  EXPECT_EQ(c.transport.root_uri, "127.0.0.1");
  EXPECT_EQ(c.transport.root_host, "127.0.0.1");
  EXPECT_EQ(c.transport.root_port, 9000);
  EXPECT_EQ(c.cluster.worker_id, -1);
  EXPECT_EQ(c.transport.node_host, "127.0.0.1");
  EXPECT_EQ(c.transport.bind_host, "127.0.0.1");
  EXPECT_EQ(c.transport.node_port, 0);
  EXPECT_EQ(c.cluster.node_kind, "");
  EXPECT_EQ(c.scheduling.partition_bytes, 1048576);
  EXPECT_EQ(c.scheduling.credit, 4);
  EXPECT_EQ(c.scheduling.credit_bytes, 0);
  EXPECT_EQ(c.server.engine_threads, 4);
  EXPECT_FALSE(c.server.async);
  EXPECT_FALSE(c.server.deterministic);
  EXPECT_EQ(c.server.split_bytes, 1 << 20);
  EXPECT_EQ(c.cluster.connect_timeout_ms, 120000);
  EXPECT_EQ(c.cluster.heartbeat_interval_ms, 1000);
  EXPECT_EQ(c.cluster.heartbeat_timeout_ms, 10000);
  EXPECT_EQ(c.cluster.op_timeout_ms, 600000);
  EXPECT_EQ(c.transport.max_message_bytes, 1LL << 30);
  EXPECT_EQ(c.transport.resend_timeout_ms, 2000);
  EXPECT_EQ(c.transport.link_timeout_ms, 5000);
  EXPECT_EQ(c.transport.test_drop_percent, 0.0);
  EXPECT_EQ(c.transport.test_delay_ms, 0);
  EXPECT_EQ(c.diagnostics.log_level, 0);
  EXPECT_EQ(c.diagnostics.log_verbosity, 0);
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(c.transport.schedulers[0].ZmqEndpoint(), "tcp://127.0.0.1:9000");
  EXPECT_FALSE(c.Summary().empty());
}

TEST(ConfigTest, ExplicitValuesAreRead) {
  Config c = Read(With(BaseEnv(), {{"FERRY_PARTITION_BYTES", "1048576"},
                                   {"FERRY_SCHEDULING_CREDIT", "8"},
                                   {"FERRY_SCHEDULING_CREDIT_BYTES", "16777216"},
                                   {"FERRY_SERVER_ENGINE_THREADS", "12"},
                                   {"FERRY_CONNECT_TIMEOUT_MS", "5000"},
                                   {"FERRY_HEARTBEAT_INTERVAL_MS", "200"},
                                   {"FERRY_HEARTBEAT_TIMEOUT_MS", "400"},
                                   {"FERRY_OP_TIMEOUT_MS", "30000"},
                                   {"FERRY_MAX_MESSAGE_BYTES", "2097152"},
                                   {"FERRY_NODE_KIND", "cpu"},
                                   {"DMLC_PORT", "9100"},
                                   {"FERRY_BIND_ADDR", "*"}}));
  EXPECT_EQ(c.scheduling.partition_bytes, 1048576);
  EXPECT_EQ(c.scheduling.credit, 8);
  EXPECT_EQ(c.scheduling.credit_bytes, 16777216);
  EXPECT_EQ(c.server.engine_threads, 12);
  EXPECT_EQ(c.cluster.connect_timeout_ms, 5000);
  EXPECT_EQ(c.cluster.heartbeat_interval_ms, 200);
  EXPECT_EQ(c.cluster.heartbeat_timeout_ms, 400);
  EXPECT_EQ(c.cluster.op_timeout_ms, 30000);
  EXPECT_EQ(c.transport.max_message_bytes, 2097152);
  EXPECT_EQ(c.cluster.node_kind, "cpu");
  EXPECT_EQ(c.transport.node_port, 9100);
  EXPECT_EQ(c.transport.bind_host, "*");
  EXPECT_TRUE(c.warnings.empty());
}

TEST(ConfigTest, CompressionIsReadAndValidated) {
  Config c = Read(BaseEnv());
  EXPECT_TRUE(c.compression.spec.none());
  EXPECT_EQ(c.compression.min_bytes, 65536);
  c = Read(With(
      BaseEnv(), {{"FERRY_COMPRESSION", "TopK:0.010+ef"}, {"FERRY_COMPRESSION_MIN_BYTES", "0"}}));
  EXPECT_EQ(c.compression.spec.ToString(), "topk:0.01+ef");
  EXPECT_EQ(c.compression.min_bytes, 0);
  for (const char* bad : {"zip", "dither:200", "randomk:0", "onebit+momentum:1.5"}) {
    try {
      Read(With(BaseEnv(), {{"FERRY_COMPRESSION", bad}}));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const FerryError& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
      EXPECT_NE(std::string(e.what()).find("FERRY_COMPRESSION"), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigTest, RoleParsing) {
  EXPECT_EQ(Read(With(BaseEnv(), {{"DMLC_ROLE", "worker"}})).role, NodeRole::kWorker);
  EXPECT_EQ(Read(With(BaseEnv(), {{"DMLC_ROLE", "server"}})).role, NodeRole::kServer);
  Config s = Read(With(BaseEnv(), {{"DMLC_ROLE", "scheduler"}}));
  EXPECT_EQ(s.role, NodeRole::kScheduler);
  // The scheduler is the root: it advertises and listens on the root address.
  EXPECT_EQ(s.transport.node_host, "127.0.0.1");
  EXPECT_EQ(s.transport.node_port, 9000);

  std::string msg = ExpectInvalid(With(BaseEnv(), {{"DMLC_ROLE", "master"}}), "DMLC_ROLE");
  EXPECT_TRUE(StrContains(msg, "master")) << msg;
  ExpectInvalid(With(BaseEnv(), {{"DMLC_ROLE", "Worker"}}), "DMLC_ROLE");
  ExpectInvalid(With(BaseEnv(), {{"DMLC_ROLE", ""}}), "DMLC_ROLE");
  ExpectInvalid(Without(BaseEnv(), "DMLC_ROLE"), "DMLC_ROLE");

  EXPECT_STREQ(NodeRoleName(NodeRole::kScheduler), "scheduler");
  EXPECT_STREQ(NodeRoleName(NodeRole::kServer), "server");
  EXPECT_STREQ(NodeRoleName(NodeRole::kWorker), "worker");
}

TEST(ConfigTest, FixedRole) {
  const NodeRole server = NodeRole::kServer;
  // A program that is one role needs no DMLC_ROLE...
  Config c = Config::FromEnvironment(MapEnvironment(Without(BaseEnv(), "DMLC_ROLE")), &server);
  EXPECT_EQ(c.role, NodeRole::kServer);
  // ... accepts an agreeing one ...
  c = Config::FromEnvironment(MapEnvironment(With(BaseEnv(), {{"DMLC_ROLE", "server"}})), &server);
  EXPECT_EQ(c.role, NodeRole::kServer);
  // ... and refuses a contradicting one.
  ExpectInvalid(With(BaseEnv(), {{"DMLC_ROLE", "worker"}}), "DMLC_ROLE", &server);
}

TEST(ConfigTest, RequiredVariablesMissing) {
  for (const char* name : {"DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI",
                           "DMLC_PS_ROOT_PORT"}) {
    SCOPED_TRACE(name);
    std::string msg = ExpectInvalid(Without(BaseEnv(), name), name);
    EXPECT_TRUE(StrContains(msg, "must be set")) << msg;
  }
}

TEST(ConfigTest, IntegersRejectGarbage) {
  struct Case {
    const char* name;
    const char* value;
  };
  const Case cases[] = {
      {"DMLC_NUM_WORKER", "abc"},
      {"DMLC_NUM_WORKER", "4x"},
      {"DMLC_NUM_WORKER", " 4"},
      {"DMLC_NUM_WORKER", "4 "},
      {"DMLC_NUM_WORKER", ""},
      {"DMLC_NUM_WORKER", "2.0"},
      {"DMLC_NUM_WORKER", "0x10"},
      {"DMLC_NUM_SERVER", "one"},
      {"DMLC_PS_ROOT_PORT", "port"},
      {"FERRY_PARTITION_BYTES", "4MB"},
      {"FERRY_SCHEDULING_CREDIT", "2.5"},
      {"FERRY_SERVER_ENGINE_THREADS", "four"},
      {"FERRY_HEARTBEAT_INTERVAL_MS", "1s"},
      {"FERRY_CONNECT_TIMEOUT_MS", "--5"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + "='" + c.value + "'");
    std::string msg = ExpectInvalid(With(BaseEnv(), {{c.name, c.value}}), c.name);
    // The message quotes the value and says what is allowed.
    EXPECT_TRUE(StrContains(msg, std::string("'") + c.value + "'")) << msg;
    EXPECT_TRUE(StrContains(msg, "expected an integer")) << msg;
  }
}

TEST(ConfigTest, IntegersRejectNegativeAndOutOfRange) {
  struct Case {
    const char* name;
    const char* value;
  };
  const Case cases[] = {
      {"DMLC_NUM_WORKER", "-1"},
      {"DMLC_NUM_WORKER", "0"},
      {"DMLC_NUM_WORKER", "65536"},
      {"DMLC_NUM_WORKER", "99999999999999999999999"},  // overflows int64
      {"DMLC_NUM_SERVER", "0"},
      {"DMLC_PS_ROOT_PORT", "0"},
      {"DMLC_PS_ROOT_PORT", "65536"},
      {"DMLC_PS_ROOT_PORT", "-9000"},
      {"DMLC_PORT", "-1"},
      {"DMLC_PORT", "70000"},
      {"FERRY_PARTITION_BYTES", "-4194304"},
      {"FERRY_PARTITION_BYTES", "1023"},
      {"FERRY_PARTITION_BYTES", "1073741825"},
      {"FERRY_SCHEDULING_CREDIT", "0"},
      {"FERRY_SCHEDULING_CREDIT", "-4"},
      {"FERRY_SCHEDULING_CREDIT_BYTES", "-1"},
      {"FERRY_SERVER_ENGINE_THREADS", "0"},
      {"FERRY_SERVER_ENGINE_THREADS", "257"},
      {"FERRY_CONNECT_TIMEOUT_MS", "99"},
      {"FERRY_HEARTBEAT_INTERVAL_MS", "9"},
      {"FERRY_HEARTBEAT_TIMEOUT_MS", "49"},
      {"FERRY_OP_TIMEOUT_MS", "-1"},
      {"FERRY_MAX_MESSAGE_BYTES", "65535"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + "='" + c.value + "'");
    std::string msg = ExpectInvalid(With(BaseEnv(), {{c.name, c.value}}), c.name);
    EXPECT_TRUE(StrContains(msg, "expected an integer from")) << msg;
  }
  // The bounds themselves are accepted.
  Config c = Read(With(BaseEnv(), {{"DMLC_NUM_WORKER", "65535"},
                                   {"DMLC_PS_ROOT_PORT", "65535"},
                                   {"FERRY_PARTITION_BYTES", "1024"},
                                   {"FERRY_SCHEDULING_CREDIT", "1"},
                                   {"FERRY_SERVER_ENGINE_THREADS", "256"}}));
  EXPECT_EQ(c.cluster.num_workers, 65535);
  EXPECT_EQ(c.transport.root_port, 65535);
  EXPECT_EQ(c.scheduling.partition_bytes, 1024);
  EXPECT_EQ(c.scheduling.credit, 1);
  EXPECT_EQ(c.server.engine_threads, 256);
}

TEST(ConfigTest, BytepsAliasesGiveTheSameValues) {
  Config ferry = Read(With(BaseEnv(), {{"FERRY_PARTITION_BYTES", "1048576"},
                                       {"FERRY_SCHEDULING_CREDIT", "7"},
                                       {"FERRY_SERVER_ENGINE_THREADS", "3"},
                                       {"FERRY_LOG_LEVEL", "WARNING"}}));
  Config byteps = Read(With(BaseEnv(), {{"BYTEPS_PARTITION_BYTES", "1048576"},
                                        {"BYTEPS_SCHEDULING_CREDIT", "7"},
                                        {"BYTEPS_SERVER_ENGINE_THREAD", "3"},
                                        {"BYTEPS_LOG_LEVEL", "WARNING"}}));
  EXPECT_EQ(byteps.scheduling.partition_bytes, 1048576);
  EXPECT_EQ(byteps.scheduling.credit, 7);
  EXPECT_EQ(byteps.server.engine_threads, 3);
  EXPECT_EQ(byteps.diagnostics.log_level, 1);
  EXPECT_EQ(ferry.scheduling.partition_bytes, byteps.scheduling.partition_bytes);
  EXPECT_EQ(ferry.scheduling.credit, byteps.scheduling.credit);
  EXPECT_EQ(ferry.server.engine_threads, byteps.server.engine_threads);
  EXPECT_EQ(ferry.diagnostics.log_level, byteps.diagnostics.log_level);
  EXPECT_EQ(ferry.diagnostics.log_verbosity, byteps.diagnostics.log_verbosity);
  EXPECT_TRUE(ferry.warnings.empty());
  EXPECT_TRUE(byteps.warnings.empty());

  // BYTEPS_LOG_LEVEL=DEBUG means what FERRY_LOG_LEVEL=DEBUG means.
  Config debug = Read(With(BaseEnv(), {{"BYTEPS_LOG_LEVEL", "DEBUG"}}));
  EXPECT_EQ(debug.diagnostics.log_level, 0);
  EXPECT_EQ(debug.diagnostics.log_verbosity, 1);
}

TEST(ConfigTest, BadAliasValueNamesTheAlias) {
  std::string msg =
      ExpectInvalid(With(BaseEnv(), {{"BYTEPS_PARTITION_BYTES", "lots"}}), "BYTEPS_PARTITION_BYTES");
  EXPECT_FALSE(StrContains(msg, "FERRY_PARTITION_BYTES")) << msg;
  ExpectInvalid(With(BaseEnv(), {{"BYTEPS_SCHEDULING_CREDIT", "0"}}), "BYTEPS_SCHEDULING_CREDIT");
  ExpectInvalid(With(BaseEnv(), {{"BYTEPS_SERVER_ENGINE_THREAD", "-2"}}),
                "BYTEPS_SERVER_ENGINE_THREAD");
  ExpectInvalid(With(BaseEnv(), {{"BYTEPS_LOG_LEVEL", "LOUD"}}), "BYTEPS_LOG_LEVEL");
}

TEST(ConfigTest, FerryValueWinsOverAliasWithWarning) {
  struct Case {
    const char* ferry;
    const char* ferry_value;
    const char* alias;
    const char* alias_value;
  };
  const Case cases[] = {
      {"FERRY_PARTITION_BYTES", "2097152", "BYTEPS_PARTITION_BYTES", "8388608"},
      {"FERRY_SCHEDULING_CREDIT", "2", "BYTEPS_SCHEDULING_CREDIT", "16"},
      {"FERRY_SERVER_ENGINE_THREADS", "6", "BYTEPS_SERVER_ENGINE_THREAD", "1"},
      {"FERRY_LOG_LEVEL", "ERROR", "BYTEPS_LOG_LEVEL", "INFO"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.ferry);
    Config c = Read(With(BaseEnv(), {{k.ferry, k.ferry_value}, {k.alias, k.alias_value}}));
    ASSERT_EQ(c.warnings.size(), 1u);
    EXPECT_TRUE(StrContains(c.warnings[0], k.ferry)) << c.warnings[0];
    EXPECT_TRUE(StrContains(c.warnings[0], k.alias)) << c.warnings[0];
  }
  Config c = Read(With(BaseEnv(), {{"FERRY_PARTITION_BYTES", "2097152"},
                                   {"BYTEPS_PARTITION_BYTES", "8388608"},
                                   {"FERRY_SCHEDULING_CREDIT", "2"},
                                   {"BYTEPS_SCHEDULING_CREDIT", "16"},
                                   {"FERRY_SERVER_ENGINE_THREADS", "6"},
                                   {"BYTEPS_SERVER_ENGINE_THREAD", "1"},
                                   {"FERRY_LOG_LEVEL", "ERROR"},
                                   {"BYTEPS_LOG_LEVEL", "INFO"}}));
  EXPECT_EQ(c.scheduling.partition_bytes, 2097152);
  EXPECT_EQ(c.scheduling.credit, 2);
  EXPECT_EQ(c.server.engine_threads, 6);
  EXPECT_EQ(c.diagnostics.log_level, 2);
  EXPECT_EQ(c.warnings.size(), 4u);

  // A valid FERRY_* value wins even over a malformed alias (the alias is not parsed).
  Config d = Read(With(BaseEnv(), {{"FERRY_SCHEDULING_CREDIT", "3"},
                                   {"BYTEPS_SCHEDULING_CREDIT", "junk"}}));
  EXPECT_EQ(d.scheduling.credit, 3);
  ASSERT_EQ(d.warnings.size(), 1u);
  EXPECT_TRUE(StrContains(d.warnings[0], "BYTEPS_SCHEDULING_CREDIT"));
}

TEST(ConfigTest, AsyncIsReadWithItsAlias) {
  for (const char* value : {"1", "true", "yes", "on", "TRUE"}) {
    SCOPED_TRACE(value);
    EXPECT_TRUE(Read(With(BaseEnv(), {{"FERRY_ENABLE_ASYNC", value}})).server.async);
  }
  EXPECT_TRUE(Read(With(BaseEnv(), {{"BYTEPS_ENABLE_ASYNC", "1"}})).server.async);
  ExpectInvalid(With(BaseEnv(), {{"FERRY_ENABLE_ASYNC", "maybe"}}), "FERRY_ENABLE_ASYNC");
  for (const char* value : {"0", "false", "no", "off", ""}) {
    SCOPED_TRACE(value);
    EXPECT_FALSE(Read(With(BaseEnv(), {{"FERRY_ENABLE_ASYNC", value}})).server.async);
  }
}

TEST(ConfigTest, ServerEngineSettings) {
  Config c = Read(With(BaseEnv(), {{"FERRY_DETERMINISTIC", "1"},
                                   {"FERRY_SERVER_SPLIT_BYTES", "65536"}}));
  EXPECT_TRUE(c.server.deterministic);
  EXPECT_EQ(c.server.split_bytes, 65536);
  EXPECT_TRUE(StrContains(c.Summary(), "deterministic")) << c.Summary();
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_SERVER_SPLIT_BYTES", "0"}})).server.split_bytes, 0);
  ExpectInvalid(With(BaseEnv(), {{"FERRY_SERVER_SPLIT_BYTES", "-1"}}), "FERRY_SERVER_SPLIT_BYTES");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_SERVER_SPLIT_BYTES", "1M"}}), "FERRY_SERVER_SPLIT_BYTES");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_DETERMINISTIC", "sometimes"}}), "FERRY_DETERMINISTIC");
  // Async mode has no rounds to order.
  std::string msg = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_DETERMINISTIC", "1"}, {"BYTEPS_ENABLE_ASYNC", "1"}}),
      "FERRY_DETERMINISTIC");
  EXPECT_TRUE(StrContains(msg, "FERRY_ENABLE_ASYNC")) << msg;
}

// FERRY_BACKUP_WORKERS: 0..DMLC_NUM_WORKER-1 (BaseEnv has 2 workers); not with rank-order
// sums, asynchronous training or a local group.
TEST(ConfigTest, BackupWorkers) {
  EXPECT_EQ(Read(BaseEnv()).server.backup_workers, 0);
  Config c = Read(With(BaseEnv(), {{"FERRY_BACKUP_WORKERS", "1"}}));
  EXPECT_EQ(c.server.backup_workers, 1);
  EXPECT_TRUE(StrContains(c.Summary(), "backup_workers=1")) << c.Summary();
  ExpectInvalid(With(BaseEnv(), {{"FERRY_BACKUP_WORKERS", "2"}}), "FERRY_BACKUP_WORKERS");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_BACKUP_WORKERS", "-1"}}), "FERRY_BACKUP_WORKERS");
  std::string msg = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_BACKUP_WORKERS", "1"}, {"FERRY_DETERMINISTIC", "1"}}),
      "FERRY_BACKUP_WORKERS");
  EXPECT_TRUE(StrContains(msg, "FERRY_DETERMINISTIC")) << msg;
  msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_BACKUP_WORKERS", "1"}, {"FERRY_ENABLE_ASYNC", "1"}}),
                      "FERRY_BACKUP_WORKERS");
  EXPECT_TRUE(StrContains(msg, "FERRY_ENABLE_ASYNC")) << msg;
  msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_BACKUP_WORKERS", "1"}, {"FERRY_LOCAL_SIZE", "2"},
                                       {"FERRY_LOCAL_RANK", "0"}}),
                      "FERRY_BACKUP_WORKERS");
  EXPECT_TRUE(StrContains(msg, "FERRY_LOCAL_SIZE=2")) << msg;
}

// Uneven links: FERRY_PARTITION_PER_LINK needs partitions sized by time and no backup
// workers; FERRY_DECOMPOSE is off or per-layer, not with autotune, backup workers or async;
// FERRY_REPARTITION_THRESHOLD is 0.01..10.
TEST(ConfigTest, UnevenLinks) {
  Config c = Read(With(BaseEnv(), {{"FERRY_PARTITION_PER_LINK", "1"},
                                   {"FERRY_DECOMPOSE", "per-layer"},
                                   {"FERRY_REPARTITION_THRESHOLD", "0.5"}}));
  EXPECT_TRUE(c.scheduling.partition_per_link);
  EXPECT_TRUE(c.scheduling.decompose_per_layer);
  EXPECT_DOUBLE_EQ(c.scheduling.repartition_threshold, 0.5);
  EXPECT_FALSE(Read(With(BaseEnv(), {{"FERRY_PARTITION_PER_LINK", "0"}})).scheduling.partition_per_link);
  EXPECT_FALSE(Read(BaseEnv()).scheduling.decompose_per_layer);
  EXPECT_FALSE(Read(BaseEnv()).scheduling.partition_per_link);
  std::string msg = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_PARTITION_PER_LINK", "1"}, {"FERRY_PARTITION_MS", "0"}}),
      "FERRY_PARTITION_PER_LINK");
  EXPECT_TRUE(StrContains(msg, "FERRY_PARTITION_MS > 0")) << msg;
  msg = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_PARTITION_PER_LINK", "1"}, {"FERRY_PARTITION_BYTES", "65536"}}),
      "FERRY_PARTITION_PER_LINK");
  msg = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_PARTITION_PER_LINK", "1"}, {"FERRY_BACKUP_WORKERS", "1"}}),
      "FERRY_PARTITION_PER_LINK");
  EXPECT_TRUE(StrContains(msg, "FERRY_BACKUP_WORKERS=1")) << msg;
  // Unset, it stands aside for backup workers.
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_BACKUP_WORKERS", "1"}})).server.backup_workers, 1);
  ExpectInvalid(With(BaseEnv(), {{"FERRY_DECOMPOSE", "always"}}), "FERRY_DECOMPOSE");
  msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_DECOMPOSE", "per-layer"}, {"FERRY_AUTOTUNE", "1"}}),
                      "FERRY_DECOMPOSE");
  EXPECT_TRUE(StrContains(msg, "FERRY_AUTOTUNE")) << msg;
  msg = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_DECOMPOSE", "per-layer"}, {"FERRY_BACKUP_WORKERS", "1"}}),
      "FERRY_DECOMPOSE");
  EXPECT_TRUE(StrContains(msg, "FERRY_BACKUP_WORKERS=1")) << msg;
  msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_DECOMPOSE", "per-layer"}, {"FERRY_ENABLE_ASYNC", "1"}}),
                      "FERRY_DECOMPOSE");
  EXPECT_TRUE(StrContains(msg, "FERRY_ENABLE_ASYNC")) << msg;
  ExpectInvalid(With(BaseEnv(), {{"FERRY_REPARTITION_THRESHOLD", "0"}}),
                "FERRY_REPARTITION_THRESHOLD");
  // Pieces are 32 KiB x 2^k, capped by the frame size: a cap off that ladder would not nest.
  msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_DECOMPOSE", "per-layer"}, {"FERRY_FRAME_BYTES", "49152"}}),
                      "FERRY_FRAME_BYTES");
  EXPECT_TRUE(StrContains(msg, "32768 x 2^k")) << msg;
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_PARTITION_PER_LINK", "1"}, {"FERRY_FRAME_BYTES", "262144"}}))
                .transport.frame_bytes,
            262144);
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_DECOMPOSE", "per-layer"}, {"FERRY_FRAME_BYTES", "12288"}}))
                .transport.frame_bytes,
            12288);
}

TEST(ConfigTest, HostNamesResolve) {
  Config c = Read(With(BaseEnv(), {{"DMLC_PS_ROOT_URI", "localhost"},
                                   {"DMLC_NODE_HOST", "localhost"},
                                   {"FERRY_BIND_ADDR", "localhost"}}));
  EXPECT_EQ(c.transport.root_uri, "localhost");
  EXPECT_EQ(c.transport.root_host, "127.0.0.1");
  EXPECT_EQ(c.transport.node_host, "127.0.0.1");
  EXPECT_EQ(c.transport.bind_host, "127.0.0.1");
  EXPECT_EQ(c.transport.schedulers[0].ZmqEndpoint(), "tcp://127.0.0.1:9000");

  EXPECT_EQ(ResolveHost("X", "10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(ResolveHost("X", "localhost"), "127.0.0.1");
  ExpectInvalid(With(BaseEnv(), {{"DMLC_PS_ROOT_URI", ""}}), "DMLC_PS_ROOT_URI");
  try {
    ResolveHost("MY_VARIABLE", "");
    ADD_FAILURE() << "ResolveHost accepted an empty host";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_TRUE(StrContains(e.what(), "MY_VARIABLE")) << e.what();
  }
}

TEST(ConfigTest, WorkerIdRange) {
  EXPECT_EQ(Read(BaseEnv()).cluster.worker_id, -1);
  EXPECT_EQ(Read(With(BaseEnv(), {{"DMLC_WORKER_ID", "0"}})).cluster.worker_id, 0);
  EXPECT_EQ(Read(With(BaseEnv(), {{"DMLC_WORKER_ID", "1"}})).cluster.worker_id, 1);
  // Two workers: ranks 0 and 1 only.
  ExpectInvalid(With(BaseEnv(), {{"DMLC_WORKER_ID", "2"}}), "DMLC_WORKER_ID");
  ExpectInvalid(With(BaseEnv(), {{"DMLC_WORKER_ID", "-1"}}), "DMLC_WORKER_ID");
  ExpectInvalid(With(BaseEnv(), {{"DMLC_WORKER_ID", "first"}}), "DMLC_WORKER_ID");
  // The range follows DMLC_NUM_WORKER.
  EXPECT_EQ(
      Read(With(BaseEnv(), {{"DMLC_NUM_WORKER", "8"}, {"DMLC_WORKER_ID", "7"}})).cluster.worker_id,
      7);
}

TEST(ConfigTest, SchedulerTimeoutIsAtLeastTheHeartbeatTimeout) {
  EXPECT_EQ(Read(BaseEnv()).cluster.scheduler_timeout_ms, 60000);
  std::string msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_SCHEDULER_TIMEOUT_MS", "9999"}}),
                                  "FERRY_SCHEDULER_TIMEOUT_MS");
  EXPECT_TRUE(StrContains(msg, "FERRY_HEARTBEAT_TIMEOUT_MS (10000)")) << msg;
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_SCHEDULER_TIMEOUT_MS", "10000"}})).cluster.scheduler_timeout_ms,
            10000);
  // Unset, it follows a heartbeat timeout longer than its 60 s.
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_HEARTBEAT_TIMEOUT_MS", "90000"}})).cluster.scheduler_timeout_ms,
            90000);
}

TEST(ConfigTest, SchedulersListTheRootFirstAndAStandbyFindsItself) {
  const Config one = Read(BaseEnv());
  ASSERT_EQ(one.transport.schedulers.size(), 1u);
  EXPECT_EQ(one.transport.schedulers[0].ZmqEndpoint(), "tcp://127.0.0.1:9000");
  const Env two = With(BaseEnv(), {{"FERRY_SCHEDULERS", "127.0.0.1:9000,127.0.0.1:9100"}});
  const Config worker = Read(two);
  ASSERT_EQ(worker.transport.schedulers.size(), 2u);
  EXPECT_EQ(worker.transport.schedulers[1].port, 9100);
  EXPECT_EQ(worker.transport.scheduler_index, 0);
  // The first entry must be the root, named in the error.
  std::string msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_SCHEDULERS", "127.0.0.1:9100,127.0.0.1:9000"}}),
                                  "FERRY_SCHEDULERS");
  EXPECT_TRUE(StrContains(msg, "127.0.0.1:9100")) << msg;
  EXPECT_TRUE(StrContains(msg, "DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT (127.0.0.1:9000)")) << msg;
  ExpectInvalid(With(BaseEnv(), {{"FERRY_SCHEDULERS", "127.0.0.1:9000,127.0.0.1"}}), "FERRY_SCHEDULERS");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_SCHEDULERS", "127.0.0.1:9000,127.0.0.1:0"}}), "FERRY_SCHEDULERS");
  // A standby scheduler: its DMLC_PORT picks its entry, and it listens there.
  const Config standby = Read(With(two, {{"DMLC_ROLE", "scheduler"}, {"DMLC_PORT", "9100"}}));
  EXPECT_EQ(standby.transport.scheduler_index, 1);
  EXPECT_EQ(standby.transport.node_port, 9100);
  EXPECT_EQ(Read(With(two, {{"DMLC_ROLE", "scheduler"}})).transport.node_port, 9000);
  msg = ExpectInvalid(With(two, {{"DMLC_ROLE", "scheduler"}, {"DMLC_PORT", "9200"}}), "DMLC_PORT");
  EXPECT_TRUE(StrContains(msg, "is not one of FERRY_SCHEDULERS")) << msg;
}

TEST(ConfigTest, HeartbeatTimeoutMustBeTwiceTheInterval) {
  std::string msg = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_HEARTBEAT_INTERVAL_MS", "1000"}, {"FERRY_HEARTBEAT_TIMEOUT_MS", "1999"}}),
      "FERRY_HEARTBEAT_TIMEOUT_MS");
  EXPECT_TRUE(StrContains(msg, "FERRY_HEARTBEAT_INTERVAL_MS")) << msg;
  // The default timeout (10000) is too short for an interval of 6 s.
  ExpectInvalid(With(BaseEnv(), {{"FERRY_HEARTBEAT_INTERVAL_MS", "6000"}}),
                "FERRY_HEARTBEAT_TIMEOUT_MS");
  Config c = Read(
      With(BaseEnv(), {{"FERRY_HEARTBEAT_INTERVAL_MS", "1000"}, {"FERRY_HEARTBEAT_TIMEOUT_MS", "2000"}}));
  EXPECT_EQ(c.cluster.heartbeat_interval_ms, 1000);
  EXPECT_EQ(c.cluster.heartbeat_timeout_ms, 2000);
}

TEST(ConfigTest, LogLevels) {
  struct Case {
    const char* value;
    int level;
    int verbosity;
  };
  const Case cases[] = {
      {"TRACE", 0, 2}, {"DEBUG", 0, 1}, {"debug", 0, 1}, {"INFO", 0, 0},   {"", 0, 0},
      {"WARNING", 1, 0}, {"warn", 1, 0}, {"ERROR", 2, 0}, {"FATAL", 2, 0},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.value);
    Config c = Read(With(BaseEnv(), {{"FERRY_LOG_LEVEL", k.value}}));
    EXPECT_EQ(c.diagnostics.log_level, k.level);
    EXPECT_EQ(c.diagnostics.log_verbosity, k.verbosity);
  }
  std::string msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_LOG_LEVEL", "VERBOSE"}}), "FERRY_LOG_LEVEL");
  EXPECT_TRUE(StrContains(msg, "VERBOSE")) << msg;
}

TEST(ConfigTest, NodeKind) {
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_NODE_KIND", "colocated"}})).cluster.node_kind,
            "colocated");
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_NODE_KIND", "cpu"}})).cluster.node_kind, "cpu");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_NODE_KIND", "gpu"}}), "FERRY_NODE_KIND");
}

TEST(ConfigTest, MaxMessageBytesMustExceedPartition) {
  ExpectInvalid(With(BaseEnv(), {{"FERRY_PARTITION_BYTES", "1048576"},
                                 {"FERRY_MAX_MESSAGE_BYTES", "1048576"}}),
                "FERRY_MAX_MESSAGE_BYTES");
  Config c = Read(With(BaseEnv(), {{"FERRY_PARTITION_BYTES", "1048576"},
                                   {"FERRY_MAX_MESSAGE_BYTES", "1052672"}}));  // + 4096
  EXPECT_EQ(c.transport.max_message_bytes, 1052672);
}

TEST(ConfigTest, ResendLinkAndFaultInjection) {
  Config c = Read(With(BaseEnv(), {{"FERRY_RESEND_TIMEOUT_MS", "250"},
                                   {"FERRY_LINK_TIMEOUT_MS", "0"},
                                   {"FERRY_TEST_DROP_PERCENT", "0.5"},
                                   {"FERRY_TEST_DELAY_MS", "20"}}));
  EXPECT_EQ(c.transport.resend_timeout_ms, 250);
  EXPECT_EQ(c.transport.link_timeout_ms, 0);
  EXPECT_DOUBLE_EQ(c.transport.test_drop_percent, 0.5);
  EXPECT_EQ(c.transport.test_delay_ms, 20);
  ASSERT_EQ(c.warnings.size(), 1u) << "fault injection is announced";
  EXPECT_TRUE(StrContains(c.warnings[0], "for tests only")) << c.warnings[0];
  // ps-lite's name for the resend timeout is accepted.
  EXPECT_EQ(Read(With(BaseEnv(), {{"PS_RESEND_TIMEOUT", "700"}})).transport.resend_timeout_ms, 700);
  ExpectInvalid(With(BaseEnv(), {{"FERRY_LINK_TIMEOUT_MS", "299"}}), "FERRY_LINK_TIMEOUT_MS");
  for (const char* bad : {"-1", "101", "1%", "nan", "inf", " 1"}) {
    SCOPED_TRACE(bad);
    ExpectInvalid(With(BaseEnv(), {{"FERRY_TEST_DROP_PERCENT", bad}}), "FERRY_TEST_DROP_PERCENT");
  }
  std::string msg = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_TEST_DROP_PERCENT", "1"}, {"FERRY_RESEND_TIMEOUT_MS", "0"}}),
      "FERRY_TEST_DROP_PERCENT");
  EXPECT_TRUE(StrContains(msg, "FERRY_RESEND_TIMEOUT_MS")) << msg;
}

TEST(ConfigTest, SharedMemoryLane) {
  const Config defaults = Read(BaseEnv());
  EXPECT_TRUE(defaults.transport.shm) << "on by default";
  EXPECT_EQ(defaults.transport.shm_bytes, 512LL << 20);
  const Config off = Read(With(BaseEnv(), {{"FERRY_SHM", "0"}, {"FERRY_SHM_BYTES", "4194304"}}));
  EXPECT_FALSE(off.transport.shm);
  EXPECT_EQ(off.transport.shm_bytes, 4194304);
  EXPECT_TRUE(StrContains(off.Summary(), "shm=off")) << off.Summary();
  ExpectInvalid(With(BaseEnv(), {{"FERRY_SHM", "sometimes"}}), "FERRY_SHM");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_SHM_BYTES", "4194303"}}), "FERRY_SHM_BYTES");
}

TEST(ConfigTest, ServerDevice) {
  Config c = Read(BaseEnv());
  EXPECT_EQ(c.server.device, ServerDevice::kCpu);
  EXPECT_EQ(c.server.gpu, 0);
  EXPECT_EQ(c.server.gpu_streams, 2);
  EXPECT_FALSE(StrContains(c.Summary(), "device="));
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_SERVER_DEVICE", "cpu"}})).server.device,
            ServerDevice::kCpu);
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_SERVER_DEVICE", ""}})).server.device, ServerDevice::kCpu);
  c = Read(With(BaseEnv(), {{"FERRY_SERVER_DEVICE", "gpu"}}));
  EXPECT_EQ(c.server.device, ServerDevice::kGpu);
  EXPECT_EQ(c.server.gpu, 0);
  c = Read(With(BaseEnv(), {{"FERRY_SERVER_DEVICE", "gpu:3"}, {"FERRY_SERVER_GPU_STREAMS", "8"}}));
  EXPECT_EQ(c.server.device, ServerDevice::kGpu);
  EXPECT_EQ(c.server.gpu, 3);
  EXPECT_EQ(c.server.gpu_streams, 8);
  EXPECT_TRUE(StrContains(c.Summary(), " device=gpu:3 gpu_streams=8")) << c.Summary();
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_SERVER_DEVICE", "gpu:255"}})).server.gpu, 255);
  for (const char* bad : {"GPU", "tpu", "gpu:", "gpu:-1", "gpu:256", "gpu:1x", "gpu:0000", "cuda"}) {
    SCOPED_TRACE(bad);
    std::string msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_SERVER_DEVICE", bad}}), "FERRY_SERVER_DEVICE");
    EXPECT_TRUE(StrContains(msg, "expected cpu, gpu or gpu:N")) << msg;
  }
  for (const char* bad : {"0", "65", "two"}) {
    SCOPED_TRACE(bad);
    ExpectInvalid(With(BaseEnv(), {{"FERRY_SERVER_GPU_STREAMS", bad}}), "FERRY_SERVER_GPU_STREAMS");
  }
}

TEST(ConfigTest, DeviceApi) {
  EXPECT_EQ(Read(BaseEnv()).device_api, DeviceApiKind::kCuda);
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_DEVICE_API", "cuda"}})).device_api, DeviceApiKind::kCuda);
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_DEVICE_API", "fake"}})).device_api, DeviceApiKind::kFake);
  EXPECT_EQ(Read(With(BaseEnv(), {{"FERRY_DEVICE_API", ""}})).device_api, DeviceApiKind::kCuda);
  for (const char* bad : {"CUDA", "gpu", "fake:0"}) {
    SCOPED_TRACE(bad);
    std::string msg = ExpectInvalid(With(BaseEnv(), {{"FERRY_DEVICE_API", bad}}), "FERRY_DEVICE_API");
    EXPECT_TRUE(StrContains(msg, "expected cuda, or fake")) << msg;
  }
}

TEST(ConfigTest, LocalGroupSettings) {
  Config c = Read(BaseEnv());
  EXPECT_EQ(c.local.size, 1);
  EXPECT_EQ(c.local.rank, 0);
  EXPECT_EQ(c.LocalSocketName(), "ferry-local-127.0.0.1:9000-wany");
  c = Read(With(BaseEnv(), {{"BYTEPS_LOCAL_SIZE", "4"}, {"BYTEPS_LOCAL_RANK", "3"},
                            {"DMLC_WORKER_ID", "1"}}));
  EXPECT_EQ(c.local.size, 4);
  EXPECT_EQ(c.local.rank, 3);
  EXPECT_EQ(c.LocalSocketName(), "ferry-local-127.0.0.1:9000-w1");
  c = Read(With(BaseEnv(), {{"FERRY_LOCAL_SIZE", "2"}, {"FERRY_LOCAL_RANK", "0"},
                            {"FERRY_LOCAL_SOCKET", "job-7.a:b_c"}}));
  EXPECT_EQ(c.LocalSocketName(), "job-7.a:b_c");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_LOCAL_SIZE", "2"}, {"FERRY_LOCAL_RANK", "2"}}),
                "FERRY_LOCAL_RANK");
  // Without a local rank every process would think it is the root.
  const std::string unset = ExpectInvalid(With(BaseEnv(), {{"FERRY_LOCAL_SIZE", "2"}}), "FERRY_LOCAL_RANK");
  EXPECT_TRUE(StrContains(unset, "ferry-launch --local-size sets it")) << unset;
  ExpectInvalid(With(BaseEnv(), {{"FERRY_LOCAL_SIZE", "0"}}), "FERRY_LOCAL_SIZE");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_LOCAL_SOCKET", "a/b"}}), "FERRY_LOCAL_SOCKET");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_LOCAL_SOCKET", std::string(101, 'x')}}),
                "FERRY_LOCAL_SOCKET");
  // 'gpus' is for ferry-launch: a worker needs the number, a server ignores it.
  ExpectInvalid(With(BaseEnv(), {{"FERRY_LOCAL_SIZE", "gpus"}}), "FERRY_LOCAL_SIZE");
  EXPECT_EQ(
      Read(With(BaseEnv(), {{"DMLC_ROLE", "server"}, {"FERRY_LOCAL_SIZE", "gpus"}})).local.size, 1);
  const std::string m = ExpectInvalid(
      With(BaseEnv(), {{"FERRY_LOCAL_SIZE", "2"}, {"FERRY_LOCAL_RANK", "1"}, {"FERRY_ENABLE_ASYNC", "1"}}),
      "FERRY_ENABLE_ASYNC");
  EXPECT_TRUE(StrContains(m, "FERRY_LOCAL_SIZE=2")) << m;
}

TEST(ConfigTest, ElasticSettings) {
  // Off by default: today's fail-fast behaviour.
  Config off = Read(BaseEnv());
  EXPECT_FALSE(off.cluster.elastic);
  EXPECT_FALSE(off.cluster.spare);
  EXPECT_EQ(off.cluster.min_workers, 1);
  EXPECT_EQ(off.cluster.max_workers, 2);  // DMLC_NUM_WORKER
  EXPECT_EQ(off.cluster.min_workers_timeout_ms, 600000);
  Config on = Read(With(BaseEnv(), {{"FERRY_ELASTIC", "1"},
                                    {"FERRY_MIN_WORKERS", "2"},
                                    {"FERRY_MAX_WORKERS", "8"},
                                    {"FERRY_MIN_WORKERS_TIMEOUT_MS", "5000"}}));
  EXPECT_TRUE(on.cluster.elastic);
  EXPECT_EQ(on.cluster.min_workers, 2);
  EXPECT_EQ(on.cluster.max_workers, 8);
  EXPECT_EQ(on.cluster.min_workers_timeout_ms, 5000);
  EXPECT_NE(on.Summary().find(" elastic"), std::string::npos) << on.Summary();
  const NodeRole server = NodeRole::kServer;
  Config spare = Config::FromEnvironment(
      MapEnvironment(With(BaseEnv(), {{"DMLC_ROLE", "server"}, {"FERRY_ELASTIC", "1"},
                                      {"FERRY_SPARE", "1"}})),
      &server);
  EXPECT_TRUE(spare.cluster.spare);
  // The minimum cannot exceed the starting count, the maximum not undercut it.
  ExpectInvalid(With(BaseEnv(), {{"FERRY_MIN_WORKERS", "3"}}), "FERRY_MIN_WORKERS");
  ExpectInvalid(With(BaseEnv(), {{"FERRY_MAX_WORKERS", "1"}}), "FERRY_MAX_WORKERS");
  // A spare needs an elastic job and a server.
  EXPECT_NE(ExpectInvalid(With(BaseEnv(), {{"DMLC_ROLE", "server"}, {"FERRY_SPARE", "1"}}),
                          "FERRY_SPARE")
                .find("FERRY_ELASTIC=1"),
            std::string::npos);
  EXPECT_NE(ExpectInvalid(With(BaseEnv(), {{"FERRY_ELASTIC", "1"}, {"FERRY_SPARE", "1"}}),
                          "FERRY_SPARE")
                .find("only a server"),
            std::string::npos);
  // Not yet with asynchronous training or local groups: refused at start, saying why.
  EXPECT_NE(ExpectInvalid(With(BaseEnv(), {{"FERRY_ELASTIC", "1"}, {"FERRY_ENABLE_ASYNC", "1"}}),
                          "FERRY_ELASTIC")
                .find("asynchronous"),
            std::string::npos);
  EXPECT_NE(ExpectInvalid(With(BaseEnv(), {{"FERRY_ELASTIC", "1"},
                                           {"FERRY_LOCAL_SIZE", "2"},
                                           {"FERRY_LOCAL_RANK", "0"}}),
                          "FERRY_ELASTIC")
                .find("local groups"),
            std::string::npos);
}

}  // namespace
}  // namespace ferry
