// ferry-sim's whole job (sim/cluster_sim.h): a closed-form case, the bounds, every policy,
// determinism, the knobs and the command line.

#include "sim/cluster_sim.h"

#include <gtest/gtest.h>

#include "common/compress/codec.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "common/config/scheduling_policy.h"
#include "common/util/error.h"
#include "sim/cli.h"
#include "sim/knobs.h"

namespace ferry::sim {
namespace {

const std::string kSource = FERRY_SOURCE_DIR;
const std::string kWorkloads = kSource + "/bench/workloads";

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  std::string list = kSchedulingPolicyNames;  // "fifo, priority, ... or mercury"
  std::regex word("[a-z0-9-]+");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), word); it != std::sregex_iterator();
       ++it) {
    if (it->str() != "or") names.push_back(it->str());
  }
  return names;
}

// One worker and one server on two hosts, one 1 MiB tensor with no compute, a 1 Gbit/s
// link with 50 us of latency, messages of 20 us and 100-byte headers, no TCP overhead.
SimOptions OneLink() {
  SimOptions o;
  o.workload = PushPullWorkload(1 << 20);
  o.cluster.workers = 1;
  o.cluster.servers = 1;
  o.cluster.rate_bits_per_s = 1e9;
  o.cluster.latency_us = 50;
  o.model.tcp_efficiency = 1;
  o.model.message_us = 20;
  o.model.header_bytes = 100;
  return o;
}

TEST(ClusterSimTest, OnePushPullOverOneLinkEqualsItsClosedForm) {
  // One worker, one server on another host, one tensor with no compute: an iteration is
  // the push (bytes + header over the link, then latency and the message cost), then on
  // the server's connection back the acknowledgement (a header) and the sum (bytes +
  // header), then latency and message cost again. Nothing else: one worker's push is the
  // round (adopted, no summation).
  SimOptions o = OneLink();
  o.env["FERRY_PARTITION_MS"] = "0";
  o.env["FERRY_PARTITION_BYTES"] = "4194304";  // one partition
  for (NetworkModel model : {NetworkModel::kFair, NetworkModel::kQueued}) {
    o.model.network = model;
    SimResult r = Simulate(o);
    const double rate = 125.0;  // bytes per us
    const double push = ((1 << 20) + 100) / rate + 50 + 20;
    const double back = (100 + (1 << 20) + 100) / rate + 50 + 20;
    ASSERT_EQ(r.iteration_ms.size(), 10u);
    for (double ms : r.iteration_ms) EXPECT_NEAR(ms, (push + back) / 1000, 1e-9);
    EXPECT_EQ(r.rounds, 12u);  // 2 warm-up + 10 timed iterations, one round each
  }
}

TEST(ClusterSimTest, WorkerZerosPartitionsAreRecordedWithTheirTimes) {
  // The closed-form case above, recorded (ferry-sim --parts-out): one record per
  // iteration, its sum back exactly one iteration after it was ready, the
  // acknowledgement (a header behind the push) between.
  CliOptions cli = ParseCommandLine(
      {"--workload", "pushpull:1M", "--workers", "1", "--servers", "1", "--latency-us", "50",
       "--message-us", "20", "--tcp-efficiency", "1", "--env", "FERRY_PARTITION_MS=0", "--env",
       "FERRY_PARTITION_BYTES=4194304", "--parts-out", "/dev/null"},
      kWorkloads);
  ASSERT_TRUE(cli.sim.record_parts);
  EXPECT_EQ(cli.parts_out, "/dev/null");
  cli.sim.model.header_bytes = 100;
  const SimResult r = Simulate(cli.sim);
  const double rate = 125.0;  // bytes per us
  const double push = ((1 << 20) + 100) / rate + 50 + 20;
  const double ack = 100 / rate + 50 + 20;
  const double back = (100 + (1 << 20) + 100) / rate + 50 + 20;
  ASSERT_EQ(r.parts.size(), 12u);  // 2 warm-up + 10 timed iterations, one partition each
  for (size_t i = 0; i < r.parts.size(); ++i) {
    const PartRecord& p = r.parts[i];
    EXPECT_EQ(p.iteration, static_cast<int>(i));
    EXPECT_EQ(p.server, 0);
    EXPECT_EQ(p.bytes, 1u << 20);
    EXPECT_EQ(p.sent_us, p.ready_us);  // no credit to wait for
    EXPECT_NEAR(p.acked_us - p.sent_us, push + ack, 1e-6);
    EXPECT_NEAR(p.result_us - p.ready_us, push + back, 1e-6);
  }
  const std::string json = FormatPartsJson(r);
  for (const char* field : {"\"parts\":[{", "\"ready_us\":", "\"sent_us\":", "\"acked_us\":",
                            "\"result_us\":", "\"server\":0"}) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
  }
  cli.sim.record_parts = false;
  EXPECT_TRUE(Simulate(cli.sim).parts.empty());
}

TEST(ClusterSimTest, NeverBelowTheBoundsAndCloseToThemWhereTheyBind) {
  for (const char* model : {"vgg16", "resnet50", "bert_base"}) {
    for (double compute : {0.1, 1.0, 4.0}) {
      SimOptions o;
      o.workload = ScaleWorkload(LoadWorkload(kWorkloads + "/" + std::string(model) + "_layers.csv"), compute,
                                 0.02);
      o.cluster.rate_bits_per_s = 1e9;
      o.iterations = 3;
      SimResult r = Simulate(o);
      EXPECT_GE(r.median_ms, r.lb1_ms * (1 - 1e-9)) << model << " x" << compute;
      EXPECT_LE(r.median_ms, r.lb1_ms * 1.25) << model << " x" << compute;
    }
  }
  // The unified architecture: a push_pull never beats T_opt, and comes close to it.
  for (int k : {0, 2, 4}) {
    SimOptions o;
    o.workload = PushPullWorkload(8 << 20);
    o.cluster.workers = 4;
    o.cluster.colocate = true;
    o.cluster.cpu_servers = k;
    o.iterations = 3;
    SimResult r = Simulate(o);
    EXPECT_GE(r.median_ms, r.t_opt_ms) << k;
    EXPECT_LE(r.median_ms, r.t_opt_ms * 1.3) << k;
    EXPECT_DOUBLE_EQ(r.lb1_ms, r.t_opt_ms) << "no compute: LB1 is T_opt";
  }
}

TEST(ClusterSimTest, EveryPolicyIsModelledAndFinishes) {
  const std::vector<std::string> names = PolicyNames();
  ASSERT_GE(names.size(), 6u);
  for (const std::string& name : names) {
    SchedulingPolicy policy;
    ASSERT_TRUE(ParseSchedulingPolicy(name, &policy)) << name;
    EXPECT_TRUE(PolicyModelled(policy)) << name;
    for (bool colocate : {false, true}) {
      SimOptions o;
      o.workload = ScaleWorkload(LoadWorkload(kWorkloads + "/resnet50_layers.csv"), 0.5, 0.05);
      o.cluster.workers = 3;
      o.cluster.colocate = colocate;
      o.cluster.cpu_servers = colocate ? 1 : 0;
      o.env["FERRY_SCHEDULING_POLICY"] = name;
      o.iterations = 3;
      SimResult r = Simulate(o);
      EXPECT_EQ(r.policy, name);
      EXPECT_EQ(r.iteration_ms.size(), 9u) << name;
      EXPECT_GE(r.median_ms, r.lb1_ms * (1 - 1e-9)) << name;
      EXPECT_LT(r.median_ms, r.lb1_ms * 3) << name;
    }
  }
}

TEST(ClusterSimTest, CompressionSendsTheCompressedBytesAndSpendsTheCodecsTime) {
  // The closed form above, compressed: the push and the sum carry onebit's bytes (1/32 and
  // a scale), and the time adds the worker's compression and the server's and the worker's
  // decompression (one worker's push is the round: the server still decodes it and
  // compresses the sum).
  SimOptions o = OneLink();
  o.model.network = NetworkModel::kFair;
  o.env["FERRY_PARTITION_MS"] = "0";
  o.env["FERRY_PARTITION_BYTES"] = "4194304";
  o.env["FERRY_COMPRESSION"] = "onebit+ef";
  CompressionSpec spec;
  ASSERT_TRUE(CompressionSpec::Parse("onebit+ef", &spec).ok());
  const CodecRates codec = CodecRatesOf(spec);
  const double raw = 1 << 20, wire = static_cast<double>(CompressedBytes(spec, raw / 4));
  const double rate = 125.0;
  const double push = raw / codec.compress + (wire + 100) / rate + 50 + 20;
  const double serve = raw / codec.decompress + raw / codec.compress;
  // The acknowledgement leaves while the server decodes: the sum waits for no header.
  const double back = (wire + 100) / rate + 50 + 20 + raw / codec.decompress;
  SimResult r = Simulate(o);
  for (double ms : r.iteration_ms) EXPECT_NEAR(ms, (push + serve + back) / 1000, 1e-6);
  // Under FERRY_COMPRESSION_MIN_BYTES the tensor travels raw: the plain closed form.
  o.env["FERRY_COMPRESSION_MIN_BYTES"] = std::to_string(2 << 20);
  r = Simulate(o);
  const double plain = ((raw + 100) / rate + 70 + (200 + raw) / rate + 70) / 1000;
  for (double ms : r.iteration_ms) EXPECT_NEAR(ms, plain, 1e-6);
}

TEST(ClusterSimTest, TheTransportKnobsAreModelled) {
  SimOptions base;
  base.workload = ScaleWorkload(LoadWorkload(kWorkloads + "/vgg16_layers.csv"), 0.5, 0.05);
  base.cluster.workers = 2;
  base.cluster.colocate = true;
  base.iterations = 3;
  const double plain = Simulate(base).median_ms;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"FERRY_FRAME_BYTES", "65536"},
                                                        {"FERRY_TRANSPORT_WATERMARK_BYTES", "131072"},
                                                        {"FERRY_CONTROL_LANE", "1"},
                                                        {"FERRY_SHM", "0"},
                                                        {"FERRY_SERVER_ENGINE_THREADS", "1"}}) {
    SimOptions o = base;
    o.env[name] = value;
    EXPECT_NE(Simulate(o).median_ms, plain) << name << " changed nothing";
  }
}

TEST(ClusterSimTest, TheSameSeedGivesTheSameRunAndAnotherSeedAnother) {
  SimOptions o;
  o.workload = ScaleWorkload(LoadWorkload(kWorkloads + "/bert_base_layers.csv"), 1, 0.05);
  o.cluster.workers = 4;
  o.cluster.colocate = true;
  o.model.compute_jitter = 0.05;
  o.iterations = 4;
  o.seed = 7;
  const SimResult a = Simulate(o);
  const SimResult b = Simulate(o);
  EXPECT_EQ(a.iteration_ms, b.iteration_ms);
  EXPECT_EQ(a.events, b.events);
  o.seed = 8;
  EXPECT_NE(Simulate(o).iteration_ms, a.iteration_ms);
}

TEST(ClusterSimTest, AnUnreadableClusterIsRefusedWithTheReason) {
  SimOptions o;
  o.workload = PushPullWorkload(4096);
  o.cluster.workers = 0;
  EXPECT_THROW(Simulate(o), FerryError);
  o.cluster.workers = 2;
  o.env["FERRY_ENABLE_ASYNC"] = "1";
  try {
    Simulate(o);
    FAIL();
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find("FERRY_ENABLE_ASYNC: ferry-sim cannot model it"),
              std::string::npos)
        << e.what();
  }
  o.env = {{"DMLC_NUM_WORKER", "3"}};
  EXPECT_THROW(Simulate(o), FerryError);
  o.env = {{"FERRY_PARTITION_BYTES", "-5"}};  // Config's own check
  EXPECT_THROW(Simulate(o), FerryError);
}

// Every FERRY_* variable docs/configuration.md documents has a decision in knobs.cc, and
// every knob there is documented: a new knob fails here until ferry-sim models it, or says
// why it need not or cannot.
TEST(KnobsTest, EveryDocumentedVariableIsDecided) {
  std::ifstream in(kSource + "/docs/configuration.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  std::regex row("\\n\\| `(FERRY_[A-Z0-9_]+)`");
  std::set<std::string> documented;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator();
       ++it) {
    documented.insert((*it)[1]);
  }
  ASSERT_GT(documented.size(), 40u);
  for (const std::string& name : documented) EXPECT_TRUE(FindKnob(name)) << name;
  for (const Knob& k : Knobs()) EXPECT_TRUE(documented.count(k.name)) << k.name << " not documented";
}

TEST(CliTest, RatesInTcSyntax) {
  EXPECT_DOUBLE_EQ(ParseRate("1gbit"), 1e9);
  EXPECT_DOUBLE_EQ(ParseRate("25Gbit"), 25e9);
  EXPECT_DOUBLE_EQ(ParseRate("100mbit"), 1e8);
  EXPECT_DOUBLE_EQ(ParseRate("2.5gbit"), 2.5e9);
  EXPECT_DOUBLE_EQ(ParseRate("125mbps"), 1e9);
  EXPECT_DOUBLE_EQ(ParseRate("1000000"), 1e6);
  for (const char* bad : {"", "fast", "1gbits", "-1gbit", "0gbit", "gbit"}) {
    EXPECT_THROW(ParseRate(bad), FerryError) << bad;
  }
}

TEST(CliTest, FlagsBecomeOptions) {
  CliOptions o = ParseCommandLine({"--workload", "vgg16", "--workers", "8", "--colocate",
                                   "--cpu-servers=2", "--rate", "10gbit", "--env",
                                   "FERRY_SCHEDULING_POLICY=p3", "--env", "FERRY_SHM=0",
                                   "--byte-scale", "0.5", "--format", "json"},
                                  kWorkloads);
  EXPECT_EQ(o.sim.cluster.workers, 8);
  EXPECT_TRUE(o.sim.cluster.colocate);
  EXPECT_EQ(o.sim.cluster.servers, 0);
  EXPECT_EQ(o.sim.cluster.cpu_servers, 2);
  EXPECT_DOUBLE_EQ(o.sim.cluster.rate_bits_per_s, 1e10);
  EXPECT_EQ(o.sim.env.at("FERRY_SCHEDULING_POLICY"), "p3");
  EXPECT_EQ(o.sim.env.at("FERRY_SHM"), "0");
  EXPECT_EQ(o.sim.workload.model, "vgg16");
  EXPECT_EQ(o.sim.workload.layers.size(), 16u);
  EXPECT_EQ(o.format, "json");
  EXPECT_EQ(ParseCommandLine({"--workload", "pushpull:4M"}, kWorkloads).sim.workload.layers[0].bytes,
            4u << 20);
  // The bounds are on the bytes, not on the number before the unit.
  EXPECT_EQ(ParseCommandLine({"--workload", "pushpull:1M"}, kWorkloads).sim.workload.layers[0].bytes,
            1u << 20);
  EXPECT_THROW(ParseCommandLine({"--workload", "pushpull:3"}, kWorkloads), FerryError);
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--workers"},
                                             {"--workers", "two"},
                                             {"--nonsense"},
                                             {"--env", "FERRY_SHM"},
                                             {"--colocate", "--servers", "3"},
                                             {"--format", "xml"},
                                             {"--workload", "nosuchmodel"}}) {
    EXPECT_THROW(ParseCommandLine(bad, kWorkloads), FerryError) << bad[0];
  }
}

TEST(CliTest, AWorkloadWithBadRowsIsRefusedWithItsLine) {
  const std::string path = testing::TempDir() + "bad_model_layers.csv";
  std::ofstream(path) << "# a comment\nrow,name,params,bytes,ntensors,fwd_ms,bwd_ms\n"
                      << "1,fc,1,4,1,0.1,0.2\n2,conv,1,4,1,0.1\n";
  try {
    ParseCommandLine({"--workload", path}, kWorkloads);
    FAIL() << "no error";
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_model_layers.csv:4: expected 7 fields, got 6"),
              std::string::npos)
        << e.what();
  }
}

TEST(CliTest, TheOutputCarriesTheFieldsUsersRead) {
  CliOptions o = ParseCommandLine({"--workload", "resnet50", "--byte-scale", "0.05",
                                   "--iterations", "2"},
                                  kWorkloads);
  SimResult r = Simulate(o.sim);
  const std::string json = FormatJson(o, r, 0.5);
  for (const char* field : {"\"iteration_ms\":", "\"p90_ms\":", "\"lb1_ms\":", "\"t_opt_ms\":",
                            "\"allreduce_ms\":", "\"hosts\":[{\"name\":\"worker 0\",\"up\":"}) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
  }
  EXPECT_NE(FormatText(o, r, 0.5).find("median"), std::string::npos);
}

}  // namespace
}  // namespace ferry::sim
