#pragma once

// ferry-sim's command line (sim/main.cc): flags parsed into SimOptions, and the parts of
// it tests check on their own.

#include <string>
#include <utility>
#include <vector>

#include "sim/cluster_sim.h"
#include "sim/tune.h"

namespace ferry::sim {

// A rate in tc's syntax, in bits per second: "1gbit", "100mbit", "25Gbit", "800kbit",
// "1000000bit" or a bare number (bits), "125mbps" (bytes per second: tc's "bps"), with
// an optional fraction ("2.5gbit"). Throws FerryError(kInvalidConfig) naming the text.
double ParseRate(const std::string& text);

// "NAME=VALUE" -> (NAME, VALUE). Throws FerryError(kInvalidConfig) without '=' or a name.
std::pair<std::string, std::string> ParseAssignment(const std::string& text);

struct CliOptions {
  SimOptions sim;
  std::string workload = "resnet50";  // a name in bench/workloads or a file
  std::string pipeline;               // --pipeline: a name in bench/workloads or a file, or ""
  double byte_scale = 1;
  double compute_scale = 1;
  std::string network = "fq";  // fq or fair
  std::string format = "text";   // text or json
  bool tune = false;             // --tune: search the settings (sim/tune.h)
  std::string parts_out;         // --parts-out: worker 0's partitions as JSON, or ""
  TuneOptions tune_options;
  bool help = false;
};

// Parses argv (without argv[0]); reads the workload (names resolved in `workloads_dir`).
// Throws FerryError(kInvalidConfig) naming the flag for anything wrong.
CliOptions ParseCommandLine(const std::vector<std::string>& args, const std::string& workloads_dir);

// The --help text.
std::string Usage();

// The result as one JSON object (one line), or as text (a pipeline job's:
// sim/pipeline_report.h).
std::string FormatJson(const CliOptions& cli, const SimResult& r, double wall_s);
std::string FormatText(const CliOptions& cli, const SimResult& r, double wall_s);
// The text's last lines for either kind of job: the busiest host link ("links ...") and what
// the run cost ("simulated ...").
std::string FormatTextTail(const SimOptions& o, const SimResult& r, double wall_s);
// --parts-out's file: {"parts": [{"iteration", "layer", "server", "bytes", "ready_us",
// "sent_us", "acked_us", "result_us"}, ...]} for worker 0.
std::string FormatPartsJson(const SimResult& r);
// --tune's output: sim/tune_report.h.

// The job in one line: "vgg16 (16 layers, N bytes), 8 workers, 8 colocated servers,
// 1 Gbit/s, latency 0 us".
std::string DescribeJob(const SimOptions& o);
// A JSON number (%.10g; null if not finite) and a JSON string.
std::string JsonNumber(double v);
std::string JsonQuote(const std::string& s);

}  // namespace ferry::sim
