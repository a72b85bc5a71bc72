#include "sim/tune.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry::sim {
namespace {

bool HasCredit(const std::string& policy) {
  return policy == "credit" || policy == "usbyte" || policy == "prophet" || policy == "trirace";
}

// A run's step: its median iteration, or, where a worker sat steps out (its steps and the
// others' are then short and long by turns), the mean.
double StepMs(const SimResult& r) {
  const bool sat_out = std::any_of(r.sat_out.begin(), r.sat_out.end(), [](int n) { return n > 0; });
  return sat_out ? r.mean_ms : r.median_ms;
}

// Runs `env` (over the options' own env) over the seeds.
Candidate Evaluate(const SimOptions& options, const TuneOptions& tune,
                   const std::map<std::string, std::string>& env, int* simulations) {
  Candidate c;
  c.env = env;
  for (int s = 0; s < tune.seeds; ++s) {
    SimOptions o = options;
    for (const auto& [name, value] : env) o.env[name] = value;
    o.seed = options.seed + static_cast<uint64_t>(s);
    o.model.compute_jitter = tune.jitter;
    (*simulations)++;
    try {
      c.seed_medians_ms.push_back(StepMs(Simulate(o)));
    } catch (const FerryError& e) {
      // The job stopped or failed (not the options: those throw kInvalidConfig).
      if (e.code() != ErrorCode::kInternal && e.code() != ErrorCode::kMismatch) throw;
      c.failure = e.what();
      c.seed_medians_ms.assign(1, std::numeric_limits<double>::infinity());
      break;
    }
  }
  std::vector<double> sorted = c.seed_medians_ms;
  std::sort(sorted.begin(), sorted.end());
  c.median_ms = sorted[sorted.size() / 2];
  c.min_ms = sorted.front();
  c.max_ms = sorted.back();
  return c;
}

// Stage 2's candidates for one policy.
std::vector<std::map<std::string, std::string>> Grid(const std::string& policy,
                                                     const TuneOptions& tune) {
  std::vector<std::map<std::string, std::string>> grid;
  const std::map<std::string, std::string> base = {{"FERRY_SCHEDULING_POLICY", policy}};
  std::vector<std::map<std::string, std::string>> sizes;
  if (policy == "p3") {
    for (int64_t b : tune.p3_slice_bytes) {
      auto e = base;
      e["FERRY_P3_SLICE_BYTES"] = std::to_string(b);
      sizes.push_back(e);
    }
  } else {
    for (int64_t b : tune.partition_bytes) {
      auto e = base;
      if (b > 0) e["FERRY_PARTITION_BYTES"] = std::to_string(b);
      sizes.push_back(e);
    }
  }
  for (const auto& e : sizes) {
    if (!HasCredit(policy)) {
      grid.push_back(e);
      continue;
    }
    for (int credit : tune.credits) {
      auto with = e;
      with["FERRY_SCHEDULING_CREDIT"] = std::to_string(credit);
      grid.push_back(with);
    }
  }
  return grid;
}

bool Compressed(const Candidate& c) {
  const auto it = c.env.find("FERRY_COMPRESSION");
  return it != c.env.end() && it->second != "none";
}

}  // namespace

std::vector<int> BackupCandidates(const SimOptions& options, const TuneOptions& tune) {
  const int most = options.cluster.workers - 1;
  std::vector<int> values;
  if (tune.backup_workers) {
    for (int b : *tune.backup_workers) values.push_back(std::min(b, most));
  } else {
    int slow = 0;
    for (const auto& [rank, factor] : options.worker_compute_scale) slow += factor > 1 ? 1 : 0;
    if (options.rotating_slow_factor > 1) slow++;  // one at a time
    for (int b = 1; b <= std::min(slow, most); ++b) values.push_back(b);
  }
  std::vector<int> kept;  // b >= 1, each once, in order
  for (int b : values) {
    if (b >= 1 && std::find(kept.begin(), kept.end(), b) == kept.end()) kept.push_back(b);
  }
  return kept;
}

int BackupWorkersOf(const Candidate& c) {
  const auto it = c.env.find("FERRY_BACKUP_WORKERS");
  return it == c.env.end() ? 0 : std::stoi(it->second);
}

TuneResult Tune(const SimOptions& options, const TuneOptions& tune,
                const std::function<void(const Candidate&)>& progress) {
  TuneResult r;
  // Knobs the search sets are the search's: drop them from the base, so a candidate that
  // leaves one unset (FERRY_PARTITION_BYTES 0: sized by the link) means Ferry's default.
  SimOptions base = options;
  for (const char* knob : {"FERRY_SCHEDULING_POLICY", "FERRY_PARTITION_BYTES",
                           "FERRY_P3_SLICE_BYTES", "FERRY_SCHEDULING_CREDIT",
                           "FERRY_COMPRESSION"}) {
    base.env.erase(knob);
  }
  const bool uneven = options.cluster.Uneven();
  if (uneven) {  // stage 5 searches them; until then Ferry's defaults
    base.env.erase(kPerLinkKnob);
    base.env.erase(kDecomposeKnob);
  }
  const std::vector<int> backups = BackupCandidates(options, tune);
  if (!backups.empty()) base.env.erase("FERRY_BACKUP_WORKERS");  // searched: 0 unless set
  std::set<std::map<std::string, std::string>> seen;
  std::vector<Candidate> all;
  auto run = [&](const std::map<std::string, std::string>& env) {
    if (!seen.insert(env).second) return;
    all.push_back(Evaluate(base, tune, env, &r.simulations));
    if (progress) progress(all.back());
  };
  r.baseline = Evaluate(options, tune, {}, &r.simulations);
  for (const std::string& policy : tune.policies) run({{"FERRY_SCHEDULING_POLICY", policy}});
  std::vector<Candidate> stage1 = all;
  std::stable_sort(stage1.begin(), stage1.end(),
                   [](const Candidate& a, const Candidate& b) { return a.median_ms < b.median_ms; });
  for (int i = 0; i < tune.finalists && i < static_cast<int>(stage1.size()); ++i) {
    for (const auto& env : Grid(stage1[i].env.at("FERRY_SCHEDULING_POLICY"), tune)) run(env);
  }
  auto faster = [](const Candidate& a, const Candidate& b) { return a.median_ms < b.median_ms; };
  if (!tune.compressions.empty() && !all.empty()) {
    const Candidate best = *std::min_element(all.begin(), all.end(), faster);
    for (const std::string& compression : tune.compressions) {
      auto env = best.env;
      env["FERRY_COMPRESSION"] = compression;
      run(env);
    }
  }
  // Stage 4: backup workers close only raw rounds, so from the best without compression.
  std::vector<Candidate> raw;
  for (const Candidate& c : all) {
    if (!Compressed(c)) raw.push_back(c);
  }
  if (!backups.empty() && !raw.empty()) {
    r.backup.push_back(*std::min_element(raw.begin(), raw.end(), faster));
    // Each b from the best raw settings of every policy: where a worker is slow on every
    // step, b = 0 sets them all at its pace, near ties, and which wins says little about
    // which schedules best once rounds go on without it.
    std::vector<Candidate> bases;
    for (const std::string& policy : tune.policies) {
      const Candidate* best = nullptr;
      for (const Candidate& c : raw) {
        const auto it = c.env.find("FERRY_SCHEDULING_POLICY");
        if (it != c.env.end() && it->second == policy && (!best || faster(c, *best))) best = &c;
      }
      if (best) bases.push_back(*best);
    }
    if (bases.empty()) bases.push_back(r.backup.front());
    for (int b : backups) {
      std::optional<Candidate> fastest;
      for (const Candidate& base : bases) {
        auto env = base.env;
        env["FERRY_BACKUP_WORKERS"] = std::to_string(b);
        run(env);
        const Candidate& c = *std::find_if(all.begin(), all.end(),
                                           [&](const Candidate& c) { return c.env == env; });
        if (!fastest || faster(c, *fastest)) fastest = c;
      }
      r.backup.push_back(*fastest);
    }
  }
  // Stage 5: from the best raw settings without backup workers whose partitions are sized
  // by time (where pieces per link apply).
  const Candidate* from = nullptr;
  for (const Candidate& c : all) {
    const auto policy = c.env.find("FERRY_SCHEDULING_POLICY");
    const bool timed = !c.env.count("FERRY_PARTITION_BYTES") &&
                       (policy == c.env.end() || policy->second != "p3");
    if (timed && !Compressed(c) && BackupWorkersOf(c) == 0 && (!from || faster(c, *from))) {
      from = &c;
    }
  }
  if (uneven && from) {
    const std::map<std::string, std::string> start = from->env;
    for (int mode = 0; mode < 4; ++mode) {  // today, per link, per layer, both
      auto env = start;
      env[kPerLinkKnob] = mode & 1 ? "1" : "0";
      env[kDecomposeKnob] = mode & 2 ? "per-layer" : "off";
      run(env);
      r.links.push_back(*std::find_if(all.begin(), all.end(),
                                      [&](const Candidate& c) { return c.env == env; }));
    }
  }
  r.ranked = all;
  std::stable_sort(r.ranked.begin(), r.ranked.end(), faster);
  return r;
}

std::string LinkModeOf(const Candidate& c) {
  const auto link = c.env.find(kPerLinkKnob);
  const auto layer = c.env.find(kDecomposeKnob);
  const bool per_link = link != c.env.end() && link->second == "1";  // off by default
  const bool per_layer = layer != c.env.end() && layer->second == "per-layer";
  if (per_link && per_layer) return "per-link+per-layer";
  return per_link ? "per-link" : per_layer ? "per-layer" : "today";
}

std::string DescribeEnv(const std::map<std::string, std::string>& env) {
  std::string out;
  for (const auto& [name, value] : env) out += StrCat(out.empty() ? "" : " ", name, "=", value);
  return out.empty() ? "(defaults)" : out;
}

}  // namespace ferry::sim
