#include "sim/cli.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>

#include "common/util/error.h"
#include "sim/lower_bound.h"
#include "sim/pipeline_report.h"
#include "sim/pipeline_spec.h"
#include "sim/trace_workload.h"

namespace ferry::sim {
namespace {

[[noreturn]] void Refuse(const std::string& flag, const std::string& why) {
  throw FerryError(ErrorCode::kInvalidConfig, StrCat("ferry-sim: ", flag, ": ", why));
}

double Number(const std::string& flag, const std::string& text, double min, double max) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < min || v > max) {
    Refuse(flag, StrCat("'", text, "' is not a number from ", min, " to ", max));
  }
  return v;
}

int Integer(const std::string& flag, const std::string& text, int min, int max) {
  const double v = Number(flag, text, min, max);
  if (v != std::floor(v)) Refuse(flag, StrCat("'", text, "' is not a whole number"));
  return static_cast<int>(v);
}

}  // namespace

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", v);
  return text;
}

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

namespace {

// --worker-compute-scale's "R:X[,R:X]" into `o` (ranks checked against --workers later).
void ParseComputeScales(const std::string& text, SimOptions* o) {
  const std::string flag = "--worker-compute-scale";
  std::string list = text + ",";
  for (size_t from = 0, comma; (comma = list.find(',', from)) != std::string::npos;
       from = comma + 1) {
    const std::string item = list.substr(from, comma - from);
    const size_t colon = item.find(':');
    if (colon == std::string::npos) Refuse(flag, StrCat("'", item, "' is not RANK:FACTOR"));
    const int rank = Integer(flag, item.substr(0, colon), 0, 1 << 20);
    o->worker_compute_scale[rank] = Number(flag, item.substr(colon + 1), 1e-9, 1e6);
  }
}

// --worker-link-rates' "R0,R1,...": Gbit/s, or each a rate in tc's syntax.
void ParseWorkerRates(const std::string& text, SimOptions* o) {
  const std::string flag = "--worker-link-rates";
  std::vector<double>& rates = o->cluster.worker_rates_bits_per_s;
  rates.clear();
  std::string list = text + ",";
  for (size_t from = 0, comma; (comma = list.find(',', from)) != std::string::npos;
       from = comma + 1) {
    const std::string item = list.substr(from, comma - from);
    if (item.find_first_not_of("0123456789.") == std::string::npos) {
      rates.push_back(Number(flag, item, 1e-6, 1e6) * 1e9);  // Gbit/s
      continue;
    }
    try {
      rates.push_back(ParseRate(item));
    } catch (const FerryError&) {
      Refuse(flag, StrCat("'", item, "' is neither Gbit/s nor a rate in tc's syntax (250mbit)"));
    }
  }
}

struct Flag {
  const char* name;
  const char* value;  // nullptr: a switch
  const char* help;
  std::function<void(CliOptions&, const std::string&)> set;
};

const std::vector<Flag>& Flags() {
  static const std::vector<Flag> flags = {
      {"--workload", "NAME|FILE|DIR",
       "vgg16, resnet50, bert_base (bench/workloads/), a <model>_layers.csv, a run's "
       "FERRY_TRACE_DIR (its traces' compute spans and bytes), or "
       "pushpull:BYTES (one tensor, no compute: ferry-perf's loop; 50M, 4K)",
       [](CliOptions& o, const std::string& v) { o.workload = v; }},
      {"--pipeline", "NAME|FILE",
       "a hybrid pipeline + data-parallel job instead of --workload: a pipeline JSON file "
       "(docs/simulation.md, \"Pipeline and hybrid jobs\"), or NAME for "
       "bench/workloads/NAME.json; --workers a multiple of its stages",
       [](CliOptions& o, const std::string& v) { o.pipeline = v; }},
      {"--step-boundary", nullptr,
       "--pipeline: each iteration ends with StepBoundary, as a program stepping "
       "DistributedOptimizer does (hybrid_bench.py does not): FERRY_PARTITION_MS then sizes "
       "every set's partitions, and the credit with them, at the third",
       [](CliOptions& o, const std::string&) { o.sim.pipeline_step_boundary = true; }},
      {"--byte-scale", "X",
       "multiplies every layer's gradient bytes (a pipeline's tensors, activations and table "
       "rows too; default 1)",
       [](CliOptions& o, const std::string& v) { o.byte_scale = Number("--byte-scale", v, 1e-9, 1e6); }},
      {"--compute-scale", "X",
       "multiplies every forward and backward time (a pipeline stage's too; default 1)",
       [](CliOptions& o, const std::string& v) {
         o.compute_scale = Number("--compute-scale", v, 1e-9, 1e6);
       }},
      {"--worker-compute-scale", "R:X[,R:X]",
       "worker rank R's compute times are X times the others' (one slow GPU; on top of "
       "--compute-scale), as ferry-train-sim's --rank_compute_scale",
       [](CliOptions& o, const std::string& v) { ParseComputeScales(v, &o.sim); }},
      {"--rotating-slow-factor", "X",
       "a straggler that moves: in iteration i, worker i mod --workers computes X times "
       "longer (default 1: none), as ferry-train-sim's --rotating_slow_factor",
       [](CliOptions& o, const std::string& v) {
         o.sim.rotating_slow_factor = Number("--rotating-slow-factor", v, 1e-9, 1e6);
       }},
      {"--catch-up", "MODE",
       "with FERRY_BACKUP_WORKERS, a worker that a step's sums left out (its pushes came "
       "late) sits out the steps that follow, as ferry-train-sim's --catch_up: "
       "all-partitions (the default, its rule: left out of every partition's sum, so never "
       "more than b sit a step out), most-layers (left out of most layers' sums), or off "
       "(every step computed)",
       [](CliOptions& o, const std::string& v) {
         if (v == "most-layers") {
           o.sim.catch_up = CatchUp::kMostLayers;
         } else if (v == "all-partitions") {
           o.sim.catch_up = CatchUp::kAllPartitions;
         } else if (v == "off") {
           o.sim.catch_up = CatchUp::kOff;
         } else {
           Refuse("--catch-up", StrCat("'", v, "' is not most-layers, all-partitions or off"));
         }
       }},
      {"--workers", "N", "workers, one per host (default 2)",
       [](CliOptions& o, const std::string& v) {
         o.sim.cluster.workers = Integer("--workers", v, 1, 1 << 20);
       }},
      {"--servers", "S", "servers on hosts of their own (default 2; 0 with --colocate)",
       [](CliOptions& o, const std::string& v) {
         o.sim.cluster.servers = Integer("--servers", v, 0, 1 << 20);
       }},
      {"--colocate", nullptr, "one server on every worker's host instead of --servers",
       [](CliOptions& o, const std::string&) { o.sim.cluster.colocate = true; }},
      {"--cpu-servers", "K", "CPU-only servers, each on a host of its own (default 0)",
       [](CliOptions& o, const std::string& v) {
         o.sim.cluster.cpu_servers = Integer("--cpu-servers", v, 0, 1 << 20);
       }},
      {"--rate", "RATE", "every host's link, each way, in tc's syntax (default 1gbit)",
       [](CliOptions& o, const std::string& v) { o.sim.cluster.rate_bits_per_s = ParseRate(v); }},
      {"--worker-link-rates", "R0,R1,...",
       "each worker's link, each way, in rank order, one per worker: Gbit/s (0.25) or tc's "
       "syntax (250mbit); servers on hosts of their own keep --rate (docs/simulation.md, "
       "\"Uneven links\")",
       [](CliOptions& o, const std::string& v) { ParseWorkerRates(v, &o.sim); }},
      {"--partition-per-link", "0|1",
       "FERRY_PARTITION_PER_LINK (default 0; 1 applies where FERRY_PARTITION_MS sizes "
       "partitions): "
       "each worker's pushes to each server cut in pieces "
       "sized by its own path (as --env FERRY_PARTITION_PER_LINK=V)",
       [](CliOptions& o, const std::string& v) {
         if (v != "0" && v != "1") Refuse("--partition-per-link", "0 or 1");
         o.sim.env["FERRY_PARTITION_PER_LINK"] = v;
       }},
      {"--decompose", "MODE",
       "FERRY_DECOMPOSE: off (default) or per-layer: each worker cuts each layer's pushes in "
       "the pieces DecomposeLayers chooses from its own measured backward compute and rate "
       "(worker/partition_scheduling/layer_decomposition.h; as --env FERRY_DECOMPOSE=MODE)",
       [](CliOptions& o, const std::string& v) {
         if (v != "off" && v != "per-layer") Refuse("--decompose", "off or per-layer");
         o.sim.env["FERRY_DECOMPOSE"] = v;
       }},
      {"--repartition-threshold", "X",
       "FERRY_REPARTITION_THRESHOLD (default 0.2): a worker decides its pieces again where its "
       "rate (or a path's, or its backward span) moved by more than this fraction",
       [](CliOptions& o, const std::string& v) {
         Number("--repartition-threshold", v, 0.01, 10);  // FERRY_REPARTITION_THRESHOLD's range
         o.sim.env["FERRY_REPARTITION_THRESHOLD"] = v;
       }},
      {"--latency-us", "US", "one-way latency between hosts (default 0)",
       [](CliOptions& o, const std::string& v) {
         o.sim.cluster.latency_us = Number("--latency-us", v, 0, 1e9);
       }},
      {"--env", "NAME=VALUE",
       "a FERRY_* variable as a real worker reads it (repeatable): policy, partitions, credit, "
       "frames, watermark, control lane, shared-memory lane, engines",
       [](CliOptions& o, const std::string& v) {
         auto [name, value] = ParseAssignment(v);
         o.sim.env[name] = value;
       }},
      {"--iterations", "N", "timed iterations (default 10)",
       [](CliOptions& o, const std::string& v) {
         o.sim.iterations = Integer("--iterations", v, 1, 1000000);
       }},
      {"--warmup", "N", "untimed iterations first (default 2)",
       [](CliOptions& o, const std::string& v) { o.sim.warmup = Integer("--warmup", v, 0, 1000000); }},
      {"--seed", "N", "seeds the compute jitter (default 1)",
       [](CliOptions& o, const std::string& v) {
         o.sim.seed = static_cast<uint64_t>(Number("--seed", v, 0, 9e15));
       }},
      {"--jitter", "CV", "coefficient of variation of every compute time (default 0)",
       [](CliOptions& o, const std::string& v) {
         o.sim.model.compute_jitter = Number("--jitter", v, 0, 1);
       }},
      {"--network", "MODEL",
       "fq (default: connections take turns of one message on each link), fifo (each link "
       "sends in arrival order, each connection keeps at most --tcp-window bytes on the "
       "way) or fair (fluid max-min fair sharing; small clusters; docs/simulation.md)",
       [](CliOptions& o, const std::string& v) {
         if (v != "fq" && v != "fifo" && v != "fair") Refuse("--network", "fq, fifo or fair");
         o.network = v;
       }},
      {"--tcp-window", "BYTES",
       "fq and fifo: bytes one connection keeps on its way over the links, TCP's window "
       "(default 0: no limit; at least one message always goes)",
       [](CliOptions& o, const std::string& v) {
         o.sim.model.window_bytes = Number("--tcp-window", v, 0, 1e12);
       }},
      {"--interleave-bytes", "BYTES",
       "fq and fifo: a message of at most this many bytes on the wire (an acknowledgement) "
       "goes between the segments of the message in service, as a TCP segment does "
       "(default 1500; 0: every message waits its turn)",
       [](CliOptions& o, const std::string& v) {
         o.sim.model.interleave_bytes = Number("--interleave-bytes", v, 0, 1e12);
       }},
      {"--segment-bytes", "BYTES",
       "fq and fifo: a larger message takes its turns on a link in segments of about this "
       "size, as TCP shares a link packet by packet (default 1048576; 0: whole messages)",
       [](CliOptions& o, const std::string& v) {
         o.sim.model.segment_bytes = Number("--segment-bytes", v, 0, 1e12);
       }},
      {"--tcp-efficiency", "X", "goodput / link rate (default 0.94)",
       [](CliOptions& o, const std::string& v) {
         o.sim.model.tcp_efficiency = Number("--tcp-efficiency", v, 1e-3, 1);
       }},
      {"--message-us", "US", "cost of one message, added to its delivery (default 30)",
       [](CliOptions& o, const std::string& v) {
         o.sim.model.message_us = Number("--message-us", v, 0, 1e9);
       }},
      {"--sum-gbps", "GB/S", "one server engine thread's summation rate, GB/s (default 8)",
       [](CliOptions& o, const std::string& v) {
         o.sim.model.sum_bytes_per_s = Number("--sum-gbps", v, 1e-6, 1e6) * 1e9;
       }},
      {"--format", "text|json", "the output (default text)",
       [](CliOptions& o, const std::string& v) {
         if (v != "text" && v != "json") Refuse("--format", "text or json");
         o.format = v;
       }},
      {"--parts-out", "FILE",
       "writes worker 0's partitions (iteration, layer, server, bytes; ready, sent, acked and "
       "result times in us) as JSON, to set beside a measured run's FERRY_TRACE_DIR",
       [](CliOptions& o, const std::string& v) {
         o.parts_out = v;
         o.sim.record_parts = true;
       }},
      {"--tune", nullptr,
       "search the policy, partition size and credit by simulating each candidate; prints "
       "the ranking and the best settings as FERRY_* lines (docs/simulation.md, \"Tuning\")",
       [](CliOptions& o, const std::string&) { o.tune = true; }},
      {"--tune-compression", "LIST",
       "--tune's FERRY_COMPRESSION candidates, comma-separated, tried with the best settings "
       "(default none,onebit+ef,topk:0.01+ef,randomk:0.01+ef; empty: not searched)",
       [](CliOptions& o, const std::string& v) {
         o.tune_options.compressions.clear();
         std::string list = v + ",";
         for (size_t from = 0, comma; (comma = list.find(',', from)) != std::string::npos;
              from = comma + 1) {
           const std::string text = list.substr(from, comma - from);
           if (text.empty()) continue;
           CompressionSpec spec;
           if (Status s = CompressionSpec::Parse(text, &spec); !s.ok()) {
             throw FerryError(ErrorCode::kInvalidArgument, "--tune-compression: " + s.message());
           }
           o.tune_options.compressions.push_back(text);
         }
       }},
      {"--tune-backup-workers", "LIST",
       "--tune's FERRY_BACKUP_WORKERS candidates, comma-separated, tried with each policy's "
       "best settings without compression beside b=0 (default: 1 up to the number of slow "
       "workers of --worker-compute-scale and --rotating-slow-factor; 0 or empty: not "
       "searched)",
       [](CliOptions& o, const std::string& v) {
         std::vector<int> values;
         std::string list = v + ",";
         for (size_t from = 0, comma; (comma = list.find(',', from)) != std::string::npos;
              from = comma + 1) {
           const std::string text = list.substr(from, comma - from);
           if (!text.empty()) values.push_back(Integer("--tune-backup-workers", text, 0, 1 << 20));
         }
         o.tune_options.backup_workers = values;
       }},
      {"--tune-seeds", "N", "seeds per --tune candidate, each with 2% compute jitter (default 3)",
       [](CliOptions& o, const std::string& v) {
         o.tune_options.seeds = Integer("--tune-seeds", v, 1, 100);
       }},
      {"--help", nullptr, "this text", [](CliOptions& o, const std::string&) { o.help = true; }},
  };
  return flags;
}

// "pushpull:50M", a name in `dir`, or a file.
Workload ReadWorkload(const std::string& name, const std::string& dir) {
  const std::string pushpull = "pushpull:";
  if (name.rfind(pushpull, 0) == 0) {
    std::string size = name.substr(pushpull.size());
    double scale = 1;
    if (!size.empty() && (size.back() == 'K' || size.back() == 'M' || size.back() == 'G')) {
      scale = size.back() == 'K' ? 1024.0 : size.back() == 'M' ? 1048576.0 : 1073741824.0;
      size.pop_back();
    }
    // The bounds apply to the bytes (pushpull:1M is 1048576), not to the number written.
    const double bytes = Number("--workload pushpull:BYTES", size, 0, 1e15) * scale;
    if (bytes < 4 || bytes > 1e15) {
      Refuse("--workload pushpull:BYTES", "from 4 bytes to 1e15 bytes (50M, 4K, 1G)");
    }
    return PushPullWorkload(static_cast<uint64_t>(bytes));
  }
  std::error_code ec;
  if (std::filesystem::is_directory(name, ec)) return LoadTraceWorkload(name);  // FERRY_TRACE_DIR
  if (name.find('/') != std::string::npos || name.find(".csv") != std::string::npos) {
    return LoadWorkload(name);
  }
  return LoadWorkload(StrCat(dir, "/", name, "_layers.csv"));
}

// A pipeline file, or NAME for `dir`/NAME.json.
PipelineSpec ReadPipeline(const std::string& name, const std::string& dir) {
  const bool path = name.find('/') != std::string::npos ||
                    (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0);
  return LoadPipeline(path ? name : StrCat(dir, "/", name, ".json"));
}

}  // namespace

double ParseRate(const std::string& text) {
  std::string lower;
  for (char ch : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  size_t digits = 0;
  while (digits < lower.size() && (std::isdigit(static_cast<unsigned char>(lower[digits])) ||
                                   lower[digits] == '.')) {
    digits++;
  }
  const std::string number = lower.substr(0, digits);
  const std::string unit = lower.substr(digits);
  static const std::map<std::string, double> units = {
      {"", 1},        {"bit", 1},       {"kbit", 1e3},     {"mbit", 1e6},   {"gbit", 1e9},
      {"tbit", 1e12}, {"bps", 8},       {"kbps", 8e3},     {"mbps", 8e6},   {"gbps", 8e9},
      {"tbps", 8e12}, {"kibit", 1024.0}, {"mibit", 1048576.0}, {"gibit", 1073741824.0}};
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  auto it = units.find(unit);
  if (number.empty() || *end != '\0' || it == units.end() || !(v > 0) || !std::isfinite(v)) {
    Refuse("--rate", StrCat("'", text, "' is not a rate in tc's syntax (1gbit, 100mbit, 25gbit, "
                                      "125mbps)"));
  }
  return v * it->second;
}

std::pair<std::string, std::string> ParseAssignment(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    Refuse("--env", StrCat("'", text, "' is not NAME=VALUE"));
  }
  return {text.substr(0, eq), text.substr(eq + 1)};
}

CliOptions ParseCommandLine(const std::vector<std::string>& args,
                            const std::string& workloads_dir) {
  CliOptions o;
  bool servers_given = false;
  bool workload_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos && name.rfind("--", 0) == 0) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto flag = std::find_if(Flags().begin(), Flags().end(),
                             [&](const Flag& f) { return name == f.name; });
    if (flag == Flags().end()) Refuse(name, "unknown flag (ferry-sim --help lists them)");
    if (flag->value && !inline_value) {
      if (i + 1 >= args.size()) Refuse(name, StrCat("needs a value (", flag->value, ")"));
      value = args[++i];
    }
    if (name == "--servers") servers_given = true;
    if (name == "--workload") workload_given = true;
    flag->set(o, value);
  }
  if (o.help) return o;
  if (o.sim.cluster.colocate) {
    if (servers_given && o.sim.cluster.servers != 0) {
      Refuse("--servers", "--colocate puts one server on every worker's host; give extra "
                          "servers with --cpu-servers");
    }
    o.sim.cluster.servers = 0;
  }
  const size_t rates = o.sim.cluster.worker_rates_bits_per_s.size();
  if (rates != 0 && rates != static_cast<size_t>(o.sim.cluster.workers)) {
    Refuse("--worker-link-rates",
           StrCat(rates, " rates for ", o.sim.cluster.workers, " workers (--workers ",
                  o.sim.cluster.workers, "): one per worker, in rank order"));
  }
  for (const auto& [rank, factor] : o.sim.worker_compute_scale) {
    if (rank >= o.sim.cluster.workers) {
      Refuse("--worker-compute-scale",
             StrCat("rank ", rank, " is not a worker (--workers ", o.sim.cluster.workers, ")"));
    }
  }
  if (!o.pipeline.empty()) {
    if (workload_given) Refuse("--pipeline", "not with --workload: the file names its own tensors");
    if (o.tune) Refuse("--tune", "not with --pipeline (compare policies with --env instead)");
    if (o.sim.rotating_slow_factor != 1) Refuse("--rotating-slow-factor", "not with --pipeline");
    if (o.sim.catch_up != SimOptions().catch_up) {  // given
      Refuse("--catch-up", "not with --pipeline (its rounds wait for every worker)");
    }
    o.sim.pipeline = ScalePipeline(ReadPipeline(o.pipeline, workloads_dir), o.compute_scale,
                                   o.byte_scale);
    const int stages = o.sim.pipeline->num_stages();
    if (o.sim.cluster.workers % stages != 0) {
      Refuse("--workers", StrCat(o.sim.cluster.workers, " is not a multiple of the ", stages,
                                 " stages of --pipeline ", o.pipeline));
    }
  } else {
    if (o.sim.pipeline_step_boundary) Refuse("--step-boundary", "only with --pipeline");
    o.sim.workload = ScaleWorkload(ReadWorkload(o.workload, workloads_dir), o.compute_scale,
                                   o.byte_scale);
  }
  o.sim.model.network = o.network == "fair"   ? NetworkModel::kFair
                        : o.network == "fifo" ? NetworkModel::kFifo
                                              : NetworkModel::kQueued;
  return o;
}

std::string Usage() {
  std::string out =
      "ferry-sim: predicts a Ferry training step on a cluster you do not have, running\n"
      "Ferry's own scheduling code on a simulated network (docs/simulation.md).\n\n"
      "  ferry-sim --workload vgg16 --workers 64 --colocate --rate 25gbit\n\n";
  for (const Flag& f : Flags()) {
    std::string left = StrCat("  ", f.name, f.value ? StrCat(" ", f.value) : "");
    if (left.size() < 28) left.resize(28, ' ');
    out += StrCat(left, " ", f.help, "\n");
  }
  return out;
}

}  // namespace ferry::sim
