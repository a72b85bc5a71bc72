#pragma once

// A hybrid pipeline + data-parallel job for ferry-sim --pipeline (docs/simulation.md,
// "Pipeline and hybrid jobs"): S stages, each replicated R = workers / S times; the
// replicas of a stage average their gradients in a process set of their own.
//
//   PipelineSpec p = LoadPipeline("bench/workloads/vgg16_pipeline.json");
//   p = ScalePipeline(p, /*compute_scale=*/1, /*byte_scale=*/0.1);
//   for (const PipelineOp& op : Schedule1F1B(/*stage=*/0, p.stages.size(), p.micro_batches))
//
// The file (one JSON object; these fields only):
//   {"micro_batches": M, "activation_bytes": A, "stash": true|false,
//    "stages": [{"forward_ms": f, "backward_ms": b, "tensors": [bytes, ...],
//                "sparse_rows": {"table_rows": R, "row_bytes": W, "rows": K}}, ...],
//    "comment": "..."}                           (sparse_rows and comment optional)
// M >= 1; A, W and every tensor's bytes positive multiples of 4 (float32); at least one
// stage; times >= 0 per micro-batch; a stage's tensors in forward order (input first);
// 1 <= R <= 10^10, R x W at most 2^40 bytes, 1 <= K <= 10^9.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::sim {

// An embedding table a stage owns: each replica of the stage pushes `rows` of its rows
// per iteration with push_pull_rows (sim/pipeline_rows.h).
struct SparseRows {
  uint64_t table_rows = 1;
  uint64_t row_bytes = 4;  // one row's float32 values
  uint64_t rows = 1;       // pushed by each replica, every iteration
};

struct PipelineStage {
  double forward_ms = 0;          // one micro-batch's forward
  double backward_ms = 0;         // ... and backward
  std::vector<uint64_t> tensors;  // gradient bytes, forward order
  std::optional<SparseRows> sparse_rows;
};

struct PipelineSpec {
  std::string name;  // the file's name without ".json"
  int micro_batches = 1;
  uint64_t activation_bytes = 4;  // one send between stages, either way
  bool stash = true;              // weights applied one iteration late (PipeDream-2BW)
  std::vector<PipelineStage> stages;

  int num_stages() const { return static_cast<int>(stages.size()); }
};

// Reads a pipeline file. Throws FerryError(kInvalidConfig) naming the file and the field
// ("stages[1].tensors[2]") for anything it cannot read or any field it does not know.
PipelineSpec LoadPipeline(const std::string& path);

// Times multiplied by compute_scale; bytes (tensors, activations and a table's row) by
// byte_scale, down to whole float32 elements, at least one (as hybrid_bench.py sizes its
// tensors).
// REQUIRES: both scales > 0.
PipelineSpec ScalePipeline(const PipelineSpec& spec, double compute_scale, double byte_scale);

// One step of a stage's schedule: micro-batch k's forward or backward.
struct PipelineOp {
  bool forward = true;
  int micro_batch = 0;
};

// 1F1B (PipeDream-Flush's order) for `stage` of `stages` over `micro_batches`: min(S-1-s,
// M) forwards first, then a forward and a backward in turn until every forward is done,
// then the remaining backwards. Every micro-batch once each way, backwards in order.
std::vector<PipelineOp> Schedule1F1B(int stage, int stages, int micro_batches);

}  // namespace ferry::sim
