// ferry-sim: predicts a Ferry training step on a cluster you do not have
// (docs/simulation.md). `ferry-sim --help` lists the flags.

#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/util/error.h"
#include "sim/cli.h"
#include "sim/tune_report.h"

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // Every simulated worker runs the worker's code, whose INFO lines (a profile built, ...)
  // would come once per worker: warnings and errors only.
  FLAGS_minloglevel = google::GLOG_WARNING;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    ferry::sim::CliOptions cli =
        ferry::sim::ParseCommandLine(args, FERRY_SOURCE_DIR "/bench/workloads");
    if (cli.help) {
      std::fputs(ferry::sim::Usage().c_str(), stdout);
      return 0;
    }
    const auto start = std::chrono::steady_clock::now();
    if (cli.tune) {
      const ferry::sim::TuneResult t = ferry::sim::Tune(
          cli.sim, cli.tune_options, [](const ferry::sim::Candidate& c) {
            std::fprintf(stderr, "ferry-sim --tune: %.2f ms  %s\n", c.median_ms,
                         ferry::sim::DescribeEnv(c.env).c_str());
          });
      const double wall_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fputs((cli.format == "json" ? ferry::sim::FormatTuneJson(cli, t, wall_s)
                                       : ferry::sim::FormatTuneText(cli, t, wall_s))
                     .c_str(),
                 stdout);
      return 0;
    }
    ferry::sim::SimResult r = ferry::sim::Simulate(cli.sim);
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string out = cli.format == "json" ? ferry::sim::FormatJson(cli, r, wall_s)
                                                 : ferry::sim::FormatText(cli, r, wall_s);
    std::fputs(out.c_str(), stdout);
    if (!cli.parts_out.empty()) {
      std::ofstream f(cli.parts_out);
      f << ferry::sim::FormatPartsJson(r);
      FERRY_ENFORCE(f.good(), ferry::ErrorCode::kInvalidConfig, "--parts-out: cannot write ",
                    cli.parts_out);
    }
    return 0;
  } catch (const ferry::FerryError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
