// ferry-train-sim: replays a model's training step (bench/workloads/<model>_layers.csv)
// on a Ferry cluster, as one worker (DMLC_* environment), and compares each iteration
// with LB1, the lower bound of an iteration for the same scaled inputs and link rate
// (sim/lower_bound.h). See bench/training_emulator/train_sim.h for what one
// iteration does, and docs/benchmarks.md for the emulated cluster it is meant for.
//
// Output (rank 0 in text, every rank with --json, one JSON object on one line): the
// iteration times, their median and p90, LB1 and iteration / LB1. Exits 1 if --check
// found a wrong sum.

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "sim/lower_bound.h"
#include "bench/training_emulator/train_sim.h"
#include "sim/workload.h"
#include "common/cluster/role_main.h"
#include "common/util/error.h"
#include "common/util/program_flags.h"
#include "worker/worker.h"

DEFINE_string(workload, "", "the workload: a <model>_layers.csv (bench/workloads/)");
DEFINE_int32(iterations, 10, "timed iterations");
DEFINE_int32(warmup, 2, "untimed iterations first");
DEFINE_double(compute_scale, 1.0, "multiplies every forward and backward time");
DEFINE_double(byte_scale, 1.0, "multiplies every layer's bytes");
DEFINE_int32(change_at, -1, "from this iteration on (0: the first warm-up iteration), "
             "compute times are --change_compute_scale times the workload's (-1: never)");
DEFINE_double(change_compute_scale, 1.0, "see --change_at");
DEFINE_string(rank_compute_scale, "",
              "R:X[,R:X...]: worker rank R's compute times are X times every other worker's "
              "(one slow GPU; on top of --compute_scale)");
DEFINE_double(rotating_slow_factor, 1.0,
              "in iteration i, worker rank i mod workers computes this many times longer (a "
              "straggler that moves from worker to worker)");
DEFINE_bool(catch_up, true,
            "with FERRY_BACKUP_WORKERS: a worker that a step's sums left out for every layer "
            "sits out the steps after it (takes their averages without computing; "
            "train_sim.h); not with FERRY_COMPRESSION");
DEFINE_bool(check, false, "refill gradients every iteration and check every sum exactly");
DEFINE_bool(json, false, "print one JSON object per worker instead of text");
DEFINE_double(rate_gbps, 0, "each worker's link rate, Gbit/s, for LB1 (0: no LB1)");
DEFINE_double(server_rate_gbps, 0, "each server's link rate, Gbit/s, for LB1 (0: --rate_gbps)");

namespace ferry {
namespace {

void ValidateFlags() {
  FERRY_ENFORCE(
      !FLAGS_workload.empty(), ErrorCode::kInvalidConfig,
      "invalid configuration: --workload is required (e.g. bench/workloads/resnet50_layers.csv)");
  FERRY_ENFORCE(FLAGS_iterations >= 1 && FLAGS_warmup >= 0, ErrorCode::kInvalidConfig,
                "invalid configuration: need --iterations >= 1 and --warmup >= 0, got ",
                FLAGS_iterations, " and ", FLAGS_warmup);
  FERRY_ENFORCE(FLAGS_compute_scale > 0 && FLAGS_byte_scale > 0, ErrorCode::kInvalidConfig,
                "invalid configuration: --compute_scale and --byte_scale must be > 0, got ",
                FLAGS_compute_scale, " and ", FLAGS_byte_scale);
  FERRY_ENFORCE(FLAGS_rate_gbps >= 0 && FLAGS_server_rate_gbps >= 0, ErrorCode::kInvalidConfig,
                "invalid configuration: --rate_gbps and --server_rate_gbps must be >= 0");
  FERRY_ENFORCE(FLAGS_change_compute_scale > 0, ErrorCode::kInvalidConfig,
                "invalid configuration: --change_compute_scale must be > 0, got ",
                FLAGS_change_compute_scale);
}

// --rank_compute_scale's factor for `rank` (1 if it is not listed).
double OwnComputeScale(int rank) {
  double scale = 1.0;
  std::stringstream list(FLAGS_rank_compute_scale);
  for (std::string item; std::getline(list, item, ',');) {
    const size_t colon = item.find(':');
    char* end = nullptr;
    const long r = colon == std::string::npos ? -1 : std::strtol(item.c_str(), &end, 10);
    const double x = colon == std::string::npos ? 0 : std::strtod(item.c_str() + colon + 1, nullptr);
    FERRY_ENFORCE(r >= 0 && end == item.c_str() + colon && x > 0, ErrorCode::kInvalidConfig,
                  "invalid configuration: --rank_compute_scale expects RANK:FACTOR[,...] with "
                  "FACTOR > 0, got '", item, "'");
    if (r == rank) scale = x;
  }
  return scale;
}

uint64_t TotalBytes(const Workload& w) {
  uint64_t m = 0;
  for (const Layer& l : w.layers) m += l.bytes;
  return m;
}

// A double for JSON, to 10 significant digits (a stream's default is 6).
std::string Num(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", v);
  return text;
}

std::string JsonList(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += StrCat(i ? "," : "", Num(v[i]));
  return out + "]";
}

// Milliseconds since the epoch, to the millisecond.
std::string UnixList(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += StrCat(i ? "," : "", static_cast<int64_t>(v[i]));
  return out + "]";
}

struct Report {
  const Workload& workload;
  int rank, workers, servers;
  std::vector<double> ms;
  IterationSummary summary;
  bool has_lb;
  double b_eff_gbps;
  LowerBound lb;
  uint64_t checked, wrong;
  SchedulingChoice scheduling;  // at the end (FERRY_AUTOTUNE's pick, or as configured)
  int sat_out = 0;              // backward passes sat out (--catch_up)
  std::vector<double> starts_unix_ms;  // the timed iterations' starts
};

void PrintJson(const Report& r) {
  std::string lb = "null";
  if (r.has_lb) {
    lb = StrCat("{\"rate_gbps\":", Num(FLAGS_rate_gbps), ",\"b_eff_gbps\":", Num(r.b_eff_gbps),
                ",\"cf_ms\":", Num(r.lb.cf_ms), ",\"cb_ms\":", Num(r.lb.cb_ms),
                ",\"m_over_b_ms\":", Num(r.lb.m_over_b_ms), ",\"tail_ms\":", Num(r.lb.tail_ms),
                ",\"lb0_ms\":", Num(r.lb.lb0_ms), ",\"lb1_ms\":", Num(r.lb.lb1_ms),
                ",\"median_over_lb1\":", Num(r.summary.median_ms / r.lb.lb1_ms),
                ",\"p90_over_lb1\":", Num(r.summary.p90_ms / r.lb.lb1_ms), "}");
  }
  std::string json =
      StrCat("{\"program\":\"ferry-train-sim\",\"model\":\"", r.workload.model,
             "\",\"rank\":", r.rank, ",\"workers\":", r.workers, ",\"servers\":", r.servers,
             ",\"layers\":", r.workload.layers.size(), ",\"bytes\":", TotalBytes(r.workload),
             ",\"compute_scale\":", Num(FLAGS_compute_scale),
             ",\"byte_scale\":", Num(FLAGS_byte_scale), ",\"warmup\":", FLAGS_warmup,
             ",\"iterations_ms\":", JsonList(r.ms), ",\"starts_unix_ms\":", UnixList(r.starts_unix_ms), ",\"median_ms\":", Num(r.summary.median_ms),
             ",\"p90_ms\":", Num(r.summary.p90_ms), ",\"mean_ms\":", Num(r.summary.mean_ms),
             ",\"min_ms\":", Num(r.summary.min_ms), ",\"max_ms\":", Num(r.summary.max_ms),
             ",\"lb\":", lb, ",\"check\":", FLAGS_check ? "true" : "false",
             ",\"checked_values\":", r.checked, ",\"wrong_values\":", r.wrong,
             ",\"sat_out\":", r.sat_out, ",\"partition_bytes\":", r.scheduling.partition_bytes,
             ",\"credit_bytes\":", r.scheduling.credit_bytes, "}");
  std::printf("%s\n", json.c_str());
}

void PrintText(const Report& r) {
  std::printf(
      "# ferry-train-sim: %s, %zu layers, %llu bytes, %d workers, %d servers, "
      "compute x%g, bytes x%g, %d warm-up + %zu timed iterations\n",
      r.workload.model.c_str(), r.workload.layers.size(),
      static_cast<unsigned long long>(TotalBytes(r.workload)), r.workers, r.servers,
      FLAGS_compute_scale, FLAGS_byte_scale, FLAGS_warmup, r.ms.size());
  for (size_t i = 0; i < r.ms.size(); ++i) std::printf("iteration %4zu %10.2f ms\n", i, r.ms[i]);
  std::printf("median %.2f ms, p90 %.2f ms, mean %.2f ms\n", r.summary.median_ms, r.summary.p90_ms,
              r.summary.mean_ms);
  if (r.has_lb) {
    std::printf(
        "LB1 %.2f ms at %g Gbit/s (B_eff %g Gbit/s; C_f %.2f, C_b %.2f, M/B %.2f, E %.2f, "
        "LB0 %.2f ms): median/LB1 %.3f, p90/LB1 %.3f\n",
        r.lb.lb1_ms, FLAGS_rate_gbps, r.b_eff_gbps, r.lb.cf_ms, r.lb.cb_ms, r.lb.m_over_b_ms,
        r.lb.tail_ms, r.lb.lb0_ms, r.summary.median_ms / r.lb.lb1_ms,
        r.summary.p90_ms / r.lb.lb1_ms);
  }
  if (FLAGS_check) {
    std::printf("checked %llu sums: %llu wrong\n", static_cast<unsigned long long>(r.checked),
                static_cast<unsigned long long>(r.wrong));
  }
}

int RunTrainSim(const Config& config) {
  ValidateFlags();
  Workload workload =
      ScaleWorkload(LoadWorkload(FLAGS_workload), FLAGS_compute_scale, FLAGS_byte_scale);
  // TrainSim drives a Worker (SetScheduling, StepBoundary): one process per machine.
  FERRY_ENFORCE(config.local.size == 1, ErrorCode::kInvalidConfig,
                "ferry-train-sim runs one process per machine; FERRY_LOCAL_SIZE=",
                config.local.size, " is not supported");
  auto worker = Worker::Create(config);
  TrainSim sim(*worker, workload, FLAGS_check);
  if (FLAGS_change_at >= 0) sim.ChangeComputeAt(FLAGS_change_at, FLAGS_change_compute_scale);
  sim.ScaleOwnCompute(OwnComputeScale(worker->rank()));
  FERRY_ENFORCE(FLAGS_rotating_slow_factor > 0, ErrorCode::kInvalidConfig,
                "invalid configuration: --rotating_slow_factor must be > 0, got ",
                FLAGS_rotating_slow_factor);
  sim.RotateStraggler(FLAGS_rotating_slow_factor);
  if (config.server.backup_workers > 0) {
    FERRY_ENFORCE(!FLAGS_check, ErrorCode::kInvalidConfig,
                  "invalid configuration: --check compares exact sums of every worker, but with "
                  "FERRY_BACKUP_WORKERS=", config.server.backup_workers,
                  " a sum may leave workers out; leave out one of them");
    // Averaged gradients: what backup workers close early. Compressed rounds wait for every
    // worker, so they cannot be sat out.
    sim.Average(FLAGS_catch_up && config.compression.spec.none());
  }
  Report r{workload, worker->rank(), worker->size(), worker->num_servers(), {}, {}, false, 0, {}, 0,
           0, {}, 0, {}};
  r.ms = sim.Run(FLAGS_warmup, FLAGS_iterations);
  r.summary = Summarize(r.ms);
  r.checked = sim.checked_values();
  r.wrong = sim.wrong_values();
  r.starts_unix_ms = sim.start_unix_ms();
  r.sat_out = sim.sat_out();
  r.scheduling = worker->scheduling();
  if (FLAGS_rate_gbps > 0) {
    double server_gbps = FLAGS_server_rate_gbps > 0 ? FLAGS_server_rate_gbps : FLAGS_rate_gbps;
    double b_eff =
        EffectiveBytesPerSecond(FLAGS_rate_gbps * 1e9, server_gbps * 1e9, r.servers, r.workers);
    r.has_lb = true;
    r.b_eff_gbps = b_eff * 8 / 1e9;
    r.lb = ComputeLowerBound(workload.layers, b_eff);
  }
  if (FLAGS_json) {
    PrintJson(r);
  } else if (r.rank == 0) {
    PrintText(r);
  }
  std::fflush(stdout);
  worker->Shutdown();
  if (r.wrong) {
    std::fprintf(stderr, "ferry-train-sim: %llu wrong sums\n",
                 static_cast<unsigned long long>(r.wrong));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  gflags::SetUsageMessage("replays a model's training step on a Ferry cluster (run as a worker)");
  ferry::ParseProgramFlags(&argc, &argv, __FILE__);
  const ferry::NodeRole role = ferry::NodeRole::kWorker;
  return ferry::RunRoleMain(argc, argv, &role, ferry::RunTrainSim);
}
