// ferry-sim --tune (sim/tune.h): the search's candidates, its ranking, that the best
// settings reproduce when simulated on their own, and the command line's output.

#include "sim/tune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "common/util/error.h"
#include "sim/cli.h"
#include "sim/tune_report.h"

namespace ferry::sim {
namespace {

const std::string kWorkloads = std::string(FERRY_SOURCE_DIR) + "/bench/workloads";

// VGG-16 on 4 hosts at 1 Gbit/s, halved compute and bytes: communication matters, so the
// candidates differ.
SimOptions Job() {
  SimOptions o;
  o.workload = ScaleWorkload(LoadWorkload(kWorkloads + "/vgg16_layers.csv"), 0.5, 0.5);
  o.cluster.workers = 4;
  o.cluster.colocate = true;
  o.cluster.servers = 0;
  o.warmup = 1;
  o.iterations = 3;
  return o;
}

TuneOptions Small() {
  TuneOptions t;
  t.policies = {"credit", "prophet", "p3", "fifo"};
  t.partition_bytes = {0, 262144};
  t.p3_slice_bytes = {65536};
  t.credits = {2, 8};
  t.seeds = 2;
  return t;
}

size_t GridSize(const std::string& policy, const TuneOptions& t) {
  const size_t sizes = policy == "p3" ? t.p3_slice_bytes.size() : t.partition_bytes.size();
  const bool credit = policy == "credit" || policy == "usbyte" || policy == "prophet";
  return sizes * (credit ? t.credits.size() : 1);
}

TEST(TuneTest, TriesEveryPolicyThenTheFinalistsGridsRankedFastestFirst) {
  const TuneOptions t = Small();
  const TuneResult r = Tune(Job(), t);
  ASSERT_FALSE(r.ranked.empty());
  for (size_t i = 1; i < r.ranked.size(); ++i) {
    EXPECT_LE(r.ranked[i - 1].median_ms, r.ranked[i].median_ms) << "not ranked at " << i;
  }
  // Stage 1: each policy alone; the two fastest of them are the finalists.
  std::vector<Candidate> stage1;
  std::set<std::map<std::string, std::string>> envs;
  for (const Candidate& c : r.ranked) {
    EXPECT_TRUE(envs.insert(c.env).second) << "a candidate ran twice: " << DescribeEnv(c.env);
    EXPECT_EQ(c.seed_medians_ms.size(), 2u);
    EXPECT_LE(c.min_ms, c.median_ms);
    EXPECT_LE(c.median_ms, c.max_ms);
    if (c.env.size() == 1) stage1.push_back(c);
  }
  ASSERT_EQ(stage1.size(), t.policies.size());
  const std::string first = stage1[0].env.at("FERRY_SCHEDULING_POLICY");
  const std::string second = stage1[1].env.at("FERRY_SCHEDULING_POLICY");
  // A non-credit policy's grid holds its stage-1 candidate (partition 0: unset) once.
  // Stage 3: the best with each compression.
  size_t expected = t.policies.size() + GridSize(first, t) + GridSize(second, t) +
                    t.compressions.size();
  for (const std::string& p : {first, second}) {
    if (p == "fifo") expected -= 1;
  }
  EXPECT_EQ(r.ranked.size(), expected) << first << ", " << second;
  EXPECT_EQ(r.simulations, static_cast<int>((expected + 1) * t.seeds));
  for (const Candidate& c : r.ranked) {
    const std::string policy = c.env.at("FERRY_SCHEDULING_POLICY");
    if (c.env.size() > 1) {
      EXPECT_TRUE(policy == first || policy == second) << DescribeEnv(c.env);
    }
    if (c.env.count("FERRY_COMPRESSION")) {  // the best of stages 1-2, compressed
      auto without = c.env;
      without.erase("FERRY_COMPRESSION");
      EXPECT_TRUE(envs.count(without)) << DescribeEnv(c.env);
    }
  }
}

TEST(TuneTest, TheBestSettingsReproduceOnTheirOwnAndTheBaselineIsTheUsersEnv) {
  TuneOptions t = Small();
  SimOptions job = Job();
  job.env["FERRY_SCHEDULING_POLICY"] = "p3";  // the user's choice: the baseline
  const TuneResult r = Tune(job, t);
  const Candidate& best = r.ranked.front();
  EXPECT_LE(best.median_ms, r.baseline.median_ms);
  for (int s = 0; s < t.seeds; ++s) {
    SimOptions o = Job();
    o.env = best.env;
    o.seed = job.seed + static_cast<uint64_t>(s);
    o.model.compute_jitter = t.jitter;
    EXPECT_EQ(Simulate(o).median_ms, best.seed_medians_ms[s]) << DescribeEnv(best.env);
  }
  auto p3 = std::find_if(r.ranked.begin(), r.ranked.end(), [](const Candidate& c) {
    return c.env == std::map<std::string, std::string>{{"FERRY_SCHEDULING_POLICY", "p3"}};
  });
  ASSERT_NE(p3, r.ranked.end());
  EXPECT_EQ(p3->seed_medians_ms, r.baseline.seed_medians_ms);
}

TEST(TuneTest, TheCommandLinePrintsTheRankingAndTheBestAsFerryLines) {
  CliOptions cli = ParseCommandLine({"--workload", "vgg16", "--byte-scale", "0.5",
                                     "--compute-scale", "0.5", "--workers", "4", "--colocate",
                                     "--iterations", "3", "--warmup", "1", "--tune",
                                     "--tune-seeds", "1"},
                                    kWorkloads);
  ASSERT_TRUE(cli.tune);
  ASSERT_EQ(cli.tune_options.seeds, 1);
  const TuneResult r = Tune(cli.sim, cli.tune_options);
  const std::string text = FormatTuneText(cli, r, 1.0);
  const std::string best = text.substr(text.find("best settings:\n") + 15);
  std::smatch m;
  std::map<std::string, std::string> printed;
  std::string rest = best;
  const std::regex line("^(FERRY_[A-Z0-9_]+)=(\\S+)\n");
  while (std::regex_search(rest, m, line)) {
    printed[m[1].str()] = m[2].str();
    rest = m.suffix();
  }
  EXPECT_TRUE(rest.empty()) << "not FERRY_* lines: " << rest;
  EXPECT_EQ(printed, r.ranked.front().env) << text;
  EXPECT_NE(text.find("default "), std::string::npos) << text;
  const std::string json = FormatTuneJson(cli, r, 1.0);
  EXPECT_NE(json.find("\"best\":{\"env\":"), std::string::npos) << json;
  EXPECT_THROW(ParseCommandLine({"--tune-seeds", "0"}, kWorkloads), FerryError);
}

TEST(TuneTest, APickThatHandsTheLinkToTcpComesWithANote) {
  CliOptions cli;
  TuneResult r;
  r.baseline.median_ms = 100;
  Candidate best;
  best.median_ms = 90;
  best.env = {{"FERRY_SCHEDULING_POLICY", "mercury"}};
  r.ranked = {best};
  const std::string text = FormatTuneText(cli, r, 1.0);
  const size_t note = text.find("note: mercury keeps far more in flight");
  ASSERT_NE(note, std::string::npos) << text;
  EXPECT_LT(note, text.find("best settings:\n")) << "the FERRY_* lines stay last: " << text;
  r.ranked.front().env = {{"FERRY_SCHEDULING_POLICY", "credit"}};
  EXPECT_EQ(FormatTuneText(cli, r, 1.0).find("note:"), std::string::npos);
  EXPECT_TRUE(HandsTheLinkToTcp("fifo-bucket"));
  EXPECT_FALSE(HandsTheLinkToTcp("prophet"));
}

}  // namespace
}  // namespace ferry::sim
