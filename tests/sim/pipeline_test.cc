// ferry-sim's hybrid pipeline + data-parallel jobs (sim/pipeline_*.h): the 1F1B schedule in
// closed form, the hold-back of a worker's tensor bytes behind its point-to-point sends,
// weight stashing, the lower bound by hand and never beaten (with tables of sparse rows too:
// pipeline_rows_test.cc), the file format and the command line.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "common/config/config.h"
#include "common/config/scheduling_policy.h"
#include "common/transport/message.h"
#include "common/util/error.h"
#include "sim/cli.h"
#include "sim/cluster_sim.h"
#include "sim/job.h"
#include "sim/pipeline_bound.h"
#include "sim/pipeline_spec.h"
#include "worker/placement.h"
#include "worker/tensor_catalog.h"

namespace ferry::sim {
namespace {

const std::string kWorkloads = std::string(FERRY_SOURCE_DIR) + "/bench/workloads";

PipelineSpec TwoStages(int micro_batches, uint64_t activation_bytes, bool stash) {
  PipelineSpec p;
  p.name = "test";
  p.micro_batches = micro_batches;
  p.activation_bytes = activation_bytes;
  p.stash = stash;
  p.stages = {PipelineStage{2, 3, {}, {}}, PipelineStage{10, 20, {}, {}}};
  return p;
}

// 1 Gbit/s links without TCP's overhead, headers or message costs: a send of A bytes takes
// A / 125 us on the links, then the latency.
SimOptions Exact(const PipelineSpec& p, int workers, double latency_us) {
  SimOptions o;
  o.pipeline = p;
  o.cluster.workers = workers;
  o.cluster.servers = 1;
  o.cluster.rate_bits_per_s = 1e9;
  o.cluster.latency_us = latency_us;
  o.model.tcp_efficiency = 1;
  o.model.message_us = 0;
  o.model.header_bytes = 0;
  o.iterations = 4;
  return o;
}

// What the bound guarantees of a run (pipeline_bound.h): no worker starts an iteration
// before the schedule's start of its stage, and by the last start the busiest link carried
// every finished iteration's bytes.
void ExpectNeverBeforeTheBound(const SimOptions& o, const SimResult& r, const std::string& what) {
  const PipelineSpec& p = *o.pipeline;
  const PipelineOutcome& out = *r.pipeline;
  const double rate = o.cluster.rate_bits_per_s;
  const double send_us =
      static_cast<double>(p.activation_bytes) / (rate / 8e6) + o.cluster.latency_us;
  const int iterations = o.warmup + o.iterations;
  const std::vector<std::vector<double>> schedule =
      PipelineStartsUs(p, send_us, StagePushPullUs(p, out.cluster, rate), iterations);
  double last = 0;
  for (size_t w = 0; w < out.starts_ms.size(); ++w) {
    const int stage = static_cast<int>(w) / out.replicas;
    ASSERT_EQ(out.starts_ms[w].size(), static_cast<size_t>(iterations + 1)) << what;
    for (int t = 0; t <= iterations; ++t) {
      EXPECT_GE(out.starts_ms[w][t] * 1000, schedule[stage][t] - 1e-6)
          << what << ": worker " << w << " iteration " << t;
    }
    last = std::max(last, out.starts_ms[w].back());
  }
  // T_link is the mean over the two versions (the least over the sets' cuts): any `carried`
  // iterations moved at least carried - 1 times its bytes, carried - 2 with a cut again.
  const int carried = p.stash ? iterations - 1 : iterations;
  const int unpaired = out.cluster.parts_by_cut.size() > 1 ? 2 : 1;
  EXPECT_GE(last, (carried - unpaired) * out.bound.t_link_ms * (1 - 1e-9)) << what;
}

TEST(PipelineScheduleTest, OneFOneBWarmsUpThenAlternates) {
  auto text = [](const std::vector<PipelineOp>& ops) {
    std::string s;
    for (const PipelineOp& op : ops) s += StrCat(op.forward ? "F" : "B", op.micro_batch, " ");
    return s;
  };
  EXPECT_EQ(text(Schedule1F1B(0, 3, 4)), "F0 F1 F2 B0 F3 B1 B2 B3 ");
  EXPECT_EQ(text(Schedule1F1B(1, 3, 4)), "F0 F1 B0 F2 B1 F3 B2 B3 ");
  EXPECT_EQ(text(Schedule1F1B(2, 3, 4)), "F0 B0 F1 B1 F2 B2 F3 B3 ");
  EXPECT_EQ(text(Schedule1F1B(0, 4, 2)), "F0 F1 B0 B1 ");  // warm-up capped at M
}

TEST(PipelineSimTest, TwoStagesWithoutTensorsTakeTheClosedForm) {
  // Stage 1 is the bottleneck (2 x send + f0 + b0 <= f1 + b1): once its first activation
  // is there it never waits, so an iteration is stage 0's first forward, one send, stage
  // 1's M forwards and backwards, one send back and stage 0's last backward.
  for (int m : {1, 2, 5}) {
    const PipelineSpec p = TwoStages(m, 1000000, /*stash=*/true);
    const double send_ms = 1000000 / 125.0 / 1000 + 0.05;  // 8 ms and 50 us of latency
    const double closed = 2 + 10 * m + 20 * m + 3 + 2 * send_ms;
    EXPECT_NEAR(PipelineIterationUs(p, send_ms * 1000) / 1000, closed, 1e-9) << m;
    const SimResult r = Simulate(Exact(p, 2, 50));
    ASSERT_TRUE(r.pipeline);
    ASSERT_EQ(r.iteration_ms.size(), 8u);
    for (double ms : r.iteration_ms) EXPECT_NEAR(ms, closed, 1e-6) << m;
    EXPECT_NEAR(r.pipeline->bound.t_pipe_ms, closed, 1e-6);
    EXPECT_NEAR(r.pipeline->bound.bound_ms, closed, 1e-6);                // nothing else binds
    EXPECT_EQ(r.pipeline->sends.size(), static_cast<size_t>(2 * m * 6));  // 6 iterations
  }
}

// Two hosts, a worker and a server on each; stage 0 pushes one 8 MiB tensor (stash: its
// push_pull runs through the next iteration's forwards), stage 1 none. Worker 0's uplink
// carries its pushes to server 1 and its activations to worker 1, nothing else.
SimOptions BigGradient(const std::string& policy, bool stash) {
  PipelineSpec p = TwoStages(4, 1 << 20, stash);
  p.stages = {PipelineStage{10, 20, {8u << 20}, {}}, PipelineStage{10, 20, {}, {}}};
  SimOptions o;
  o.pipeline = p;
  o.cluster.workers = 2;
  o.cluster.colocate = true;
  o.cluster.rate_bits_per_s = 1e9;
  o.iterations = 6;
  o.env["FERRY_SCHEDULING_POLICY"] = policy;
  return o;
}

// Worker 0's activation sends of `r`: (the most any took, how many took longer than idle).
std::pair<double, int> ActivationTimes(const SimResult& r, double idle) {
  double worst = 0;
  int slowed = 0;
  for (const SendRecord& s : r.pipeline->sends) {
    if (!s.activation) continue;
    const double took = s.arrived_us - s.sent_us;
    EXPECT_GE(took, idle - 1e-6);
    worst = std::max(worst, took);
    if (took > idle + 1) slowed++;
  }
  return {worst, slowed};
}

TEST(PipelineSimTest, ASendHoldsBackTheWorkersOtherTensorBytes) {
  const ModelParams m;
  const double link = 1e9 / 8 / 1e6 * m.tcp_efficiency;  // bytes per us
  const double idle = ((1 << 20) + m.header_bytes) / link + m.message_us;
  const double frame = (262144 + m.header_bytes) / link;  // trirace's frames
  // While a send runs, worker 0 hands no push to the transport; what the watermark let
  // out before it (trirace: 512 KiB, two frames) still goes, at most before the send.
  const SimResult trirace = Simulate(BigGradient("trirace", true));
  const auto [worst, slowed] = ActivationTimes(trirace, idle);
  EXPECT_GT(slowed, 0);  // some sends did meet pushes on the link
  EXPECT_LE(worst, idle + 2 * frame + 1e-6);
  EXPECT_GT(trirace.pipeline->link_held, 0u);
  // With a watermark of one frame, only the frame in service is ahead of a send.
  SimOptions one_frame = BigGradient("trirace", true);
  one_frame.env["FERRY_TRANSPORT_WATERMARK_BYTES"] = "262144";
  const auto [worst_one, slowed_one] = ActivationTimes(Simulate(one_frame), idle);
  EXPECT_GT(slowed_one, 0);
  EXPECT_LE(worst_one, idle + frame + 1e-6);
  // Under fifo a send is one more connection on the uplink, beside every push.
  const SimResult fifo = Simulate(BigGradient("fifo", true));
  EXPECT_EQ(fifo.pipeline->link_flows, 0u);  // fifo schedules no links
  EXPECT_GT(ActivationTimes(fifo, idle).first, 1.5 * idle);
  EXPECT_LE(trirace.median_ms, fifo.median_ms);
}

TEST(PipelineSimTest, WithoutStashAnIterationWaitsForItsOwnPushPulls) {
  const SimResult stash = Simulate(BigGradient("credit", true));
  const SimResult own = Simulate(BigGradient("credit", false));
  const PipelineBound& b = own.pipeline->bound;
  // Half the tensor (4 MiB) is on the other host's server: pushed and summed back.
  const double push_pull_ms = (4 << 20) / 125.0 / 1000;
  EXPECT_NEAR(b.push_pull_ms, push_pull_ms, 1e-9);
  EXPECT_NEAR(b.bound_ms, b.t_pipe_ms + push_pull_ms, 1e-6);
  EXPECT_GE(own.median_ms, b.t_pipe_ms + push_pull_ms);
  // With stash it runs beside the next iteration: less than the pipeline and it in a row.
  EXPECT_LT(stash.median_ms, stash.pipeline->bound.t_pipe_ms + 0.5 * push_pull_ms);
  EXPECT_LT(stash.median_ms, own.median_ms);
  EXPECT_GE(stash.pipeline->mean_ms, stash.pipeline->bound.bound_ms);
}

TEST(PipelineSimTest, TriraceIsCreditWithTheTransportsFramesAndOrder) {
  // The simulated worker reads the policy as a real one does (Config::FromEnvironment):
  // credit's partition rules, frames, the watermark and a small kernel queue unless set.
  SimOptions o = BigGradient("trirace", true);
  const NodeRole worker = NodeRole::kWorker;
  Config c = Config::FromEnvironment(MapEnvironment(WorkerEnvironment(o)), &worker);
  EXPECT_TRUE(CreditLike(c.scheduling.policy));
  EXPECT_TRUE(SchedulesLinks(c.scheduling.policy));
  EXPECT_EQ(c.transport.frame_bytes, 262144);
  EXPECT_EQ(c.transport.watermark_bytes, 524288);
  EXPECT_EQ(c.transport.tcp_notsent_lowat, 131072);
  o.env["FERRY_FRAME_BYTES"] = "0";
  c = Config::FromEnvironment(MapEnvironment(WorkerEnvironment(o)), &worker);
  EXPECT_EQ(c.transport.frame_bytes, 0);
  // Its 1 MiB partitions go as four frames each; credit's whole.
  const SimResult trirace = Simulate(BigGradient("trirace", true));
  const SimResult credit = Simulate(BigGradient("credit", true));
  EXPECT_EQ(trirace.policy, "trirace");
  EXPECT_GT(trirace.rounds, 3 * credit.rounds);
  EXPECT_GT(credit.pipeline->link_flows, 0u);  // credit schedules links too
}

TEST(PipelineSimTest, TheDefaultPolicyRunsAPipelineAsTriraceWithoutTheControlLane) {
  // Unset, the policy takes trirace's frames and watermark once sends are seen: a pipeline
  // (its stages send) runs as trirace does with the control lane off; a policy set stays.
  SimOptions unset = BigGradient("credit", true);
  unset.env.erase("FERRY_SCHEDULING_POLICY");
  SimOptions trirace = BigGradient("trirace", true);
  trirace.env["FERRY_CONTROL_LANE"] = "0";
  const SimResult d = Simulate(unset), t = Simulate(trirace);
  const SimResult credit = Simulate(BigGradient("credit", true));
  EXPECT_EQ(d.rounds, t.rounds);
  EXPECT_EQ(d.median_ms, t.median_ms);
  EXPECT_GT(d.rounds, 3 * credit.rounds) << "frames: four per 1 MiB partition";
}

TEST(PipelineSimTest, StepBoundaryCutsTheSetsInTheNewSizeAndTheCreditFollows) {
  SimOptions o;
  o.pipeline = LoadPipeline(kWorkloads + "/vgg16_pipeline.json");
  o.cluster.workers = 4;
  o.cluster.colocate = true;
  o.iterations = 2;  // after 2 warm-up: iterations 0 to 3
  o.record_parts = true;
  o.env["FERRY_SCHEDULING_POLICY"] = "credit";  // no frames: a partition is a round
  // One iteration's partitions in `bytes` of stage `s`'s tensors (either version).
  auto parts = [&](int s, uint64_t bytes) {
    uint64_t n = 0;
    for (uint64_t t : o.pipeline->stages[s].tensors) n += SplitTensor(t, 4, bytes).size();
    return n;
  };
  // Worker 0's (stage 0's) partitions in iteration `it` of `r`: how many, and the largest.
  auto worker0 = [](const SimResult& r, int it) {
    std::pair<uint64_t, uint64_t> seen{0, 0};
    for (const PartRecord& p : r.parts) {
      if (p.iteration != it) continue;
      seen.first++;
      seen.second = std::max(seen.second, p.bytes);
    }
    return seen;
  };
  ASSERT_EQ(parts(0, 1 << 20), 67u);
  ASSERT_EQ(parts(0, 131072), 461u);
  ASSERT_EQ(parts(1, 1 << 20), 474u);
  ASSERT_EQ(parts(1, 131072), 3776u);
  const uint64_t mib = parts(0, 1 << 20) + parts(1, 1 << 20);
  const uint64_t small = parts(0, 131072) + parts(1, 131072);

  // hybrid_bench.py calls no StepBoundary: 1 MiB partitions throughout, the credit
  // FERRY_SCHEDULING_CREDIT x 1 MiB; each iteration a round of every partition of each set.
  const SimResult plain = Simulate(o);
  EXPECT_EQ(plain.partition_bytes, 1u << 20);
  EXPECT_EQ(plain.pipeline->credit_bytes, 4u << 20);
  EXPECT_EQ(plain.rounds, 4 * mib);
  EXPECT_EQ(plain.pipeline->cluster.parts_by_cut.size(), 1u);
  EXPECT_EQ(worker0(plain, 3), std::make_pair(parts(0, 1 << 20), uint64_t{1} << 20));

  // A program that steps: at the third boundary (iteration 2's end) FERRY_PARTITION_MS
  // sizes partitions by the measured rate (at 1 Gbit/s its floor, 128 KiB), and every
  // set's tensors are cut in it from iteration 3 on (a layout of its own: fresh keys, so
  // rounds of their own), with the credit 4 x 128 KiB.
  o.pipeline_step_boundary = true;
  const SimResult stepped = Simulate(o);
  EXPECT_EQ(stepped.partition_bytes, 131072u);
  EXPECT_EQ(stepped.pipeline->credit_bytes, 4u * 131072);
  EXPECT_EQ(stepped.rounds, 3 * mib + small);
  EXPECT_EQ(stepped.pipeline->cluster.parts_by_cut.size(), 2u);  // the bound takes both cuts
  EXPECT_EQ(worker0(stepped, 2), std::make_pair(parts(0, 1 << 20), uint64_t{1} << 20));
  EXPECT_EQ(worker0(stepped, 3), std::make_pair(parts(0, 131072), uint64_t{131072}));

  // Without FERRY_PARTITION_MS nothing is cut again.
  o.env["FERRY_PARTITION_MS"] = "0";
  const SimResult fixed = Simulate(o);
  EXPECT_EQ(fixed.partition_bytes, 1u << 20);
  EXPECT_EQ(fixed.pipeline->credit_bytes, 4u << 20);
  EXPECT_EQ(fixed.rounds, 4 * mib);
}

TEST(PipelineSimTest, ASetsLayoutsAreNumberedAsItsCatalogNumbersThem) {
  // Each catalog numbers its layouts in the order it first uses their sizes
  // (TensorCatalog::SwitchPartitionBytes): a set's own generations, in its keys.
  SimJob job;
  job.weights = {1, 1};
  job.num_servers = 2;
  const int first = job.AddProcessSet(2, {3u << 20}, 1 << 20);
  const Layout& small = job.SetLayoutFor(first, 131072);
  EXPECT_EQ(job.SetLayoutFor(first, 1 << 20).number, 0u);
  EXPECT_EQ(small.number, 1u);
  ASSERT_EQ(small.parts.size(), 1u);
  ASSERT_EQ(small.parts[0].size(), 24u);
  for (const SimPart& p : small.parts[0]) {
    EXPECT_EQ(KeyTensor(p.key), ProcessSetFirstId(first));
    EXPECT_EQ(KeyLayout(p.key), 1u);
  }
  EXPECT_EQ(&job.SetLayoutFor(first, 131072), &small);  // made once
  // A set added later starts in the size in force: its layout 0.
  const int later = job.AddProcessSet(2, {3u << 20}, 131072);
  EXPECT_EQ(job.SetLayoutFor(later, 131072).number, 0u);
  EXPECT_EQ(KeyLayout(job.SetLayoutFor(later, 131072).parts[0][0].key), 0u);
  EXPECT_EQ(job.Members(job.SetLayoutFor(later, 131072).parts[0][0].key), 2);
}

TEST(PipelineSimTest, IterationsAlternateTwoVersionsOfTheGradients) {
  // As hybrid_bench.py: iteration t pushes version t % 2 of each tensor, a tensor of its
  // own in the set's catalog (ids 0..n-1, then n..2n-1): version 1's keys differ.
  SimOptions o = BigGradient("credit", true);
  o.record_parts = true;
  o.warmup = 0;
  o.iterations = 2;
  const SimResult r = Simulate(o);
  std::set<int> layers[2];
  for (const PartRecord& p : r.parts) layers[p.iteration % 2].insert(p.layer);
  EXPECT_EQ(layers[0], std::set<int>{0});
  EXPECT_EQ(layers[1], std::set<int>{1});
}

TEST(PipelineBoundTest, ASmallCaseByHand) {
  // 2 stages x 1 replica, a worker and a server on each of 2 hosts, 1 Gbit/s; M = 2,
  // f = b = 10 ms, sends of 1.25 MB (10 ms). 1F1B: 3 (f + b) + 2 sends = 80 ms.
  // Stage 0 pushes 8 MiB (1 MiB partitions, 4 MiB on each server), stage 1 4 MiB (its own
  // placement: 2 MiB on each). Host 0's uplink: 2 activations (2.5 MB), worker 0's pushes
  // to server 1 (4 MiB), server 0's sums to worker 1 (2 MiB): 8791456 bytes, 70.33 ms,
  // and so is every other link direction.
  PipelineSpec p;
  p.micro_batches = 2;
  p.activation_bytes = 1250000;
  p.stages = {PipelineStage{10, 10, {8u << 20}, {}}, PipelineStage{10, 10, {4u << 20}, {}}};
  PipelineCluster c;
  c.host_of_worker = {0, 1};
  c.host_of_server = {0, 1};
  c.hosts = 2;
  // Each of the two versions of a stage's tensors is placed alike here.
  const PipelineCluster::Parts stage0 = {{0, 4u << 20}, {1, 4u << 20}};
  const PipelineCluster::Parts stage1 = {{0, 2u << 20}, {1, 2u << 20}};
  c.parts_by_cut = {{{stage0, stage0}, {stage1, stage1}}};  // one cut
  const double link_ms = 8791456 / 125.0 / 1000;
  p.stash = true;
  PipelineBound b = ComputePipelineBound(p, c, 1e9, 0);
  EXPECT_NEAR(b.t_pipe_ms, 80, 1e-9);
  EXPECT_NEAR(b.t_link_ms, link_ms, 1e-9);
  // A stage's push_pull: its worker's 4 MiB (2 MiB) to the other host, 33.55 ms (16.78).
  EXPECT_NEAR(b.push_pull_ms, (4 << 20) / 125.0 / 1000, 1e-9);
  EXPECT_NEAR(b.t_schedule_ms, 80, 1e-9);  // stashed: beside the next iteration
  EXPECT_NEAR(b.bound_ms, 80, 1e-9);
  p.stash = false;
  b = ComputePipelineBound(p, c, 1e9, 0);
  // Stage 0 starts again 33.55 ms after its last backward; stage 1's push_pull (from 60
  // ms) is through before stage 0's next activation comes.
  EXPECT_NEAR(b.t_schedule_ms, 80 + (4 << 20) / 125.0 / 1000, 1e-9);
  EXPECT_NEAR(b.bound_ms, b.t_schedule_ms, 1e-9);

  // The simulation of the same job never beats it, and a long run's mean comes close.
  SimOptions o;
  o.pipeline = p;
  o.cluster.workers = 2;
  o.cluster.colocate = true;
  o.iterations = 8;
  for (bool stash : {true, false}) {
    o.pipeline->stash = stash;
    const SimResult r = Simulate(o);
    ExpectNeverBeforeTheBound(o, r, stash ? "stash" : "no stash");
    EXPECT_GE(r.pipeline->mean_ms, r.pipeline->bound.bound_ms) << stash;
    EXPECT_LT(r.pipeline->mean_ms, 1.5 * r.pipeline->bound.bound_ms) << stash;
  }
}

TEST(PipelineBoundTest, NoSimulatedRunBeatsIt) {
  std::mt19937_64 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const char* policies[] = {"fifo", "credit", "trirace", "p3", "usbyte", "fifo-bucket"};
  const NetworkModel networks[] = {NetworkModel::kQueued, NetworkModel::kFifo, NetworkModel::kFair};
  for (int trial = 0; trial < 40; ++trial) {
    PipelineSpec p;
    p.name = StrCat("random ", trial);
    p.micro_batches = pick(1, 6);
    p.activation_bytes = 4u * static_cast<uint64_t>(pick(1000, 600000));
    p.stash = pick(0, 1) == 1;
    const int stages = pick(1, 4);
    for (int s = 0; s < stages; ++s) {
      PipelineStage stage{pick(0, 20) * 0.5, pick(1, 30) * 0.5, {}, {}};
      for (int t = pick(0, 4); t > 0; --t) stage.tensors.push_back(4u * pick(1, 2000000));
      if (pick(0, 2) == 0) {  // an embedding table (pipeline_rows.h)
        stage.sparse_rows = SparseRows{static_cast<uint64_t>(pick(1, 100000)), 4u * pick(1, 512),
                                       static_cast<uint64_t>(pick(1, 20000))};
      }
      p.stages.push_back(stage);
    }
    SimOptions o;
    o.pipeline = p;
    o.cluster.workers = stages * pick(1, 3);
    o.cluster.colocate = pick(0, 1) == 1;
    o.cluster.servers = o.cluster.colocate ? 0 : pick(1, 3);
    o.cluster.rate_bits_per_s = pick(1, 20) * 1e8;
    o.cluster.latency_us = pick(0, 200);
    o.iterations = 6;
    o.env["FERRY_SCHEDULING_POLICY"] = policies[pick(0, 5)];
    o.model.network = networks[pick(0, 2)];
    o.pipeline_step_boundary = trial % 3 == 0;  // the sets cut again at the third boundary
    const SimResult r = Simulate(o);
    ExpectNeverBeforeTheBound(
        o, r,
        StrCat(p.name, ": ", stages, " stages, ", o.cluster.workers, " workers, ",
               o.env["FERRY_SCHEDULING_POLICY"], p.stash ? ", stash" : "",
               o.pipeline_step_boundary ? ", step boundary" : ""));
  }
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// The message LoadPipeline refuses `text` with.
std::string Refusal(const std::string& text) {
  const std::string path = WriteFile("bad_pipeline.json", text);
  try {
    LoadPipeline(path);
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

TEST(PipelineSpecTest, TheExampleReadsAndScales) {
  const PipelineSpec p = LoadPipeline(kWorkloads + "/vgg16_pipeline.json");
  EXPECT_EQ(p.name, "vgg16_pipeline");
  EXPECT_EQ(p.micro_batches, 8);
  EXPECT_EQ(p.activation_bytes, 1605632u);
  EXPECT_TRUE(p.stash);
  ASSERT_EQ(p.num_stages(), 2);
  EXPECT_EQ(p.stages[0].tensors.size(), 13u);
  EXPECT_EQ(p.stages[1].tensors.front(), 411058176u);
  const PipelineSpec half = ScalePipeline(p, 2, 0.5);
  EXPECT_EQ(half.activation_bytes, 802816u);
  EXPECT_EQ(half.stages[1].tensors.front(), 205529088u);
  EXPECT_DOUBLE_EQ(half.stages[0].backward_ms, 80);
}

TEST(PipelineSpecTest, ABadFileIsRefusedNamingTheField) {
  const std::string stage = R"({"forward_ms": 1, "backward_ms": 2, "tensors": [4]})";
  auto with = [&](const std::string& fields) {
    return StrCat(R"({"micro_batches": 2, "activation_bytes": 8, "stash": true, )", fields, "}");
  };
  EXPECT_NE(Refusal("{not json").find("not JSON"), std::string::npos);
  EXPECT_NE(Refusal("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(Refusal(with(StrCat(R"("stages": [)", stage, R"(], "stages_x": 1)")))
                .find("stages_x: unknown field"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"activation_bytes": 8, "stash": true, "stages": [1]})")
                .find("micro_batches: missing"),
            std::string::npos);
  EXPECT_NE(Refusal(with(R"("stages": [])")).find("stages: not a non-empty list"),
            std::string::npos);
  EXPECT_NE(Refusal(with(R"("stages": [{"forward_ms": 1, "backward_ms": -2, "tensors": []}])"))
                .find("stages[0].backward_ms: -2 is not a time"),
            std::string::npos);
  EXPECT_NE(Refusal(with(StrCat(R"("stages": [)", stage,
                                R"(, {"forward_ms": 1, "backward_ms": 2, "tensors": [4, 6]}])")))
                .find("stages[1].tensors[1]: 6 is not a positive multiple of 4"),
            std::string::npos);
  EXPECT_NE(Refusal(with(StrCat(R"("stages": [)", stage, R"(], "comment": 3)")))
                .find("comment: not a string"),
            std::string::npos);
  EXPECT_NE(Refusal(StrCat(R"({"micro_batches": 2, "activation_bytes": 8, "stash": "yes", )",
                           R"("stages": [)", stage, "]}"))
                .find("stash: \"yes\" is not true or false"),
            std::string::npos);
}

TEST(PipelineCliTest, FlagsAndRefusals) {
  CliOptions cli = ParseCommandLine({"--pipeline", "vgg16_pipeline", "--workers", "4", "--colocate",
                                     "--byte-scale", "0.5", "--compute-scale", "0.1"},
                                    kWorkloads);
  ASSERT_TRUE(cli.sim.pipeline);
  EXPECT_EQ(cli.sim.pipeline->activation_bytes, 802816u);
  EXPECT_DOUBLE_EQ(cli.sim.pipeline->stages[0].forward_ms, 2);
  auto refusal = [&](const std::vector<std::string>& args) {
    try {
      ParseCommandLine(args, kWorkloads);
    } catch (const FerryError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string file = kWorkloads + "/vgg16_pipeline.json";
  EXPECT_NE(refusal({"--pipeline", file, "--workers", "3"})
                .find("--workers: 3 is not a multiple of the 2 stages of --pipeline " + file),
            std::string::npos);
  EXPECT_NE(refusal({"--pipeline", file, "--workload", "vgg16"}).find("not with --workload"),
            std::string::npos);
  EXPECT_NE(refusal({"--pipeline", file, "--tune"}).find("--tune: not with --pipeline"),
            std::string::npos);
  EXPECT_NE(refusal({"--pipeline", kWorkloads + "/none.json"}).find("cannot read the file"),
            std::string::npos);
  SimOptions o = cli.sim;
  o.cluster.workers = 5;  // Simulate checks it too
  EXPECT_THROW(Simulate(o), FerryError);
}

TEST(PipelineCliTest, TheOutputCarriesTheShapeAndTheBound) {
  CliOptions cli = ParseCommandLine(
      {"--pipeline", "vgg16_pipeline", "--workers", "4", "--colocate", "--byte-scale", "0.05",
       "--iterations", "2", "--env", "FERRY_SCHEDULING_POLICY=trirace"},
      kWorkloads);
  const SimResult r = Simulate(cli.sim);
  const std::string json = FormatJson(cli, r, 1.0);
  for (const char* field : {"\"pipeline\":\"vgg16_pipeline\"", "\"stages\":2", "\"replicas\":2",
                            "\"micro_batches\":8", "\"activation_bytes\":80280", "\"stash\":true",
                            "\"bound_ms\":", "\"t_pipe_ms\":", "\"t_link_ms\":", "\"over_bound\":",
                            "\"policy\":\"trirace\"", "\"link_flows\":", "\"iterations_ms\":["}) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
  }
  const std::string text = FormatText(cli, r, 1.0);
  for (const char* line :
       {"2 stages x 2 replicas, 8 micro-batches", "bound ", "T_pipe", "sends "}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in " << text;
  }
}

}  // namespace
}  // namespace ferry::sim
