#pragma once

// A Workload (sim/workload.h) read back from the Chrome traces of a real run, dPRO-style:
// the directory FERRY_TRACE_DIR pointed at, with one ferry-worker-<rank>.json per worker
// (worker/trace.h).
//
//   Workload w = LoadTraceWorkload("/tmp/trace");  // ferry-sim --workload /tmp/trace
//
// What is read from each file: the "step <n>" instants (Worker::StepBoundary), the compute
// spans (cat "compute": Worker::TraceCompute, which ferry-train-sim and ferry.torch
// report) and the partitions' slices (cat "partition": their "bytes" and "priority").
//
// Iterations are the intervals between consecutive "step" marks; the first of them is
// skipped (warm-up) when there are two or more, and whatever lies before the first mark
// or after the last is never used. Within each used iteration of each rank (a sample),
// a tensor's forward (backward) time is the sum of its forward (backward) spans that
// end in it, and its bytes the sum of the bytes of its partitions that became ready in
// it. Then, per tensor:
//   - bytes: the most frequent per-sample sum (the larger on a tie; samples without
//     partitions of the tensor do not count);
//   - fwd_ms, bwd_ms: the median over every sample (a sample without a span counts 0).
// Layers: one per tensor with partitions or compute spans (Ferry's own "__ferry__/"
// tensors excepted), in forward order: by the median start of their first forward span
// within the iteration; tensors without forward spans follow, most urgent priority first.
// A tensor with compute but no partitions (no gradient to push) adds its times to the
// layer before it in forward order (the first layer's to the one after): its forward ran
// behind that layer's without a gate, and its backward counted toward the next gradient
// that was ready. ferry-train-sim's tensors ("train_sim/<index>/<layer>") read back
// under their layer's name. The model is the directory's name.
//
// Limits: one tensor per layer (the CSVs may group several), the compute the application
// reported and nothing else (an unreported gap, e.g. the optimizer's step, is no
// layer's), the median iteration's times (no per-iteration variation).
//
// Throws FerryError(kInvalidConfig) naming the file and what is missing: no
// ferry-worker-<rank>.json in the directory, a file that is not a trace, no compute
// spans, no whole iteration (fewer than two "step" marks), no partitions.

#include <string>

#include "sim/workload.h"

namespace ferry {

Workload LoadTraceWorkload(const std::string& dir);

}  // namespace ferry
