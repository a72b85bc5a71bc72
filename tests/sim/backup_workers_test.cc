// Backup workers in ferry-sim (FERRY_BACKUP_WORKERS; sim/backup_rounds.h): the round rules
// on their own (sitting out too), whole jobs with a worker slow on every step (catching up
// by sitting steps out, and not), with a straggler that moves and with even workers, --tune's
// stage, and the refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "common/util/error.h"
#include "sim/backup_rounds.h"
#include "sim/cli.h"
#include "sim/cluster_sim.h"
#include "sim/tune.h"
#include "sim/tune_report.h"

namespace ferry::sim {
namespace {

const std::string kWorkloads = std::string(FERRY_SOURCE_DIR) + "/bench/workloads";

// BackupRounds keeps the workers' pointers and never follows them: four distinct addresses.
char fake_workers[4];
SimSender* W(int rank) { return reinterpret_cast<SimSender*>(&fake_workers[rank]); }

// Worker `rank`'s push of key 7's round `round`, frame `frame` of `frames`.
SubPush Push(int rank, uint32_t round, uint32_t frame = 0, uint32_t frames = 1) {
  SubPush p;
  p.cookie = 100 * round + static_cast<uint64_t>(rank);
  p.key = 7;
  p.frame = frame;
  p.frames = frames;
  p.bytes = 1000 + frame;
  p.round = round;
  return p;
}

// Worker `rank`'s sit-out of key 7's round `round` (header only, of the key's `frames`).
SubPush SitOut(int rank, uint32_t round, uint32_t frames = 1) {
  SubPush p = Push(rank, round, 0, frames);
  p.bytes = 0;
  p.sit_out = true;
  return p;
}

std::vector<int> Ranks(const std::vector<BackupRounds::Reply>& to) {
  std::vector<int> ranks;
  for (const BackupRounds::Reply& r : to) ranks.push_back(static_cast<int>(r.cookie % 100));
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

TEST(BackupRoundsTest, ARoundClosesWithTheFirstArrivalsAndALateWorkerIsOneRoundBehindAtMost) {
  BackupRounds rounds(4, 1);
  using Frames = std::vector<uint32_t>;
  uint64_t bytes = 0;
  // Round 0: the first three pushes close it; the first is adopted, the others added.
  EXPECT_TRUE(rounds.Take(Push(0, 0), W(0), 0).adopted);
  EXPECT_EQ(rounds.Take(Push(1, 0), W(1), 1).complete, Frames{});
  BackupRounds::Taken t = rounds.Take(Push(2, 0), W(2), 2);
  EXPECT_TRUE(t.added);
  EXPECT_FALSE(t.adopted);
  EXPECT_EQ(t.complete, Frames{0});
  EXPECT_EQ(Ranks(rounds.Send(7, 0, &bytes)), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(bytes, 1000u);
  // Round 1: worker 3 was left out of round 0 and has not pushed it: every worker is waited
  // for, the three pushes close nothing.
  for (int r = 0; r < 3; ++r) EXPECT_EQ(rounds.Take(Push(r, 1), W(r), r).complete, Frames{});
  // Its push of round 0: dropped, answered at once with round 0's sum, and round 1 closes.
  t = rounds.Take(Push(3, 0), W(3), 3);
  EXPECT_FALSE(t.added);
  ASSERT_EQ(t.answers.size(), 1u);
  EXPECT_FALSE(t.answers[0].duplicate);
  EXPECT_EQ(t.complete, Frames{0});
  EXPECT_EQ(Ranks(rounds.Send(7, 0, &bytes)), (std::vector<int>{0, 1, 2}));
  // Round 2: worker 3's push of round 1 is answered at once; then it pushes round 2 first
  // and is a contributor, and worker 2, the fourth, is left out.
  t = rounds.Take(Push(3, 1), W(3), 3);
  EXPECT_EQ(t.answers.size(), 1u);
  EXPECT_EQ(t.complete, Frames{});
  EXPECT_TRUE(rounds.Take(Push(3, 2), W(3), 3).adopted);
  rounds.Take(Push(0, 2), W(0), 0);
  EXPECT_EQ(rounds.Take(Push(1, 2), W(1), 1).complete, Frames{0});
  EXPECT_EQ(Ranks(rounds.Send(7, 0, &bytes)), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(rounds.late_pushes(), (std::vector<uint64_t>{0, 0, 0, 2}));
}

TEST(BackupRoundsTest, ALatePushOfAnOpenRoundGetsTheFramesSentAndTheRestAsTheyGo) {
  BackupRounds rounds(4, 1);
  using Frames = std::vector<uint32_t>;
  uint64_t bytes = 0;
  // Frame 0 of the first three closes the round; frame 1 has no push yet.
  rounds.Take(Push(0, 0, 0, 2), W(0), 0);
  rounds.Take(Push(1, 0, 0, 2), W(1), 1);
  EXPECT_EQ(rounds.Take(Push(2, 0, 0, 2), W(2), 2).complete, Frames{0});
  rounds.Send(7, 0, &bytes);
  // Worker 3's first frame: dropped, and frame 0's sum goes to it at once.
  BackupRounds::Taken t = rounds.Take(Push(3, 0, 0, 2), W(3), 3);
  EXPECT_FALSE(t.added);
  ASSERT_EQ(t.answers.size(), 1u);
  EXPECT_EQ(t.answers[0].frame, 0u);
  EXPECT_EQ(t.answers[0].bytes, 1000u);
  // Frame 1 completes with the contributors' frames (worker 3's is never waited for), and
  // goes to worker 3 too.
  rounds.Take(Push(0, 0, 1, 2), W(0), 0);
  rounds.Take(Push(1, 0, 1, 2), W(1), 1);
  EXPECT_EQ(rounds.Take(Push(2, 0, 1, 2), W(2), 2).complete, Frames{1});
  EXPECT_EQ(Ranks(rounds.Send(7, 1, &bytes)), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(bytes, 1001u);
  // Worker 3's frame 1 comes after the round ended: its sum again (it has it: a duplicate,
  // bytes on its link only).
  t = rounds.Take(Push(3, 0, 1, 2), W(3), 3);
  ASSERT_EQ(t.answers.size(), 1u);
  EXPECT_TRUE(t.answers[0].duplicate);
  // It was answered, so it is not behind: round 1 closes with the first three.
  rounds.Take(Push(0, 1, 0, 2), W(0), 0);
  rounds.Take(Push(1, 1, 0, 2), W(1), 1);
  EXPECT_EQ(rounds.Take(Push(3, 1, 0, 2), W(3), 3).complete, Frames{0});
  EXPECT_EQ(rounds.late_pushes(), (std::vector<uint64_t>{0, 0, 0, 1}));
}

TEST(BackupRoundsTest, AWorkerBehindInFramesHoldsTheNextRoundUntilItsLastFrameIsIn) {
  // b = 3 of 4: a round closes with its first push, unless a worker is behind.
  BackupRounds rounds(4, 3);
  using Frames = std::vector<uint32_t>;
  uint64_t bytes = 0;
  rounds.Take(Push(0, 0, 0, 2), W(0), 0);
  rounds.Take(Push(0, 0, 1, 2), W(0), 0);
  rounds.Send(7, 0, &bytes);
  rounds.Send(7, 1, &bytes);
  // Round 1: worker 0 pushes both frames; workers 1-3 are behind, nothing closes.
  for (uint32_t f = 0; f < 2; ++f) {
    EXPECT_EQ(rounds.Take(Push(0, 1, f, 2), W(0), 0).complete, Frames{});
  }
  // Their first frames of round 0 are answered, but they are behind until their last frame
  // is in: had round 1 closed and gone out, their second frames would find no sum.
  for (int r = 1; r < 4; ++r) {
    BackupRounds::Taken t = rounds.Take(Push(r, 0, 0, 2), W(r), r);
    ASSERT_EQ(t.answers.size(), 1u) << r;
    EXPECT_FALSE(t.answers[0].duplicate);
    EXPECT_EQ(t.complete, Frames{}) << r;
  }
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(rounds.Take(Push(r, 0, 1, 2), W(r), r).complete, Frames{});
  }
  BackupRounds::Taken t = rounds.Take(Push(3, 0, 1, 2), W(3), 3);
  ASSERT_EQ(t.answers.size(), 1u);
  EXPECT_EQ(t.answers[0].frame, 1u);
  EXPECT_FALSE(t.answers[0].duplicate);
  EXPECT_EQ(t.complete, (Frames{0, 1}));
  EXPECT_EQ(rounds.late_pushes(), (std::vector<uint64_t>{0, 1, 1, 1}));
}

// The receivers of a sum whose push came late, by rank.
std::vector<int> LateRanks(const std::vector<BackupRounds::Reply>& to) {
  std::vector<int> ranks;
  for (const BackupRounds::Reply& r : to) {
    if (r.late) ranks.push_back(static_cast<int>(r.cookie % 100));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

TEST(BackupRoundsTest, ASitOutIsNotWaitedForAndGetsTheSumWithoutCountingAsLate) {
  BackupRounds rounds(4, 1);
  using Frames = std::vector<uint32_t>;
  uint64_t bytes = 0;
  // Round 0: workers 2 and 3 sit out (the first opens it); workers 0 and 1 are every worker
  // that does not, so their two pushes close it, below the 3 that b = 1 needs otherwise.
  BackupRounds::Taken t = rounds.Take(SitOut(2, 0), W(2), 2);
  EXPECT_FALSE(t.added);
  EXPECT_TRUE(t.answers.empty());
  rounds.Take(SitOut(3, 0), W(3), 3);
  EXPECT_EQ(rounds.Take(Push(0, 0), W(0), 0).complete, Frames{});
  EXPECT_EQ(rounds.Take(Push(1, 0), W(1), 1).complete, Frames{0});
  std::vector<BackupRounds::Reply> to = rounds.Send(7, 0, &bytes);
  EXPECT_EQ(Ranks(to), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(LateRanks(to), std::vector<int>{}) << "a sit-out is no late push";
  EXPECT_EQ(bytes, 1000u);
  // Round 1: one sit-out, and the three pushes of b = 1 close it.
  rounds.Take(Push(0, 1), W(0), 0);
  rounds.Take(SitOut(3, 1), W(3), 3);
  rounds.Take(Push(1, 1), W(1), 1);
  EXPECT_EQ(rounds.Take(Push(2, 1), W(2), 2).complete, Frames{0});
  to = rounds.Send(7, 0, &bytes);
  EXPECT_EQ(Ranks(to), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(LateRanks(to), std::vector<int>{});
  EXPECT_EQ(rounds.late_pushes(), (std::vector<uint64_t>{0, 0, 0, 0}));
}

TEST(BackupRoundsTest, ASitOutAfterTheRoundClosedOrMovedOnIsAnsweredAndLetsTheNextRoundClose) {
  BackupRounds rounds(4, 1);
  using Frames = std::vector<uint32_t>;
  uint64_t bytes = 0;
  // Round 0 in two frames closes with workers 0-2; frame 0 goes out, then worker 3 sits it
  // out: frame 0 at once, frame 1 when it goes, neither as late.
  for (int r = 0; r < 3; ++r) rounds.Take(Push(r, 0, 0, 2), W(r), r);
  rounds.Send(7, 0, &bytes);
  BackupRounds::Taken t = rounds.Take(SitOut(3, 0, 2), W(3), 3);
  ASSERT_EQ(t.answers.size(), 1u);
  EXPECT_EQ(t.answers[0].frame, 0u);
  EXPECT_EQ(t.answers[0].bytes, 1000u);
  EXPECT_FALSE(t.answers[0].late);
  for (int r = 0; r < 2; ++r) rounds.Take(Push(r, 0, 1, 2), W(r), r);
  EXPECT_EQ(rounds.Take(Push(2, 0, 1, 2), W(2), 2).complete, Frames{1});
  std::vector<BackupRounds::Reply> to = rounds.Send(7, 1, &bytes);
  EXPECT_EQ(Ranks(to), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(LateRanks(to), std::vector<int>{});
  // It sat round 0 out while it was open: not behind, round 1 closes with the first three.
  // Worker 3 is left out of round 1 and sits round 1 out only once the key moved on.
  for (int r = 0; r < 2; ++r) rounds.Take(Push(r, 1, 0, 2), W(r), r);
  EXPECT_EQ(rounds.Take(Push(2, 1, 0, 2), W(2), 2).complete, Frames{0});
  rounds.Send(7, 0, &bytes);
  for (int r = 0; r < 3; ++r) rounds.Take(Push(r, 1, 1, 2), W(r), r);
  rounds.Send(7, 1, &bytes);
  // Round 2: worker 3 is behind (left out of round 1, not pushed it): three pushes close
  // nothing.
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(rounds.Take(Push(r, 2, 0, 2), W(r), r).complete, Frames{});
  }
  // Its sit-out of round 1: both frames of round 1 at once, not late; round 2 closes.
  t = rounds.Take(SitOut(3, 1, 2), W(3), 3);
  ASSERT_EQ(t.answers.size(), 2u);
  EXPECT_EQ(t.answers[1].frame, 1u);
  EXPECT_EQ(t.answers[1].bytes, 1001u);
  EXPECT_FALSE(t.answers[0].late || t.answers[1].late || t.answers[0].duplicate);
  EXPECT_EQ(t.complete, Frames{0});
  // A late push, by contrast, is answered as late.
  t = rounds.Take(Push(3, 2, 0, 2), W(3), 3);
  ASSERT_EQ(t.answers.size(), 0u);  // frame 0 not sent yet: it goes with the others
  to = rounds.Send(7, 0, &bytes);
  EXPECT_EQ(LateRanks(to), std::vector<int>{3});
  EXPECT_EQ(rounds.late_pushes(), (std::vector<uint64_t>{0, 0, 0, 1}));
}

// VGG-16 on 4 colocated hosts at 1 Gbit/s, its bytes scaled by `byte_scale` (0.01:
// compute-bound, 0.1: compute about communication, 1: communication-bound).
SimOptions Job(double byte_scale) {
  SimOptions o;
  o.workload = ScaleWorkload(LoadWorkload(kWorkloads + "/vgg16_layers.csv"), 1, byte_scale);
  o.cluster.workers = 4;
  o.cluster.colocate = true;
  o.cluster.servers = 0;
  o.warmup = 2;
  o.iterations = 8;
  return o;
}

SimOptions WithBackups(SimOptions o, int b) {
  o.env["FERRY_BACKUP_WORKERS"] = std::to_string(b);
  return o;
}

// One iteration's compute, ms.
double ComputeMs(const Workload& w) {
  double ms = 0;
  for (const Layer& l : w.layers) ms += l.fwd_ms + l.bwd_ms;
  return ms;
}

// Worker `w`'s timed iterations, ms, together.
double WorkerMs(const SimOptions& o, const SimResult& r, int w) {
  const auto from = r.iteration_ms.begin() + w * o.iterations;
  return std::accumulate(from, from + o.iterations, 0.0);
}

TEST(BackupWorkersTest, OffTheJobIsTheSameBitForBit) {
  const SimOptions o = Job(0.1);
  const SimResult plain = Simulate(o);
  SimOptions off = WithBackups(o, 0);
  off.worker_compute_scale = {{2, 1.0}};
  off.rotating_slow_factor = 1;
  const SimResult same = Simulate(off);
  EXPECT_EQ(same.iteration_ms, plain.iteration_ms);
  EXPECT_EQ(same.messages, plain.messages);
  EXPECT_TRUE(same.late_pushes.empty());
}

TEST(BackupWorkersTest, WithoutCatchingUpAWorkerSlowOnEveryStepSetsThePace) {
  // Compute-bound, worker 3 twice as slow, --catch-up off. It computes every step, and a
  // late worker is at most one round behind, so no worker outruns its compute: b = 1 saves
  // it only the wait for the others' pushes, which compute-bound costs nothing.
  SimOptions o = Job(0.01);
  o.worker_compute_scale = {{3, 2.0}};
  o.catch_up = CatchUp::kOff;
  const double slow_ms = 2 * ComputeMs(o.workload);
  const SimResult none = Simulate(o);
  const SimResult one = Simulate(WithBackups(o, 1));
  EXPECT_GE(none.median_ms, slow_ms);
  EXPECT_NEAR(one.median_ms, none.median_ms, 1e-3 * none.median_ms);
  // Over its timed iterations every worker took at least all but one of the slow one's.
  for (int w = 0; w < 4; ++w) EXPECT_GE(WorkerMs(o, one, w), (o.iterations - 1) * slow_ms) << w;
  // Only worker 3 was ever late, and nobody sat a step out.
  ASSERT_EQ(one.late_pushes.size(), 4u);
  EXPECT_GT(one.late_pushes[3], 0u);
  EXPECT_EQ(one.late_pushes[0] + one.late_pushes[1] + one.late_pushes[2], 0u);
  EXPECT_EQ(one.sat_out, (std::vector<int>{0, 0, 0, 0}));
}

TEST(BackupWorkersTest, AWorkerSlowOnEveryStepCatchesUpBySittingStepsOut) {
  // The same job catching up (both rules): worker 3's pushes of a step all come late, so it
  // sits out the steps that follow, in runs that grow while the step it computes after one
  // is still late. Every step it sits out costs it no compute, so the others are no longer
  // held to its pace: the job's step falls from its 2 (F + B) to not far above F + B.
  const int steps = 10;  // Job's warm-up and timed iterations
  for (CatchUp rule : {CatchUp::kMostLayers, CatchUp::kAllPartitions}) {
    SimOptions o = Job(0.01);
    o.worker_compute_scale = {{3, 2.0}};
    o.catch_up = rule;
    const double compute_ms = ComputeMs(o.workload);
    const SimResult none = Simulate(o);
    const SimResult one = Simulate(WithBackups(o, 1));
    EXPECT_GE(none.mean_ms, 2 * compute_ms) << CatchUpName(rule);
    EXPECT_LT(one.mean_ms, 0.6 * none.mean_ms) << CatchUpName(rule);
    EXPECT_GE(one.mean_ms, compute_ms) << CatchUpName(rule);
    // It computes a step after each run: at most every other step sat out at first, and
    // never all of them.
    ASSERT_EQ(one.sat_out.size(), 4u);
    EXPECT_GE(one.sat_out[3], steps / 2 - 1) << CatchUpName(rule);
    EXPECT_LT(one.sat_out[3], steps) << CatchUpName(rule);
    EXPECT_EQ(one.sat_out[0] + one.sat_out[1] + one.sat_out[2], 0) << CatchUpName(rule);
    // Two such workers with b = 2 sit out together; the two others close every round.
    SimOptions two = WithBackups(o, 2);
    two.worker_compute_scale = {{2, 2.0}, {3, 2.0}};
    const SimResult both = Simulate(two);
    EXPECT_GE(both.sat_out.at(2), steps / 2 - 1) << CatchUpName(rule);
    EXPECT_GE(both.sat_out.at(3), steps / 2 - 1) << CatchUpName(rule);
    EXPECT_LT(both.mean_ms, 0.65 * none.mean_ms) << CatchUpName(rule);
  }
}

TEST(BackupWorkersTest, AStragglerThatMovesIsWhereBackupsPay) {
  // Compute-bound, in iteration i worker i mod 4 twice as slow: without backup workers
  // every step waits for that step's straggler; with one, the others go on.
  SimOptions o = Job(0.01);
  o.rotating_slow_factor = 2;
  const double compute_ms = ComputeMs(o.workload);
  const SimResult none = Simulate(o);
  EXPECT_GE(none.median_ms, 2 * compute_ms);
  // Without catching up, each straggler is late in its turn.
  SimOptions off = WithBackups(o, 1);
  off.catch_up = CatchUp::kOff;
  const SimResult late = Simulate(off);
  EXPECT_LT(late.mean_ms, 0.9 * none.mean_ms);
  EXPECT_GE(late.mean_ms, compute_ms);
  ASSERT_EQ(late.late_pushes.size(), 4u);
  for (uint64_t n : late.late_pushes) EXPECT_GT(n, 0u);
  // Catching up, a straggler that was late sits out the next step, where that step's
  // straggler is then waited for (three workers push, none to spare): it pays as much.
  for (CatchUp rule : {CatchUp::kMostLayers, CatchUp::kAllPartitions}) {
    SimOptions on = WithBackups(o, 1);
    on.catch_up = rule;
    const SimResult one = Simulate(on);
    EXPECT_LT(one.mean_ms, 0.9 * none.mean_ms) << CatchUpName(rule);
    EXPECT_NEAR(one.mean_ms, late.mean_ms, 0.02 * late.mean_ms) << CatchUpName(rule);
    int sat_out = 0;
    for (int n : one.sat_out) sat_out += n;
    EXPECT_GT(sat_out, 0) << CatchUpName(rule);
    EXPECT_LE(sat_out, (o.warmup + o.iterations) / 2) << CatchUpName(rule);
  }
}

TEST(BackupWorkersTest, EvenWorkersAreNoSlowerWithBackups) {
  // The model's prediction for this job, compute-bound to communication-bound: closing each
  // round with the first three pushes never slows it (with even workers the fourth comes
  // last by the network's turns only; its sum then goes to it alone). Each worker is left
  // out of some partitions, none of every one: under --catch-up all-partitions nobody sits
  // a step out.
  for (double byte_scale : {0.01, 0.1, 1.0}) {
    const SimOptions o = Job(byte_scale);
    const SimResult none = Simulate(o);
    for (CatchUp rule : {CatchUp::kOff, CatchUp::kAllPartitions}) {
      SimOptions b1 = WithBackups(o, 1);
      b1.catch_up = rule;
      const SimResult one = Simulate(b1);
      EXPECT_LE(one.median_ms, none.median_ms) << byte_scale << " " << CatchUpName(rule);
      EXPECT_GE(one.median_ms, ComputeMs(o.workload)) << byte_scale << " " << CatchUpName(rule);
      EXPECT_EQ(one.sat_out, (std::vector<int>{0, 0, 0, 0})) << byte_scale;
      uint64_t late = 0;
      for (uint64_t n : one.late_pushes) late += n;
      EXPECT_GT(late, 0u) << byte_scale;
    }
    // ferry-train-sim's rule looks at layers: a worker last to a few partitions of each of
    // most layers sits out too. No worker outruns its compute, and the step stays within 1%.
    SimOptions m = WithBackups(o, 1);
    m.catch_up = CatchUp::kMostLayers;
    const SimResult most = Simulate(m);
    EXPECT_GE(most.mean_ms, ComputeMs(o.workload)) << byte_scale;
    EXPECT_LE(most.mean_ms, 1.01 * none.mean_ms) << byte_scale;
  }
}

TEST(BackupWorkersTest, EveryWorkerSittingOutARoundStopsTheJobSayingSo) {
  // Two even workers with b = 1: each round closes with the first push, so each worker is
  // left out of half the partitions; under ferry-train-sim's rule both are late for most
  // layers and both sit the next step out. That round has nobody to sum, on a real cluster
  // too. Under --catch-up all-partitions at most b = 1 sits a step out.
  SimOptions o = WithBackups(Job(0.3), 1);
  o.cluster.workers = 2;
  o.catch_up = CatchUp::kMostLayers;
  try {
    Simulate(o);
    ADD_FAILURE() << "no error";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("every worker sat out round 1 of layer"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--catch-up most-layers"), std::string::npos)
        << e.what();
  }
  o.catch_up = CatchUp::kAllPartitions;
  const SimResult r = Simulate(o);
  ASSERT_EQ(r.sat_out.size(), 2u);
  EXPECT_EQ(r.sat_out[0] + r.sat_out[1], 0);
}

TEST(BackupWorkersTest, ASitOutInFramesHoldsNoCreditForItsSums) {
  // A sit-out of a partition cut in frames is one header-only message: its acknowledgement
  // returns all its credit. (Were the frames after the first to hold theirs until their
  // sums, a worker's credit could fill with sit-outs of rounds that wait for its sit-outs
  // queued behind them; this job, found by a random search, stopped so.)
  SimOptions o;
  o.workload = ScaleWorkload(LoadWorkload(kWorkloads + "/bert_base_layers.csv"), 1, 0.3);
  o.cluster.workers = 8;
  o.cluster.colocate = true;
  o.cluster.servers = 0;
  o.warmup = 1;
  o.iterations = 6;
  o.catch_up = CatchUp::kMostLayers;  // the rule under which the search found it
  o.seed = 64;
  o.model.compute_jitter = 0.05;
  o.model.network = NetworkModel::kFifo;
  o.rotating_slow_factor = 2;
  o.env["FERRY_FRAME_BYTES"] = "65536";
  o.env["FERRY_SCHEDULING_POLICY"] = "prophet";
  const SimResult r = Simulate(WithBackups(o, 3));
  int sat_out = 0;
  for (int n : r.sat_out) sat_out += n;
  EXPECT_GT(sat_out, 0);
}

// Runs `f`, which must throw FerryError naming `name`.
template <typename F>
void ExpectRefusedNaming(F f, const std::string& name, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << what << ": " << e.what();
  }
}

TEST(BackupWorkersTest, BadValuesAreRefusedNamingTheKnobOrFlag) {
  for (const char* bad : {"4", "-1", "x", "1.5"}) {
    SimOptions o = Job(0.01);
    o.env["FERRY_BACKUP_WORKERS"] = bad;
    ExpectRefusedNaming([&] { Simulate(o); }, "FERRY_BACKUP_WORKERS", bad);
  }
  SimOptions one = Job(0.01);
  one.cluster.workers = 1;
  ExpectRefusedNaming([&] { Simulate(WithBackups(one, 1)); }, "FERRY_BACKUP_WORKERS", "1 of 1");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--workers", "4", "--worker-compute-scale", "4:2"},
                                             {"--worker-compute-scale", "1:0"},
                                             {"--worker-compute-scale", "1"},
                                             {"--worker-compute-scale", "x:2"},
                                             {"--rotating-slow-factor", "0"},
                                             {"--tune-backup-workers", "-1"}}) {
    ExpectRefusedNaming([&] { ParseCommandLine(args, kWorkloads); }, args[args.size() - 2],
                        args.back());
  }
  SimOptions far = Job(0.01);
  far.worker_compute_scale = {{4, 2.0}};
  ExpectRefusedNaming([&] { Simulate(far); }, "--worker-compute-scale", "rank 4 of 4");
}

TEST(BackupWorkersTest, TheFlagsBecomeOptions) {
  const CliOptions o =
      ParseCommandLine({"--workload", "vgg16", "--workers", "4", "--worker-compute-scale",
                        "3:2,1:1.5", "--rotating-slow-factor", "3", "--tune-backup-workers", "1,2"},
                       kWorkloads);
  EXPECT_EQ(o.sim.worker_compute_scale, (std::map<int, double>{{1, 1.5}, {3, 2.0}}));
  EXPECT_EQ(o.sim.rotating_slow_factor, 3);
  EXPECT_EQ(o.tune_options.backup_workers, (std::vector<int>{1, 2}));
  EXPECT_EQ(o.sim.catch_up, CatchUp::kAllPartitions);
  for (CatchUp c : {CatchUp::kMostLayers, CatchUp::kAllPartitions, CatchUp::kOff}) {
    EXPECT_EQ(ParseCommandLine({"--catch-up", CatchUpName(c)}, kWorkloads).sim.catch_up, c);
  }
  ExpectRefusedNaming([&] { ParseCommandLine({"--catch-up", "1"}, kWorkloads); }, "--catch-up",
                      "1");
  ExpectRefusedNaming(
      [&] { ParseCommandLine({"--pipeline", "any", "--catch-up", "off"}, kWorkloads); },
      "--catch-up", "with --pipeline");
}

TuneOptions OnePolicy() {
  TuneOptions t;
  t.policies = {"credit"};
  t.partition_bytes = {0};
  t.credits = {4};
  t.compressions = {};
  t.seeds = 2;
  return t;
}

SimOptions ShortJob(double byte_scale) {
  SimOptions o = Job(byte_scale);
  o.warmup = 1;
  o.iterations = 4;
  return o;
}

TEST(BackupWorkersTest, TuneTriesThemWhereAWorkerIsSlowAndSaysWhetherTheyPay) {
  CliOptions cli;
  cli.sim = ShortJob(0.01);
  cli.tune_options = OnePolicy();
  // Even workers: not searched unless asked for.
  EXPECT_TRUE(Tune(cli.sim, cli.tune_options).backup.empty());
  EXPECT_EQ(BackupCandidates(cli.sim, cli.tune_options), std::vector<int>{});
  // A straggler that moves: b = 1 beside b = 0, and it pays.
  cli.sim.rotating_slow_factor = 2;
  TuneResult r = Tune(cli.sim, cli.tune_options);
  ASSERT_EQ(r.backup.size(), 2u);
  EXPECT_EQ(BackupWorkersOf(r.backup[0]), 0);
  EXPECT_EQ(r.backup[1].env.at("FERRY_BACKUP_WORKERS"), "1");
  EXPECT_EQ(r.backup[1].env.size(), r.backup[0].env.size() + 1);
  EXPECT_EQ(BackupWorkersOf(r.ranked.front()), 1);
  EXPECT_TRUE(BackupPays(r));
  EXPECT_EQ(BackupWorkersOf(Recommended(r)), 1);
  std::string text = FormatTuneText(cli, r, 1.0);
  EXPECT_NE(text.find("backup workers pay: b=1 "), std::string::npos) << text;
  EXPECT_NE(text.find("best settings without backup workers"), std::string::npos) << text;
  EXPECT_NE(FormatTuneJson(cli, r, 1.0).find("\"backup\":[{\"env\":"), std::string::npos);
  // A worker slow on every step: b = 1 and 2 tried for two of them. Catching up (the
  // default), b = 1 pays for one: the step is the mean, as the steps are uneven.
  cli.sim.rotating_slow_factor = 1;
  cli.sim.worker_compute_scale = {{2, 2.0}, {3, 2.0}};
  EXPECT_EQ(BackupCandidates(cli.sim, cli.tune_options), (std::vector<int>{1, 2}));
  cli.sim.worker_compute_scale = {{3, 2.0}};
  r = Tune(cli.sim, cli.tune_options);
  text = FormatTuneText(cli, r, 1.0);
  EXPECT_TRUE(BackupPays(r)) << text;
  EXPECT_EQ(BackupWorkersOf(Recommended(r)), 1);
  EXPECT_NE(text.find("a late worker catches up, --catch-up all-partitions"), std::string::npos)
      << text;
  EXPECT_NE(text.find("backup workers pay: b=1 "), std::string::npos) << text;
  EXPECT_LT(r.backup[1].max_ms, 0.8 * r.backup[0].min_ms) << text;
  // Without catching up they do not pay: the slow worker sets the pace.
  cli.sim.catch_up = CatchUp::kOff;
  r = Tune(cli.sim, cli.tune_options);
  text = FormatTuneText(cli, r, 1.0);
  EXPECT_NE(text.find("--catch-up off"), std::string::npos) << text;
  EXPECT_NE(text.find("backup workers do not pay here"), std::string::npos) << text;
  EXPECT_NE(text.find("sets the pace"), std::string::npos) << text;
  // However the seeds rank them, settings with backup workers that do not pay are not
  // recommended.
  EXPECT_FALSE(BackupPays(r));
  EXPECT_EQ(BackupWorkersOf(Recommended(r)), 0);
  const std::string best = text.substr(text.find("best settings:\n"));
  EXPECT_EQ(best.find("FERRY_BACKUP_WORKERS"), std::string::npos) << text;
  EXPECT_NE(FormatTuneJson(cli, r, 1.0).find("\"backup_pays\":false"), std::string::npos);
  // Asked for, capped at workers - 1; 0 is no candidate.
  cli.tune_options.backup_workers = std::vector<int>{0, 9};
  EXPECT_EQ(BackupCandidates(cli.sim, cli.tune_options), std::vector<int>{3});
}

TEST(BackupWorkersTest, TuneSaysWhereBackupWorkersStopTheJob) {
  // Two even workers, b = 1 asked for: under --catch-up most-layers every worker sits the
  // same round out (EveryWorkerSittingOutARoundStopsTheJobSayingSo).
  CliOptions cli;
  cli.sim = ShortJob(0.3);
  cli.sim.cluster.workers = 2;
  cli.sim.catch_up = CatchUp::kMostLayers;
  cli.tune_options = OnePolicy();
  cli.tune_options.backup_workers = std::vector<int>{1};
  const TuneResult r = Tune(cli.sim, cli.tune_options);
  ASSERT_EQ(r.backup.size(), 2u);
  EXPECT_NE(r.backup[1].failure.find("every worker sat out"), std::string::npos);
  EXPECT_FALSE(BackupPays(r));
  EXPECT_EQ(BackupWorkersOf(Recommended(r)), 0);
  EXPECT_EQ(BackupWorkersOf(r.ranked.back()), 1);
  const std::string text = FormatTuneText(cli, r, 1.0);
  EXPECT_NE(text.find("with b=1 the job stops"), std::string::npos) << text;
  EXPECT_NE(FormatTuneJson(cli, r, 1.0).find("\"failure\":\"the simulated job stopped"),
            std::string::npos);
}

}  // namespace
}  // namespace ferry::sim
