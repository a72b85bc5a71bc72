#pragma once

// Trace: a Chrome-trace timeline of one worker (FERRY_TRACE_DIR), loadable in
// chrome://tracing and Perfetto (ui.perfetto.dev).
//
// File: <dir>/ferry-worker-<rank>.json, in the Trace Event Format's object form
// {"traceEvents": [...], "displayTimeUnit": "ms"}, written as events happen and closed
// by Close() (or the destructor). Times are microseconds since the trace opened.
//
// Events:
//   - each pushed partition is an async slice (ph "b"/"e", cat "partition", its own id)
//     named "<tensor>[<partition>]", with args key, server, bytes, priority, round,
//     fused; nested in it, the stages
//       "queue"   ready (its gradient was handed to Ferry) -> handed to the transport,
//       "push"    handed to the transport -> acknowledged by the server (or answered),
//       "server"  acknowledged -> the sum arrived (waiting for the other workers, summing),
//       "return"  the sum arrived -> copied into the output;
//   - instant events (ph "i"): "step <n>" at each iteration boundary, and "scheduling"
//     when the partition size or credit changes, with the values in args;
//   - compute spans (ph "X", cat "compute", on the thread named "compute", tid
//     kComputeTid): the application's compute as it reported it (Worker::TraceCompute;
//     ferry-train-sim and ferry.torch do), named after the tensor the compute belongs
//     to, with args {"phase": "forward"|"backward", "tensor": <name>}; a backward span
//     ends when that tensor's gradient is ready. ferry-sim reads these with the
//     partitions' bytes as a workload (sim/trace_workload.h).
// Thread-safe.

#include <cstdint>
#include <fstream>
#include <string>

#include "common/util/mutex.h"

namespace ferry {

// One partition's way through the worker, for Trace::Partition. Times: NowUs().
struct PartitionTimes {
  std::string tensor;
  uint32_t partition = 0;
  uint64_t key = 0;
  int server = 0;
  uint64_t bytes = 0;
  int priority = 0;
  uint32_t round = 0;
  bool fused = false;
  int64_t ready_us = 0;
  int64_t sent_us = 0;
  int64_t acked_us = 0;  // 0: answered with the sum, without an acknowledgement
  int64_t result_us = 0;
  int64_t done_us = 0;
};

class Trace {
 public:
  // The tid of the compute spans (partitions use the server's rank).
  static constexpr int kComputeTid = 1 << 20;

  // Creates `dir` with its parents if it is missing and opens the file; throws
  // FerryError(kInvalidConfig) naming them if `dir` cannot be a directory (an existing file,
  // an unwritable place) or the file cannot be written.
  Trace(const std::string& dir, int rank);
  ~Trace();

  void Partition(const PartitionTimes& p) EXCLUDES(mu_);
  // An instant event; `args_json` is a JSON object ("{}" for none).
  void Instant(const std::string& name, int64_t at_us, const std::string& args_json)
      EXCLUDES(mu_);
  // A span of application compute for `tensor`, [begin_us, end_us] on NowUs()'s clock;
  // `backward`: the backward pass's (else forward's). end_us < begin_us is taken as empty.
  void Compute(const std::string& tensor, bool backward, int64_t begin_us, int64_t end_us)
      EXCLUDES(mu_);
  // Ends the JSON document; later events are dropped. Idempotent.
  void Close() EXCLUDES(mu_);
  const std::string& path() const { return path_; }

 private:
  void Event(const std::string& json) REQUIRES(mu_);

  const std::string path_;
  const int rank_;
  const int64_t origin_us_;
  Mutex mu_;  // guards out_, next_id_, first_, closed_, compute_named_
  std::ofstream out_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  bool first_ GUARDED_BY(mu_) = true;
  bool closed_ GUARDED_BY(mu_) = false;
  bool compute_named_ GUARDED_BY(mu_) = false;  // the compute thread's name was written
};


}  // namespace ferry
