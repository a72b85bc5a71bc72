#pragma once

// Tune(): `ferry-sim --tune`: searches the scheduling settings for a workload and cluster by
// simulating each candidate. FERRY_AUTOTUNE searches partition sizes and credits on the
// running job, one candidate per few iterations; this searches before the job runs, and
// over the policies too.
//
//   TuneResult r = Tune(options, TuneOptions{});   // options: as for Simulate
//   r.ranked.front().env                           // the best settings, FERRY_* -> value
//
// Search, in two stages; each candidate runs over `seeds` seeds with `jitter` (the
// coefficient of variation of every compute time: a symmetric simulation is chaotic at
// scale, docs/simulation.md) and scores the median of its seeds' medians (a seed's mean
// iteration where a worker sat steps out, SimResult::mean_ms: its steps are then uneven):
//   1. every policy in `policies` with its defaults;
//   2. for the best `finalists` of them: every size (FERRY_PARTITION_BYTES from
//      `partition_bytes`, where 0 leaves it unset: partitions sized by the link,
//      FERRY_PARTITION_MS; FERRY_P3_SLICE_BYTES from `p3_slice_bytes` for p3) and, for the
//      policies with a credit (credit, usbyte, prophet), every FERRY_SCHEDULING_CREDIT in
//      `credits`;
//   3. the best of them with every FERRY_COMPRESSION in `compressions`;
//   4. the best without compression of each policy with every FERRY_BACKUP_WORKERS in
//      `backup_workers` (by default: 1 up to the number of slow workers, when the job has
//      some: SimOptions::worker_compute_scale, rotating_slow_factor), as
//      TuneResult::backup; a late worker catches up as SimOptions::catch_up says;
//   5. where the workers' links differ (ClusterSpec::Uneven), the best without compression
//      nor backup workers whose partitions are sized by time (no FERRY_PARTITION_BYTES, not
//      p3) with each way of cutting: today's one size (FERRY_PARTITION_PER_LINK=0), pieces
//      per link (=1), per layer (FERRY_DECOMPOSE=per-layer) and both, as
//      TuneResult::links in that order. Stages 1 to 4 then leave both knobs at Ferry's
//      defaults (both off).
// Every candidate keeps the options' own env (--env) except the knobs it sets. The
// baseline is the options' env as given (Ferry's defaults unless --env says otherwise).
// Deterministic, as Simulate is.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/cluster_sim.h"

namespace ferry::sim {

struct TuneOptions {
  std::vector<std::string> policies = {"credit", "usbyte", "prophet", "p3", "fifo", "mercury"};
  std::vector<int64_t> partition_bytes = {0, 262144, 1048576, 4194304};
  std::vector<int64_t> p3_slice_bytes = {16384, 65536, 262144};
  std::vector<int> credits = {2, 4, 8, 16};
  int seeds = 3;
  double jitter = 0.02;
  int finalists = 2;
  // Stage 3: the best settings of stages 1-2 with each of these FERRY_COMPRESSION values
  // ("none" among them); empty: compression is not searched. Compression changes what the
  // servers sum (docs/compression.md): --tune prints the best settings without it too.
  std::vector<std::string> compressions = {"none", "onebit+ef", "topk:0.01+ef",
                                           "randomk:0.01+ef"};
  // Stage 4: the FERRY_BACKUP_WORKERS values b >= 1 to try (each capped at workers - 1);
  // unset: 1 up to the number of workers whose compute scale is > 1 (and one more for a
  // rotating straggler), none without slow workers; empty: not searched.
  // Backup workers change what a step averages (server/stragglers.h): --tune prints the
  // best settings without them too.
  std::optional<std::vector<int>> backup_workers;
};

struct Candidate {
  std::map<std::string, std::string> env;  // the knobs this candidate sets
  std::vector<double> seed_medians_ms;     // by seed (or means: Tune)
  double median_ms = 0;                    // of seed_medians_ms
  double min_ms = 0;
  double max_ms = 0;
  // Why a seed's job stopped before its end (with backup workers catching up: every worker
  // sat out a round, or one sat out a compressed round), or ""; its steps are then infinite.
  std::string failure;
};

struct TuneResult {
  Candidate baseline;
  std::vector<Candidate> ranked;  // every candidate, fastest first (ties: search order)
  // Stage 4, when searched: the best without compression (b = 0), then for each b, in
  // order, the fastest with it.
  std::vector<Candidate> backup;
  // Stage 5, when the links are uneven: today's sizing, per link, per layer, both.
  std::vector<Candidate> links;
  int simulations = 0;
};

// Stage 5's knobs.
inline constexpr const char* kPerLinkKnob = "FERRY_PARTITION_PER_LINK";
inline constexpr const char* kDecomposeKnob = "FERRY_DECOMPOSE";
// Stage 5's label for a candidate: "today", "per-link", "per-layer" or "per-link+per-layer"
// (per link unless FERRY_PARTITION_PER_LINK=0; per layer where FERRY_DECOMPOSE=per-layer).
std::string LinkModeOf(const Candidate& c);

// Stage 4's values of b for `options` (TuneOptions::backup_workers).
std::vector<int> BackupCandidates(const SimOptions& options, const TuneOptions& tune);
// The knob's value in a candidate's settings (0 when unset).
int BackupWorkersOf(const Candidate& c);

// `progress`, if set, is called after each candidate (for a long search's log).
TuneResult Tune(const SimOptions& options, const TuneOptions& tune,
                const std::function<void(const Candidate&)>& progress = nullptr);

// The candidates' settings as `FERRY_X=V FERRY_Y=W` (sorted by name).
std::string DescribeEnv(const std::map<std::string, std::string>& env);

}  // namespace ferry::sim
