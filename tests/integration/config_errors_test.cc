// Every program refuses a bad environment with exit code 2 and a message that names
// the variable, its value and what is allowed.

#include <gtest/gtest.h>

#include <ostream>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

struct BadEnv {
  const char* program;
  std::map<std::string, std::string> env;  // applied over a valid environment; "" = unset
  const char* expected;
};

// Test names and failure messages show the program and the variables, not raw bytes.
void PrintTo(const BadEnv& p, std::ostream* os) {
  *os << p.program;
  for (const auto& [k, v] : p.env) *os << " " << k << "='" << v << "'";
}

class ConfigErrorsTest : public ::testing::TestWithParam<BadEnv> {};

TEST_P(ConfigErrorsTest, ExitsTwoNamingTheVariable) {
  const BadEnv& p = GetParam();
  std::string role = std::string(p.program) == "ferry-scheduler" ? "scheduler"
                     : std::string(p.program) == "ferry-server"  ? "server"
                                                                 : "worker";
  ClusterSpec spec;
  spec.env["FERRY_CONNECT_TIMEOUT_MS"] = "500";
  TestCluster g(spec);
  Env env;
  std::vector<std::string> unset;
  for (const auto& [k, v] : p.env) {
    if (v.empty()) {
      unset.push_back(k);
    } else {
      env[k] = v;
    }
  }
  int c = g.Spawn("program", p.program, {}, role, env, unset);
  ChildResult r = g.group().Wait(c, 10000);
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 2) << g.Output(c);
  EXPECT_NE(g.Output(c).find(p.expected), std::string::npos) << g.Output(c);
}

INSTANTIATE_TEST_SUITE_P(
    Programs, ConfigErrorsTest,
    ::testing::Values(
        BadEnv{"ferry-server", {{"DMLC_NUM_WORKER", ""}}, "DMLC_NUM_WORKER='': must be set"},
        BadEnv{"ferry-server", {{"DMLC_NUM_WORKER", "two"}},
               "DMLC_NUM_WORKER='two': expected an integer from 1 to 65535"},
        BadEnv{"ferry-scheduler", {{"DMLC_NUM_SERVER", "0"}}, "DMLC_NUM_SERVER='0'"},
        BadEnv{"ferry-scheduler", {{"DMLC_PS_ROOT_PORT", "70000"}}, "DMLC_PS_ROOT_PORT='70000'"},
        BadEnv{"ferry-server", {{"DMLC_PS_ROOT_URI", "no-such-host.invalid"}},
               "DMLC_PS_ROOT_URI='no-such-host.invalid': cannot resolve host name"},
        BadEnv{"ferry-server", {{"DMLC_ROLE", "worker"}}, "DMLC_ROLE='worker': this program is the server"},
        BadEnv{"ferry-perf", {{"DMLC_ROLE", "boss"}}, "DMLC_ROLE='boss': expected scheduler, server or worker"},
        BadEnv{"ferry-perf", {{"DMLC_WORKER_ID", "1"}}, "DMLC_WORKER_ID='1': expected an integer from 0 to 0"},
        BadEnv{"ferry-perf", {{"FERRY_PARTITION_BYTES", "12abc"}}, "FERRY_PARTITION_BYTES='12abc'"},
        BadEnv{"ferry-perf", {{"BYTEPS_PARTITION_BYTES", "-5"}}, "BYTEPS_PARTITION_BYTES='-5'"},
        BadEnv{"ferry-server", {{"FERRY_SERVER_ENGINE_THREADS", "0"}}, "FERRY_SERVER_ENGINE_THREADS='0'"},
        BadEnv{"ferry-server", {{"BYTEPS_ENABLE_ASYNC", "maybe"}}, "BYTEPS_ENABLE_ASYNC='maybe': expected 0 or 1"},
        BadEnv{"ferry-server", {{"FERRY_NODE_KIND", "gpu"}}, "FERRY_NODE_KIND='gpu': expected colocated or cpu"},
        BadEnv{"ferry-perf", {{"FERRY_LOG_LEVEL", "LOUD"}}, "FERRY_LOG_LEVEL='LOUD'"},
        BadEnv{"ferry-perf", {{"FERRY_HEARTBEAT_INTERVAL_MS", "1000"}, {"FERRY_HEARTBEAT_TIMEOUT_MS", "1500"}},
               "FERRY_HEARTBEAT_TIMEOUT_MS='1500': must be at least twice"},
        BadEnv{"ferry-server", {{"FERRY_RESEND_TIMEOUT_MS", "-1"}}, "FERRY_RESEND_TIMEOUT_MS='-1'"},
        BadEnv{"ferry-server", {{"FERRY_LINK_TIMEOUT_MS", "100"}},
               "FERRY_LINK_TIMEOUT_MS='100': must be 0 (off) or at least 300"},
        BadEnv{"ferry-perf", {{"FERRY_TEST_DROP_PERCENT", "150"}},
               "FERRY_TEST_DROP_PERCENT='150': expected a number from 0 to 100"},
        BadEnv{"ferry-perf", {{"FERRY_TEST_DROP_PERCENT", "1"}, {"FERRY_RESEND_TIMEOUT_MS", "0"}},
               "dropping messages needs resends"},
        BadEnv{"ferry-server", {{"FERRY_TEST_DELAY_MS", "soon"}}, "FERRY_TEST_DELAY_MS='soon'"},
        BadEnv{"ferry-server", {{"FERRY_COMPRESSION", "zip"}},
               "FERRY_COMPRESSION='zip': compression 'zip': unknown compressor 'zip'"},
        BadEnv{"ferry-scheduler", {{"FERRY_COMPRESSION", "topk:2"}},
               "FERRY_COMPRESSION='topk:2': compression 'topk:2': topk needs a ratio in (0, 1]"},
        BadEnv{"ferry-perf", {{"FERRY_COMPRESSION", "onebit+ef+ef"}}, "FERRY_COMPRESSION='onebit+ef+ef'"},
        BadEnv{"ferry-server", {{"FERRY_COMPRESSION", "onebit"}, {"FERRY_ENABLE_ASYNC", "1"}},
               "FERRY_COMPRESSION='onebit': asynchronous training"},
        BadEnv{"ferry-perf", {{"FERRY_COMPRESSION_MIN_BYTES", "-1"}},
               "FERRY_COMPRESSION_MIN_BYTES='-1'"},
        BadEnv{"ferry-perf", {{"FERRY_DECOMPOSE", "per-tensor"}},
               "FERRY_DECOMPOSE='per-tensor': expected off or per-layer"},
        BadEnv{"ferry-server", {{"FERRY_PARTITION_PER_LINK", "1"}, {"FERRY_PARTITION_MS", "0"}},
               "FERRY_PARTITION_PER_LINK='1'"},
        BadEnv{"ferry-perf", {{"FERRY_REPARTITION_THRESHOLD", "20"}},
               "FERRY_REPARTITION_THRESHOLD='20'"}));

// --help shows a program's own flags, not glog's and gflags' (--helpfull lists those too),
// and the role programs, which take no flags, say where their settings are.
TEST(ProgramHelpTest, ShowsTheProgramsFlagsOnly) {
  TestCluster g(ClusterSpec{});
  int perf = g.Spawn("perf", "ferry-perf", {"--help"}, "worker");
  int full = g.Spawn("perf-full", "ferry-perf", {"--helpfull"}, "worker");
  int scheduler = g.Spawn("scheduler-help", "ferry-scheduler", {"--help"}, "scheduler");
  for (int c : {perf, full, scheduler}) {
    ChildResult r = g.group().Wait(c, 10000);
    ASSERT_TRUE(r.exited) << g.Output(c);
    if (c != full) {  // gflags' own --helpfull exits 1
      EXPECT_EQ(r.exit_code, 0) << g.Output(c);
    }
  }
  EXPECT_NE(g.Output(perf).find("-dtype (float32"), std::string::npos) << g.Output(perf);
  EXPECT_NE(g.Output(perf).find("--helpfull"), std::string::npos) << g.Output(perf);
  EXPECT_EQ(g.Output(perf).find("logtostderr"), std::string::npos) << g.Output(perf);
  EXPECT_EQ(g.Output(perf).find("flagfile"), std::string::npos) << g.Output(perf);
  EXPECT_NE(g.Output(full).find("logtostderr"), std::string::npos) << g.Output(full);
  EXPECT_NE(g.Output(full).find("-dtype"), std::string::npos) << g.Output(full);
  EXPECT_NE(g.Output(scheduler).find("docs/configuration.md"), std::string::npos)
      << g.Output(scheduler);
}

}  // namespace
}  // namespace ferry::testing
