// Integration tests of the workers' scheduling (worker/partition_scheduling/): real
// scheduler, servers and workers on loopback.
//   - ferry-train-sim replays a tiny workload under every policy and checks every sum;
//     under `credit` it also writes the FERRY_TRACE_DIR timeline, checked here;
//   - under `credit`, with a credit smaller than one iteration and gradients ready in
//     the reverse of their priority, the servers receive partitions in priority order
//     (seen in the servers' own log of arrivals), and under `fifo` in ready order;
//   - a worker changes the partition size mid-run (SetScheduling) and back: sums exact;
//   - FERRY_AUTOTUNE: every worker picks the same candidate, sums exact.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/support/json.h"
#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

using Env = std::map<std::string, std::string>;

int CountOccurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) n++;
  return n;
}

// `num_servers` servers and `num_workers` workers running `program` with `args`; `common`
// for every role, then the servers' and the workers' own.
ClusterSpec Spec(int num_servers, int num_workers, const std::string& program,
                 const std::vector<std::string>& args, const Env& common,
                 const Env& server_env = {}, const Env& worker_env = {}) {
  ClusterSpec spec;
  spec.servers = num_servers;
  spec.workers = num_workers;
  spec.worker_program = program;
  spec.worker_args = args;
  spec.env = common;
  spec.server_env = server_env;
  spec.worker_env = worker_env;
  return spec;
}

// A tiny workload: layers of 4 bytes to 300 KB, in backprop order as the CSVs list them.
const std::vector<uint64_t> kLayerBytes = {4,     1024, 40000,  300000, 4,    65536,  8,  100000,
                                           20000, 12,   250000, 512,    4096, 131072, 36, 80000};

std::string WriteWorkload(const std::string& dir) {
  std::string path = dir + "/tiny_layers.csv";
  std::ofstream out(path);
  out << "# tiny: a test workload\nrow,name,params,bytes,ntensors,fwd_ms,bwd_ms\n";
  for (size_t i = 0; i < kLayerBytes.size(); ++i) {
    out << i + 1 << ",layer" << i << "," << kLayerBytes[i] / 4 << "," << kLayerBytes[i]
        << ",1,0.2,0.3\n";
  }
  return path;
}

uint64_t ElementsPerIteration() {
  uint64_t n = 0;
  for (uint64_t b : kLayerBytes) n += b / 4;
  return n;
}

Json ParseJson(const std::string& text, const std::string& what) {
  Json j;
  JsonParser p(text);
  EXPECT_TRUE(p.Parse(&j)) << what << ": invalid JSON near byte " << p.at();
  return j;
}

// The one-line JSON report ferry-train-sim --json prints.
Json TrainSimReport(const std::string& output) {
  std::smatch m;
  std::regex line(R"((\{"program":"ferry-train-sim".*\})\n)");
  if (!std::regex_search(output, m, line)) {
    ADD_FAILURE() << "no report in\n" << output;
    return Json();
  }
  return ParseJson(m[1], "ferry-train-sim report");
}

constexpr int kWarmup = 1, kIterations = 4;
constexpr uint64_t kPartition = 65536;

std::vector<std::string> TrainSimArgs(const std::string& workload, int iterations, int warmup) {
  return {"--workload=" + workload, "--iterations=" + std::to_string(iterations),
          "--warmup=" + std::to_string(warmup), "--check", "--json"};
}

void ExpectExactReports(const TestCluster& c, int iterations) {
  for (int w : c.workers()) {
    Json r = TrainSimReport(c.Output(w));
    EXPECT_EQ(r["wrong_values"].number, 0) << c.Output(w);
    EXPECT_EQ(r["checked_values"].number, static_cast<double>(ElementsPerIteration() * iterations))
        << c.Output(w);
  }
}

// Checks a worker's timeline: valid JSON; every partition of every layer of every
// iteration is one slice with its stages; a mark per iteration boundary.
void CheckTrace(const std::string& path) {
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "no trace at " << path;
  std::stringstream text;
  text << in.rdbuf();
  Json j = ParseJson(text.str(), path);
  std::map<std::string, int> count;  // "ph name" for the stages, "partition" for slices
  std::map<double, int> open;        // async id -> b minus e
  int fused = 0, steps = 0;
  std::vector<double> urgent_queue_us;  // layer 0's time in the queue, the most urgent
  std::map<double, double> queue_start;
  for (const Json& e : j["traceEvents"].items) {
    const std::string& ph = e["ph"].str;
    if (ph == "i" && e["name"].str.rfind("step ", 0) == 0) steps++;
    if (e["cat"].str != "partition") continue;
    const std::string& name = e["name"].str;
    open[e["id"].number] += ph == "b" ? 1 : -1;
    if (name.rfind("train_sim/", 0) == 0) {
      if (ph == "b") count["partition"]++;
      if (ph == "b" && e["args"]["fused"].b) fused++;
      if (ph == "b" && name.rfind("train_sim/0/", 0) == 0) queue_start[e["id"].number] = -1;
    } else {
      count[ph + " " + name]++;
      if (name == "queue" && queue_start.count(e["id"].number)) {
        double& start = queue_start[e["id"].number];
        if (ph == "b") start = e["ts"].number;
        if (ph == "e") urgent_queue_us.push_back(e["ts"].number - start);
      }
    }
  }
  uint64_t partitions = 0;
  for (uint64_t b : kLayerBytes) partitions += (b + kPartition - 1) / kPartition;
  const int expected = static_cast<int>(partitions) * (kWarmup + kIterations);
  EXPECT_EQ(count["partition"], expected);
  for (const char* stage : {"queue", "push", "return"}) {
    EXPECT_EQ(count[std::string("b ") + stage], expected) << stage;
    EXPECT_EQ(count[std::string("e ") + stage], expected) << stage;
  }
  for (const auto& [id, balance] : open) EXPECT_EQ(balance, 0) << "unbalanced slice " << id;
  // Not asserted: whether any partition went fused. Partitions leave from the thread that let
  // them out (dense_push_pull.h, "Who sends"), so small ones are fused only when they wait
  // together for credit, which here depends on how fast acks come back; the fused flag is
  // checked in trace_test, and fusion of waiting partitions in SchedulingOrderTest.
  EXPECT_EQ(steps, kWarmup + kIterations + 1);  // a boundary after every forward pass
  double worst = 0;
  for (double us : urgent_queue_us) worst = std::max(worst, us);
  std::printf(
      "%s: %d partitions, %d fused; the most urgent layer waited at most %.0f us in "
      "the queue\n",
      path.c_str(), count["partition"], fused, worst);
}

class TrainSimPolicyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainSimPolicyTest, TinyWorkloadSumsExactly) {
  const std::string policy = GetParam();
  TestCluster c;
  const std::string workload = WriteWorkload(c.dir());
  const std::string trace_dir = c.dir() + "/trace";
  ASSERT_EQ(mkdir(trace_dir.c_str(), 0755), 0);
  Env env = {
      {"FERRY_SCHEDULING_POLICY", policy}, {"FERRY_PARTITION_BYTES", std::to_string(kPartition)},
      {"FERRY_SCHEDULING_CREDIT", "2"},  // 128 KiB: far less than an iteration
      {"FERRY_FUSION_BYTES", "32768"},     {"FERRY_P3_SLICE_BYTES", "20000"},
      {"FERRY_BUCKET_BYTES", "200000"},    {"FERRY_BUCKET_TIMEOUT_MS", "2"}};
  if (policy == "credit") env["FERRY_TRACE_DIR"] = trace_dir;
  c.spec() = Spec(2, 2, "ferry-train-sim", TrainSimArgs(workload, kIterations, kWarmup), env);
  c.Start();
  ASSERT_TRUE(c.Succeeds(120000));
  ExpectExactReports(c, kWarmup + kIterations);
  for (int w : c.workers()) {
    std::string out = c.Output(w);
    EXPECT_NE(out.find("scheduling policy " + policy), std::string::npos) << out;
    if (policy == "usbyte" || policy == "prophet") {  // the profile was built and used
      EXPECT_NE(out.find("scheduling profile: predicting"), std::string::npos) << out;
    }
  }
  if (policy == "credit") {
    for (int rank = 0; rank < 2; ++rank) {
      CheckTrace(trace_dir + "/ferry-worker-" + std::to_string(rank) + ".json");
    }
  }
}

// usbyte and prophet (policies.h) when the compute changes mid-run: the profile drifts, the
// policy runs credit and profiles again, and every sum stays exact throughout.
class ProfiledDriftTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ProfiledDriftTest, AComputeChangeIsDriftTheProfileIsRebuiltAndSumsStayExact) {
  const std::string policy = GetParam();
  TestCluster c;
  const std::string workload = WriteWorkload(c.dir());
  Env env = {{"FERRY_SCHEDULING_POLICY", policy},
             {"FERRY_PARTITION_BYTES", std::to_string(kPartition)},
             {"FERRY_SCHEDULING_CREDIT", "2"},
             {"FERRY_LOG_LEVEL", "INFO"}};
  // Profiled at iterations 2-3, predicting from 4; from 6 on every compute takes 10x:
  // strikes at the boundaries after 6 and 7, profiled again over 8-9, predicting from 10.
  constexpr int kWarm = 1, kTimed = 12;
  std::vector<std::string> args = TrainSimArgs(workload, kTimed, kWarm);
  args.push_back("--change_at=6");
  args.push_back("--change_compute_scale=10");
  c.spec() = Spec(2, 2, "ferry-train-sim", args, env);
  c.Start();
  ASSERT_TRUE(c.Succeeds(120000));
  ExpectExactReports(c, kWarm + kTimed);
  for (int w : c.workers()) {
    const std::string out = c.Output(w);
    // Which strike ends a profile can be noise on iterations this short (two in a row 5%
    // slower); what must hold: a drift, and a last profile with the 10x backward span.
    EXPECT_NE(out.find("scheduling profile: drift ("), std::string::npos) << out;
    std::vector<double> spans;  // "predicting: N priorities in B bursts over X ms"
    const std::regex built("scheduling profile: predicting: .* over ([0-9.]+) ms");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), built);
         it != std::sregex_iterator(); ++it) {
      spans.push_back(std::stod((*it)[1].str()));
    }
    ASSERT_GE(spans.size(), 2u) << "the profile was not rebuilt after the change\n" << out;
    // 10x the compute; only 2x asked: a loaded machine stretches the short first profile
    // (a clean-clone CI run under load saw 9.8 ms then 45.0 ms, 4.6x), while a profile not
    // rebuilt stays near 1x.
    EXPECT_GT(spans.back(), 2 * spans.front()) << out;
  }
}

INSTANTIATE_TEST_SUITE_P(Profiled, ProfiledDriftTest, ::testing::Values("usbyte", "prophet"));

INSTANTIATE_TEST_SUITE_P(EveryPolicy, TrainSimPolicyTest,
                         ::testing::Values("fifo", "priority", "credit", "p3", "fifo-bucket",
                                           "usbyte", "prophet"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// Pushes as each server logged their arrival (TRACE level): server -> (worker node,
// round) -> tensor ids in arrival order.
using Arrivals = std::map<std::pair<int, int>, std::vector<int>>;

Arrivals ParseArrivals(const std::string& server_output) {
  Arrivals a;
  std::regex line(
      R"(arrived PUSH from node (\d+) request \d+ tensor (\d+) partition \d+ round (\d+) )"
      R"(\d+ bytes priority (-?\d+))");
  for (std::sregex_iterator it(server_output.begin(), server_output.end(), line), end; it != end;
       ++it) {
    int node = std::stoi((*it)[1]), tensor = std::stoi((*it)[2]), round = std::stoi((*it)[3]);
    EXPECT_EQ(std::stoi((*it)[4]), -tensor) << "priority is -(declaration index)";
    a[{node, round}].push_back(tensor);
  }
  return a;
}

constexpr int kSmall = 23, kRounds = 2;

// Runs --mode=order; returns each server's arrivals, and in `fused_messages` (if given)
// the PUSH_FUSED messages the workers sent, summed.
std::vector<Arrivals> RunOrder(const std::string& policy, uint64_t* fused_messages = nullptr) {
  TestCluster c;
  Env common = {{"FERRY_SCHEDULING_POLICY", policy}, {"FERRY_PARTITION_BYTES", "1048576"}};
  // Servers log every arrival. Workers: a 64 KiB credit (one iteration is 1.2 MiB),
  // 16 KiB fused messages, and every reply held 300 ms, so the blocker's credit comes
  // back long after the other gradients are ready.
  Env server_env = {{"FERRY_LOG_LEVEL", "TRACE"}};
  Env worker_env = {{"FERRY_SCHEDULING_CREDIT_BYTES", "65536"},
                    {"FERRY_FUSION_BYTES", "16384"},
                    {"FERRY_TEST_DELAY_MS", "300"}};
  c.spec() = Spec(2, 2, "ferry-test-worker",
                  {"--mode=order", "--tensors=" + std::to_string(kSmall),
                   "--rounds=" + std::to_string(kRounds)},
                  common, server_env, worker_env);
  c.Start();
  const ::testing::AssertionResult ok = c.Succeeds(120000);
  EXPECT_TRUE(ok);
  if (!ok) return {};
  std::vector<Arrivals> out;
  for (int s : c.servers()) out.push_back(ParseArrivals(c.Output(s)));
  for (size_t s = 0; s < out.size(); ++s) {  // for the record: worker node 3, round 1
    std::string seq;
    for (int t : out[s][{3, 1}]) seq += " " + std::to_string(t);
    std::printf("%s: server process %zu received from worker node 3 in round 1:%s\n",
                policy.c_str(), s, seq.c_str());
  }
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("OK order rounds=2"), std::string::npos) << c.Output(w);
    std::smatch m;
    const std::string out = c.Output(w);
    if (fused_messages && std::regex_search(out, m, std::regex(R"(fused_messages=(\d+))"))) {
      *fused_messages += std::stoull(m[1]);
    }
  }
  // Every push of every worker and round arrived exactly once, at some server.
  for (int node : {3, 4}) {
    for (int round = 0; round < kRounds; ++round) {
      std::vector<int> all;
      for (const Arrivals& a : out) {
        auto it = a.find({node, round});
        if (it != a.end()) all.insert(all.end(), it->second.begin(), it->second.end());
      }
      std::sort(all.begin(), all.end());
      std::vector<int> want(kSmall + 1);
      for (int t = 0; t <= kSmall; ++t) want[t] = t;
      EXPECT_EQ(all, want) << "worker node " << node << " round " << round;
    }
  }
  return out;
}

TEST(SchedulingOrderTest, CreditDeliversInPriorityOrderAtTheServers) {
  uint64_t fused = 0;
  std::vector<Arrivals> servers = RunOrder("credit", &fused);
  // The small tensors that waited behind the blocker's credit left together, so several to
  // one server went as one PUSH_FUSED (FERRY_FUSION_BYTES 16 KiB: two 8 KiB tensors each).
  EXPECT_GT(fused, 0u) << "no fused message although small tensors waited for credit";
  size_t longest = 0;
  for (const Arrivals& a : servers) {
    for (const auto& [who, tensors] : a) {
      // The blocker (tensor kSmall, least urgent, ready first) went alone; everything
      // after it arrived most urgent first, though it became ready least urgent first.
      std::vector<int> rest;
      for (size_t i = 0; i < tensors.size(); ++i) {
        if (tensors[i] == kSmall) {
          EXPECT_EQ(i, 0u) << "the blocker went first";
        } else {
          rest.push_back(tensors[i]);
        }
      }
      EXPECT_TRUE(std::is_sorted(rest.begin(), rest.end()))
          << "node " << who.first << " round " << who.second << ": not in priority order";
      longest = std::max(longest, rest.size());
    }
  }
  EXPECT_GE(longest, 8u) << "too few partitions per server to show an order";
}

TEST(SchedulingOrderTest, FifoDeliversInReadyOrderAtTheServers) {
  std::vector<Arrivals> servers = RunOrder("fifo");
  for (const Arrivals& a : servers) {
    for (const auto& [who, tensors] : a) {
      EXPECT_TRUE(std::is_sorted(tensors.rbegin(), tensors.rend()))
          << "node " << who.first << " round " << who.second << ": not in ready order";
    }
  }
}

TEST(SchedulingTest, PartitionSizeChangesMidRunAndSumsStayExact) {
  TestCluster c;
  // 16 KiB partitions, then 8 KiB (a new layout), 64 KiB (another), 8 KiB again (the
  // first new layout's keys, rounds carried on).
  c.spec() = Spec(2, 2, "ferry-test-worker",
                  {"--mode=sums", "--tensors=12", "--max_bytes=262144", "--rounds=8",
                   "--repartition=2:8192,4:65536,6:8192"},
                  {{"FERRY_PARTITION_BYTES", "16384"}});
  c.Start();
  ASSERT_TRUE(c.Succeeds(120000));
  for (int w : c.workers()) {
    std::string out = c.Output(w);
    EXPECT_NE(out.find("OK rounds=8"), std::string::npos) << out;
    EXPECT_NE(out.find("round 2: partition 8192 bytes"), std::string::npos) << out;
    EXPECT_NE(out.find("partition 8192 bytes, credit 32768 bytes; layout 1"), std::string::npos)
        << out;
    EXPECT_NE(out.find("partition 65536 bytes, credit 262144 bytes; layout 2"), std::string::npos)
        << out;
    // Back to 8 KiB: layout 1 again, not a third new one.
    EXPECT_EQ(out.find("layout 3"), std::string::npos) << out;
  }
}

// Runs ferry-train-sim (2 workers, 2 servers, 10 iterations) with autotune over
// `candidates` (as Describe() logs them), 2 iterations each, decided at the 9th boundary of
// 11: four from the first boundary, or three from the sizing boundary (the third). Every
// worker tried each, chose the same one, and every sum was exact.
void ExpectAutotuneAgrees(std::map<std::string, std::string> env,
                          const std::vector<std::string>& candidates) {
  ASSERT_TRUE(candidates.size() == 4u || candidates.size() == 3u);
  TestCluster c;
  const std::string workload = WriteWorkload(c.dir());
  env["FERRY_AUTOTUNE"] = "1";
  env["FERRY_AUTOTUNE_STEPS"] = "2";
  c.spec() = Spec(2, 2, "ferry-train-sim", TrainSimArgs(workload, 10, 0), env);
  c.Start();
  ASSERT_TRUE(c.Succeeds(120000));
  ExpectExactReports(c, 10);
  std::vector<std::string> chosen;
  const std::regex line("autotune: chose (.+) \\(candidate (\\d) of " +
                        std::to_string(candidates.size()) + "\\) after 9 iterations");
  for (int w : c.workers()) {
    const std::string out = c.Output(w);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, line)) << out;
    chosen.push_back(m[1]);
    EXPECT_EQ(m[1], candidates[std::stoi(m[2])]) << out;
    // Every candidate was tried: four switches, each logged.
    EXPECT_EQ(CountOccurrences(out, "scheduling (autotune candidate"),
              static_cast<int>(candidates.size()))
        << out;
    if (candidates.size() == 3) {  // centred on the timed size, which was not applied alone
      EXPECT_NE(out.find("autotune: searching 3 candidates around " + candidates[1]),
                std::string::npos)
          << out;
      EXPECT_EQ(CountOccurrences(out, "scheduling (FERRY_PARTITION_MS"), 0) << out;
    }
    for (const std::string& candidate : candidates) {
      EXPECT_NE(out.find("): " + candidate + "; layout"), std::string::npos) << candidate << "\n" << out;
    }
  }
  EXPECT_EQ(chosen[0], chosen[1]) << "the workers chose differently";
}

TEST(SchedulingTest, AutotuneAgreesOnEveryWorkerAndSumsStayExact) {
  ExpectAutotuneAgrees({{"FERRY_AUTOTUNE_PARTITION_BYTES", "16384,65536"},
                        {"FERRY_AUTOTUNE_CREDITS", "1,4"}},
                       {"partition 16384 bytes, credit 16384 bytes",
                        "partition 16384 bytes, credit 65536 bytes",
                        "partition 65536 bytes, credit 65536 bytes",
                        "partition 65536 bytes, credit 262144 bytes"});
}

TEST(SchedulingTest, AutotuneSearchesWindowGainsAndFrameSizes) {
  ExpectAutotuneAgrees({{"FERRY_WINDOW", "bdp"},
                        {"FERRY_AUTOTUNE_PARTITION_BYTES", "65536"},
                        {"FERRY_AUTOTUNE_WINDOW_GAINS", "1,4"},
                        {"FERRY_AUTOTUNE_FRAME_BYTES", "0,16384"}},
                       {"partition 65536 bytes, window gain 1",
                        "partition 65536 bytes, window gain 1, frames 16384 bytes",
                        "partition 65536 bytes, window gain 4",
                        "partition 65536 bytes, window gain 4, frames 16384 bytes"});
}

// With partitions sized by the link the search is centred on the time-sized partition
// (0.001 ms: the 128 KiB floor), found at the third boundary and not applied by itself.
TEST(SchedulingTest, AutotuneCentresOnThePartitionSizedByTheLink) {
  ExpectAutotuneAgrees({{"FERRY_PARTITION_MS", "0.001"}, {"FERRY_AUTOTUNE_CREDITS", "4"}},
                       {"partition 32768 bytes, credit 131072 bytes",
                        "partition 131072 bytes, credit 524288 bytes",
                        "partition 524288 bytes, credit 2097152 bytes"});
}

// FERRY_PARTITION_MS: at the third boundary every worker switches to the partition size that
// the workers' mean measured rate sends in that time, the same on every worker, and the sums
// stay exact across the switch. 0.001 ms is less than any link's 128 KiB (the floor); a
// minute is more than its 1 MiB (the configured size, the ceiling): the partitions stay.
TEST(SchedulingTest, PartitionsSizedByTheLinkAgreeAndSumsStayExact) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0.001", "): partition 131072 bytes, credit 524288 bytes; layout 1"},
      {"60000", "): partitions stay 1048576 bytes"}};
  for (const auto& [ms, expected] : cases) {
    SCOPED_TRACE("FERRY_PARTITION_MS=" + ms);
    TestCluster c;
    const std::string workload = WriteWorkload(c.dir());
    c.spec() = Spec(2, 2, "ferry-train-sim", TrainSimArgs(workload, 6, 0),
                    {{"FERRY_PARTITION_MS", ms}, {"FERRY_PARTITION_BYTES", "1048576"}});
    c.Start();
    ASSERT_TRUE(c.Succeeds(120000));
    ExpectExactReports(c, 6);
    for (int w : c.workers()) {
      const std::string out = c.Output(w);
      EXPECT_EQ(CountOccurrences(out, "scheduling (FERRY_PARTITION_MS: "), 1) << out;
      EXPECT_NE(out.find(expected), std::string::npos) << out;
    }
  }
}

}  // namespace
}  // namespace ferry::testing
