#pragma once

// ferry-sim --tune's output (sim/tune.h): the ranking, the backup workers' stage when it
// ran, and the best settings as FERRY_* lines (text, the lines last), or one JSON object
// with every candidate. docs/simulation.md, "Tuning" and "Backup workers".

#include <string>

#include "sim/cli.h"
#include "sim/tune.h"

namespace ferry::sim {

std::string FormatTuneJson(const CliOptions& cli, const TuneResult& r, double wall_s);
std::string FormatTuneText(const CliOptions& cli, const TuneResult& r, double wall_s);
// Whether a policy keeps far more in flight than a credit of a few partitions, where the
// model's verdicts were measured least reliable (docs/simulation.md): --tune says so when
// it picks one.
bool HandsTheLinkToTcp(const std::string& policy);
// Whether stage 4 ran and its fastest b >= 1 beat b = 0 on every seed (TuneResult::backup).
bool BackupPays(const TuneResult& r);
// Stage 4's verdict (TuneResult::backup, not empty): BackupPays, with both steps; why not,
// where the job has a worker slow on every step.
std::string BackupVerdict(const SimOptions& o, const TuneResult& r);
// The settings --tune recommends ("best settings", JSON "best"): the fastest candidate, but
// one with backup workers only where they pay. REQUIRES: r.ranked not empty.
const Candidate& Recommended(const TuneResult& r);

}  // namespace ferry::sim
