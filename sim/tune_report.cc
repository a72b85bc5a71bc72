#include "sim/tune_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "common/util/strings.h"

namespace ferry::sim {
namespace {

std::string EnvJson(const std::map<std::string, std::string>& env) {
  std::string out = "{";
  for (const auto& [name, value] : env) {
    out += StrCat(out.size() > 1 ? "," : "", JsonQuote(name), ":", JsonQuote(value));
  }
  return out + "}";
}

std::string CandidateJson(const Candidate& c) {
  std::string seeds = "[";
  for (double ms : c.seed_medians_ms) {
    seeds += StrCat(seeds.size() > 1 ? "," : "", JsonNumber(ms));
  }
  return StrCat("{\"env\":", EnvJson(c.env), ",\"iteration_ms\":", JsonNumber(c.median_ms),
                ",\"min_ms\":", JsonNumber(c.min_ms), ",\"max_ms\":", JsonNumber(c.max_ms),
                ",\"seed_medians_ms\":", seeds, "]",
                c.failure.empty() ? "" : StrCat(",\"failure\":", JsonQuote(c.failure)), "}");
}

std::string CandidatesJson(const std::vector<Candidate>& candidates) {
  std::string out = "[";
  for (const Candidate& c : candidates) out += StrCat(out.size() > 1 ? "," : "", CandidateJson(c));
  return out + "]";
}

bool Sets(const Candidate& c, const char* knob, const char* off) {
  const auto it = c.env.find(knob);
  return it != c.env.end() && it->second != off;
}

// Stage 4's fastest b >= 1. REQUIRES: r.backup holds one.
const Candidate& FastestBackup(const TuneResult& r) {
  return *std::min_element(
      r.backup.begin() + 1, r.backup.end(),
      [](const Candidate& a, const Candidate& b) { return a.median_ms < b.median_ms; });
}

// Whether --tune may recommend `c`: not with backup workers that do not pay.
bool Recommendable(const TuneResult& r, const Candidate& c) {
  return BackupPays(r) || BackupWorkersOf(c) == 0;
}

// The fastest recommendable candidate that does not set `knob` (or sets it to `off`).
const Candidate* FastestWithout(const TuneResult& r, const char* knob, const char* off) {
  for (const Candidate& c : r.ranked) {
    if (!Sets(c, knob, off) && Recommendable(r, c)) return &c;
  }
  return nullptr;
}

// When `best` sets `knob`: the fastest candidate without it, as FERRY_* lines after `why`.
std::string BestWithout(const TuneResult& r, const Candidate& best, const char* knob,
                        const char* off, const std::string& why) {
  const Candidate* c = Sets(best, knob, off) ? FastestWithout(r, knob, off) : nullptr;
  if (c == nullptr) return "";
  std::string out = StrCat("best settings without ", why, " (", c->median_ms / best.median_ms,
                           "x the best's step; ");
  out += knob == std::string("FERRY_COMPRESSION")
             ? "compression trades accuracy, docs/compression.md):\n"
             : "a step then averages fewer workers' gradients, docs/simulation.md):\n";
  for (const auto& [name, value] : c->env) {
    if (name != knob) out += StrCat(name, "=", value, "\n");
  }
  return out;
}

std::string TcpNote(const Candidate& best) {
  const auto policy = best.env.find("FERRY_SCHEDULING_POLICY");
  if (policy == best.env.end() || !HandsTheLinkToTcp(policy->second)) return "";
  return StrCat("note: ", policy->second,
                " keeps far more in flight than a credit of a few partitions; there TCP "
                "shares each worker's link unevenly, which this model does not reproduce "
                "(docs/simulation.md, \"The cells that miss, explained\"): check it against "
                "the default on the real cluster before a long run\n");
}

// "label  1234.56 ms (min-max)  1.000x  settings" for each candidate, against `reference`.
std::string Row(const std::string& label, const Candidate& c, double reference) {
  char line[512];
  if (!c.failure.empty()) {
    std::snprintf(line, sizeof(line), "%-8s  stops                          ", label.c_str());
    return StrCat(line, DescribeEnv(c.env), "\n         ", c.failure, "\n");
  }
  std::snprintf(line, sizeof(line), "%-8s %9.2f ms (%.2f-%.2f)  %5.3fx  %s\n", label.c_str(),
                c.median_ms, c.min_ms, c.max_ms, c.median_ms / reference,
                DescribeEnv(c.env).c_str());
  return line;
}

std::string BackupSection(const SimOptions& o, const TuneResult& r) {
  if (r.backup.empty()) return "";
  std::string out = StrCat("backup workers (FERRY_BACKUP_WORKERS, from each policy's best "
                           "settings without compression; ",
                           o.catch_up == CatchUp::kOff
                               ? std::string("--catch-up off")
                               : StrCat("a late worker catches up, --catch-up ",
                                        CatchUpName(o.catch_up)),
                           "):\n");
  for (const Candidate& c : r.backup) {
    out += Row(StrCat("b=", BackupWorkersOf(c)), c, r.backup.front().median_ms);
  }
  return out + BackupVerdict(o, r);
}

// A way of cutting other than today's must predict a step this much shorter to be chosen.
constexpr double kLinkModeMargin = 0.02;

// Stage 5: each way of cutting against today's one size, and the one --tune chooses, as
// the FERRY_* variables that set it: the fastest, if it beats today's by more than
// kLinkModeMargin (the model's error against the emulated cluster is of that order), else
// today's.
std::string LinksSection(const TuneResult& r) {
  if (r.links.empty()) return "";
  std::string out = "uneven links (from the best settings without compression nor backup "
                    "workers, sized by time; docs/simulation.md, \"Uneven links\"):\n";
  const Candidate* fastest = &r.links.front();
  for (const Candidate& c : r.links) {
    out += Row(LinkModeOf(c), c, r.links.front().median_ms);
    if (c.median_ms < fastest->median_ms) fastest = &c;
  }
  const Candidate* chosen =
      fastest->median_ms < (1 - kLinkModeMargin) * r.links.front().median_ms ? fastest
                                                                              : &r.links.front();
  char line[256];
  std::snprintf(line, sizeof(line), "uneven links: chooses %s (%.3fx today's step): ",
                LinkModeOf(*chosen).c_str(), chosen->median_ms / r.links.front().median_ms);
  return StrCat(out, line, kPerLinkKnob, "=", chosen->env.at(kPerLinkKnob), " ", kDecomposeKnob,
                "=", chosen->env.at(kDecomposeKnob), "\n");
}

}  // namespace

std::string FormatTuneJson(const CliOptions& cli, const TuneResult& r, double wall_s) {
  const SimOptions& o = cli.sim;
  return StrCat("{\"program\":\"ferry-sim --tune\",\"model\":", JsonQuote(o.workload.model),
                ",\"workers\":", o.cluster.workers,
                ",\"rate_bits_per_s\":", JsonNumber(o.cluster.rate_bits_per_s),
                ",\"env\":", EnvJson(o.env), ",\"seeds\":", cli.tune_options.seeds,
                ",\"jitter\":", JsonNumber(cli.tune_options.jitter),
                ",\"baseline\":", CandidateJson(r.baseline),
                ",\"best\":", r.ranked.empty() ? "null" : CandidateJson(Recommended(r)),
                ",\"ranked\":", CandidatesJson(r.ranked), ",\"backup\":", CandidatesJson(r.backup),
                ",\"backup_pays\":", BackupPays(r) ? "true" : "false",
                ",\"links\":", CandidatesJson(r.links),
                ",\"simulations\":", r.simulations, ",\"wall_s\":", JsonNumber(wall_s), "}\n");
}

bool HandsTheLinkToTcp(const std::string& policy) {
  for (const char* p : {"fifo", "priority", "mercury", "fifo-bucket", "usbyte"}) {
    if (policy == p) return true;
  }
  return false;
}

bool BackupPays(const TuneResult& r) {
  return r.backup.size() >= 2 && FastestBackup(r).max_ms < r.backup.front().min_ms;
}

const Candidate& Recommended(const TuneResult& r) {
  const Candidate& best = r.ranked.front();
  if (Recommendable(r, best)) return best;
  const Candidate* without = FastestWithout(r, "FERRY_BACKUP_WORKERS", "0");
  return without != nullptr ? *without : best;
}

std::string BackupVerdict(const SimOptions& o, const TuneResult& r) {
  const Candidate& best = FastestBackup(r);
  char steps[160];
  std::snprintf(steps, sizeof(steps), "b=%d %.2f ms against b=0 %.2f ms", BackupWorkersOf(best),
                best.median_ms, r.backup.front().median_ms);
  if (BackupPays(r)) return StrCat("backup workers pay: ", steps, " on every seed\n");
  if (!best.failure.empty()) {
    return StrCat("backup workers do not pay here: with b=", BackupWorkersOf(best),
                  " the job stops (every worker sat out a round; --catch-up all-partitions never "
                  "lets more than b sit out); left out of the best settings\n");
  }
  bool slow = false;
  for (const auto& [rank, factor] : o.worker_compute_scale) slow = slow || factor > 1;
  std::string why;
  if (slow && o.catch_up == CatchUp::kOff) {
    why = "; without catching up a worker slow on every step still sets the pace: it computes "
          "every step and stays at most one round behind";
  } else if (slow) {
    why = "; a worker slow on every step sits steps out only where its pushes of the last "
          "step came late";
  }
  return StrCat("backup workers do not pay here: ", steps, " (not on every seed); left out of ",
                "the best settings", why,
                why.empty() ? "" : " (docs/simulation.md, \"Backup workers\")", "\n");
}

std::string FormatTuneText(const CliOptions& cli, const TuneResult& r, double wall_s) {
  std::string out = StrCat("ferry-sim --tune: ", DescribeJob(cli.sim), "\n", r.ranked.size(),
                           " candidates x ", cli.tune_options.seeds, " seeds (", r.simulations,
                           " simulations) in ", JsonNumber(std::round(wall_s * 100) / 100), " s\n");
  out += "rank     iteration (min-max over seeds)  / default  settings\n";
  out += Row("default", r.baseline, r.baseline.median_ms);
  const size_t shown = std::min<size_t>(r.ranked.size(), 10);
  for (size_t i = 0; i < shown; ++i) {
    out += Row(std::to_string(i + 1), r.ranked[i], r.baseline.median_ms);
  }
  if (r.ranked.size() > shown) {
    out += StrCat("... ", r.ranked.size() - shown, " more (--format json lists them)\n");
  }
  out += BackupSection(cli.sim, r);
  out += LinksSection(r);
  if (r.ranked.empty()) return out;
  const Candidate& best = Recommended(r);
  out += TcpNote(best);
  // Compression and backup workers change what a step sums: the best without them too.
  out += BestWithout(r, best, "FERRY_COMPRESSION", "none", "compression");
  out += BestWithout(r, best, "FERRY_BACKUP_WORKERS", "0", "backup workers");
  out += "best settings:\n";
  for (const auto& [name, value] : best.env) out += StrCat(name, "=", value, "\n");
  return out;
}

}  // namespace ferry::sim
