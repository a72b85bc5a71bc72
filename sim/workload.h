#pragma once

// A training workload for ferry-train-sim: one row per layer group, as in
// bench/workloads/<model>_layers.csv (see bench/workloads/README.md).
//
//   Workload w = LoadWorkload("bench/workloads/resnet50_layers.csv");
//   w = ScaleWorkload(w, /*compute_scale=*/0.25, /*byte_scale=*/0.05);
//   for (const Layer& l : w.layers) ...   // forward order: input side first
//
// The CSVs list rows in backprop order; LoadWorkload reverses them, so layers[0] is the
// layer nearest the input (declared first: the most urgent by Ferry's default priority).

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

struct Layer {
  std::string name;
  uint64_t bytes = 0;  // gradient bytes (float32)
  double fwd_ms = 0;   // forward compute of this layer
  double bwd_ms = 0;   // backward compute from the previous gradient-ready event to this one
};

struct Workload {
  std::string model;          // from the file name: "resnet50" for resnet50_layers.csv
  std::vector<Layer> layers;  // forward order
};

// Reads a <model>_layers.csv (columns row,name,params,bytes,ntensors,fwd_ms,bwd_ms; lines
// starting with '#' are comments). Throws FerryError(kInvalidArgument) naming the file
// and line for anything it cannot read.
Workload LoadWorkload(const std::string& path);

// One tensor of `bytes` with no compute: an iteration is one push_pull, as ferry-perf
// times it. Model name "pushpull".
Workload PushPullWorkload(uint64_t bytes);

// Times multiplied by compute_scale; bytes by byte_scale, rounded to whole float32
// elements, at least one. REQUIRES: both scales > 0.
Workload ScaleWorkload(const Workload& workload, double compute_scale, double byte_scale);

// The median, p90 (nearest rank), mean, min and max of iteration times (ms), as
// ferry-train-sim and ferry-sim report them. REQUIRES: ms not empty.
struct IterationSummary {
  double median_ms = 0;
  double p90_ms = 0;  // nearest rank
  double mean_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
};

IterationSummary Summarize(std::vector<double> ms);

}  // namespace ferry
