#pragma once

// ferry-sim --pipeline's output: the pipeline's shape, the iteration, the bound and the
// point-to-point sends, as one JSON object (one line) or as text. Fields and lines are
// listed in docs/simulation.md, "Pipeline and hybrid jobs".

#include <string>

#include "sim/cli.h"
#include "sim/cluster_sim.h"

namespace ferry::sim {

// REQUIRES: r.pipeline.
std::string FormatPipelineJson(const CliOptions& cli, const SimResult& r, double wall_s);
std::string FormatPipelineText(const CliOptions& cli, const SimResult& r, double wall_s);

}  // namespace ferry::sim
