// ferry-sim's sparse rows in pipeline jobs (sim/pipeline_rows.h): a table's rows spread over
// the servers that own them, their bytes on the links exactly, a call that waits for the
// slowest worker's push, the lower bound's T_link with them (never beaten: pipeline_test.cc's
// randomized jobs have tables), the file's field and its refusals, and the output.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "common/util/error.h"
#include "sim/cli.h"
#include "sim/cluster_sim.h"
#include "sim/pipeline_bound.h"
#include "sim/pipeline_spec.h"

namespace ferry::sim {
namespace {

const std::string kWorkloads = std::string(FERRY_SOURCE_DIR) + "/bench/workloads";

// Links at exactly 1 Gbit/s (125 bytes per us): no TCP overhead, headers or message costs.
void MakeExact(SimOptions& o) {
  o.cluster.rate_bits_per_s = 1e9;
  o.model.tcp_efficiency = 1;
  o.model.message_us = 0;
  o.model.header_bytes = 0;
}

// One stage, 3 replicas, a worker and a server on each of 3 hosts, no tensors: only rows.
// The table: 3000 rows of 1024 bytes, cut in 1 MiB partitions placed on servers 0, 1 and 2,
// which own the rows starting in them: 1024, 1024 and 952.
SimOptions OnlyRows() {
  PipelineSpec p;
  p.name = "rows";
  p.micro_batches = 1;
  p.activation_bytes = 4;
  p.stages = {PipelineStage{1, 1, {}, SparseRows{3000, 1024, 1000}}};
  SimOptions o;
  o.pipeline = p;
  o.cluster.workers = 3;
  o.cluster.colocate = true;
  o.iterations = 4;
  MakeExact(o);
  return o;
}

// Bytes a host's link carried over the run, from its utilisation.
double Carried(const SimOptions& o, const SimResult& r, double utilisation) {
  return utilisation * o.cluster.rate_bits_per_s / 8e6 * r.run_ms * 1000;
}

TEST(PipelineRowsTest, RowsGoToTheirOwnersWithTheirBytesOnTheLinks) {
  const SimOptions o = OnlyRows();
  const SimResult r = Simulate(o);
  const PipelineOutcome& p = *r.pipeline;
  // K = 1000 rows in proportion to 1024 : 1024 : 952 is 341.33, 341.33 and 317.33: the
  // floors, and the one left to the lowest rank of the equal remainders.
  const std::vector<uint64_t> spread = {342, 341, 317};
  ASSERT_EQ(p.cluster.rows_by_cut.size(), 1u);
  ASSERT_EQ(p.cluster.rows_by_cut[0].size(), 1u);
  const PipelineCluster::Rows& shares = p.cluster.rows_by_cut[0][0];
  ASSERT_EQ(shares.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(shares[s].push_bytes, spread[s] * (8 + 1024)) << s;
    EXPECT_EQ(shares[s].answer_bytes, spread[s] * 1024) << s;
  }
  // Each iteration every worker pushes its 1000 rows and gets their sums back.
  const int calls = 3 * (o.warmup + o.iterations);
  EXPECT_EQ(p.rows_calls, static_cast<uint64_t>(calls));
  EXPECT_EQ(p.rows_pushed_bytes, calls * 1000u * (8 + 1024));
  EXPECT_EQ(p.rows_answered_bytes, calls * 1000u * 1024);
  // Host h's uplink: its worker's rows to the two other servers, and its server's sums to
  // the two other workers; its downlink the other way round. Nothing else crosses a link.
  for (int h = 0; h < 3; ++h) {
    uint64_t others = 0;
    for (int s = 0; s < 3; ++s) others += s == h ? 0 : spread[s];
    const double up = static_cast<double>(others * 1032 + 2 * spread[h] * 1024);
    const double down = static_cast<double>(others * 1024 + 2 * spread[h] * 1032);
    const int iterations = o.warmup + o.iterations;
    EXPECT_NEAR(Carried(o, r, r.hosts[h].up), iterations * up, 1e-6 * up) << h;
    EXPECT_NEAR(Carried(o, r, r.hosts[h].down), iterations * down, 1e-6 * down) << h;
  }
  // The busiest direction is host 0's downlink: 658 x 1024 + 684 x 1032 bytes.
  EXPECT_NEAR(p.bound.t_link_ms, (658 * 1024 + 684 * 1032) / 125.0 / 1000, 1e-9);
  EXPECT_NEAR(p.bound.push_pull_ms, 0, 1e-12);  // the rows count on the links only
}

// Two stages, one worker each on hosts of their own, one server on a third; 1 micro-batch,
// no stash; stage 1 owns a table of which it pushes 100 rows (all to the one server).
SimOptions SlowestPusher(double stage0_backward_ms) {
  PipelineSpec p;
  p.name = "slowest";
  p.micro_batches = 1;
  p.activation_bytes = 1000;  // 8 us on a link
  p.stash = false;
  p.stages = {PipelineStage{1, stage0_backward_ms, {}, {}},
              PipelineStage{2, 3, {}, SparseRows{1000, 1024, 100}}};
  SimOptions o;
  o.pipeline = p;
  o.cluster.workers = 2;
  o.cluster.servers = 1;
  o.iterations = 2;
  MakeExact(o);
  return o;
}

TEST(PipelineRowsTest, ACallWaitsForTheSlowestWorkersPush) {
  // Stage 1's backward ends at 1 + 0.008 + 2 + 3 = 6.008 ms; its gradient reaches worker 0
  // at 6.016 ms and holds its rows back until then (a critical flow); they take 103200 /
  // 125 us = 0.8256 ms to the server. Worker 0 calls push_pull_rows with no rows after its
  // own backward (from 6.016 ms). The round completes with the later push, is summed in
  // 102400 bytes / 8 GB/s = 12.8 us, and the sums (0.8192 ms) end stage 1's iteration; the
  // empty answer ends stage 0's.
  const double sum_ms = 102400 / 8e9 * 1000;
  const double answer_ms = 102400 / 125.0 / 1000;
  for (double backward_ms : {20.0, 0.1}) {
    const SimResult r = Simulate(SlowestPusher(backward_ms));
    const PipelineOutcome& p = *r.pipeline;
    const double slowest = std::max(6.016 + backward_ms, 6.016 + 103200 / 125.0 / 1000);
    EXPECT_NEAR(p.starts_ms[0][1], slowest + sum_ms, 1e-9) << backward_ms;
    EXPECT_NEAR(p.starts_ms[1][1], slowest + sum_ms + answer_ms, 1e-9) << backward_ms;
  }
}

TEST(PipelineRowsTest, WithStashAnIterationWaitsForThePreviousCall) {
  SimOptions o = SlowestPusher(20);
  o.pipeline->stash = true;
  const SimResult r = Simulate(o);
  // Iteration 0 waits for no call: stage 1 starts iteration 1 once its gradient's
  // acknowledgement is back (6.016 ms), while its rows are still out.
  EXPECT_NEAR(r.pipeline->starts_ms[1][1], 6.016, 1e-9);
  EXPECT_GE(r.pipeline->rows_ms_p99, 20.0);  // stage 1's calls wait for stage 0's backward
}

TEST(PipelineRowsTest, ATableIsCutAgainWithTheGlobalSet) {
  // With StepBoundary, FERRY_PARTITION_MS cuts the global set's tensors (the table) in
  // smaller partitions at the third boundary, with the sets' tensors (the credit follows):
  // the rows of the second cut go by its placement.
  SimOptions o = OnlyRows();
  o.pipeline->stages[0].tensors = {4u << 20};  // for the rate the workers measure
  o.pipeline_step_boundary = true;
  o.iterations = 6;
  const SimResult r = Simulate(o);
  ASSERT_EQ(r.pipeline->cluster.rows_by_cut.size(), 2u);
  EXPECT_EQ(r.pipeline->cluster.parts_by_cut.size(), 2u);
  EXPECT_LT(r.partition_bytes, 1u << 20);
  EXPECT_EQ(r.pipeline->credit_bytes, 4 * r.partition_bytes);
  EXPECT_EQ(r.pipeline->rows_calls, 3u * 8);
}

TEST(PipelineRowsTest, AServersPushOverTheMessageLimitIsRefused) {
  // Rows of 4 MiB: row r starts in partition 4r, placed on server 4r % 3 = r % 3, so each
  // server owns 1000 rows and gets 334, 333 and 333 of them: 334 x (8 + 4 MiB) bytes is
  // more than FERRY_MAX_MESSAGE_BYTES's default, 1 GiB.
  SimOptions o = OnlyRows();
  o.pipeline->stages[0].sparse_rows = SparseRows{3000, 4u << 20, 1000};
  try {
    Simulate(o);
    ADD_FAILURE() << "accepted";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find(
                  "the pipeline rows: stages[0].sparse_rows: 334 rows for server 0 make a "
                  "ROWS_PUSH of 1400900208 bytes, more than "
                  "FERRY_MAX_MESSAGE_BYTES (1073741824)"),
              std::string::npos)
        << e.what();
  }
}

std::string Refusal(const std::string& sparse_rows) {
  const std::string path = testing::TempDir() + "rows_pipeline.json";
  std::ofstream(path) << StrCat(
      R"({"micro_batches": 2, "activation_bytes": 8, "stash": true, "stages": [)",
      R"({"forward_ms": 1, "backward_ms": 2, "tensors": [4], "sparse_rows": )", sparse_rows, "}]}");
  try {
    LoadPipeline(path);
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << sparse_rows;
  return "";
}

TEST(PipelineRowsTest, ABadTableIsRefusedNamingTheField) {
  auto refused = [](const std::string& sparse_rows, const std::string& why) {
    const std::string message = Refusal(sparse_rows);
    EXPECT_NE(message.find("stages[0].sparse_rows" + why), std::string::npos) << message;
  };
  refused("[1]", ": not an object");
  refused(R"({"table_rows": 10, "row_bytes": 8, "rows": 2, "dim": 2})", ".dim: unknown field");
  refused(R"({"row_bytes": 8, "rows": 2})", ".table_rows: missing");
  refused(R"({"table_rows": 0, "row_bytes": 8, "rows": 2})",
          ".table_rows: 0 is not a whole number from 1 to 10000000000");
  refused(R"({"table_rows": 10, "row_bytes": 6, "rows": 2})",
          ".row_bytes: 6 is not a positive multiple of 4");
  refused(R"({"table_rows": 10, "row_bytes": 8, "rows": -1})",
          ".rows: -1 is not a whole number from 1 to 1000000000");
  refused(R"({"table_rows": 10, "row_bytes": 8, "rows": 2.5})", ".rows: 2.5 is not a whole");
  refused(R"({"table_rows": 10000000000, "row_bytes": 1024, "rows": 2})",
          ": a table of 10000000000 rows of 1024 bytes is more than 2^40 bytes");
}

TEST(PipelineRowsTest, TheExampleReadsScalesAndReports) {
  const PipelineSpec p = LoadPipeline(kWorkloads + "/vgg16_pipeline_rows.json");
  ASSERT_EQ(p.num_stages(), 2);
  ASSERT_TRUE(p.stages[0].sparse_rows);
  EXPECT_FALSE(p.stages[1].sparse_rows);
  EXPECT_EQ(p.stages[0].sparse_rows->table_rows, 1000000u);
  EXPECT_EQ(p.stages[0].sparse_rows->row_bytes, 1024u);
  EXPECT_EQ(p.stages[0].sparse_rows->rows, 8192u);
  // --byte-scale narrows the rows (whole float32 values), not their number.
  const PipelineSpec scaled = ScalePipeline(p, 1, 0.125);
  EXPECT_EQ(scaled.stages[0].sparse_rows->row_bytes, 128u);
  EXPECT_EQ(scaled.stages[0].sparse_rows->rows, 8192u);

  CliOptions cli = ParseCommandLine({"--pipeline", "vgg16_pipeline_rows", "--workers", "4",
                                     "--colocate", "--byte-scale", "0.05", "--iterations", "2"},
                                    kWorkloads);
  const SimResult r = Simulate(cli.sim);
  // 4 workers x 4 iterations; each of stage 0's 2 replicas pushes 8192 rows of 48 bytes.
  EXPECT_EQ(r.pipeline->rows_calls, 16u);
  EXPECT_EQ(r.pipeline->rows_pushed_bytes, 4u * 2 * 8192 * (8 + 48));
  const std::string json = FormatJson(cli, r, 1.0);
  for (const char* field :
       {"\"sparse_rows\":{\"row_bytes\":48,\"rows\":8192,\"table_rows\":1000000}",
        "\"rows_calls\":16", "\"rows_ms_p50\":", "\"rows_pushed_bytes\":"}) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
  }
  EXPECT_NE(FormatText(cli, r, 1.0).find("rows       16 push_pull_rows calls"), std::string::npos);
  // A job without a table reports none.
  cli.sim.pipeline = LoadPipeline(kWorkloads + "/vgg16_pipeline.json");
  const SimResult plain = Simulate(cli.sim);
  EXPECT_EQ(FormatJson(cli, plain, 1.0).find("rows_calls"), std::string::npos);
  EXPECT_EQ(FormatText(cli, plain, 1.0).find("push_pull_rows"), std::string::npos);
}

}  // namespace
}  // namespace ferry::sim
