#include "sim/tune.h"

#include <algorithm>
#include <set>

#include "common/util/strings.h"

namespace ferry::sim {
namespace {

bool HasCredit(const std::string& policy) {
  return policy == "credit" || policy == "usbyte" || policy == "prophet" || policy == "trirace";
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
    c.seed_medians_ms.push_back(Simulate(o).median_ms);
    (*simulations)++;
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

}  // namespace

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
  r.ranked = all;
  std::stable_sort(r.ranked.begin(), r.ranked.end(), faster);
  return r;
}

std::string DescribeEnv(const std::map<std::string, std::string>& env) {
  std::string out;
  for (const auto& [name, value] : env) out += StrCat(out.empty() ? "" : " ", name, "=", value);
  return out.empty() ? "(defaults)" : out;
}

}  // namespace ferry::sim
