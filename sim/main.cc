// ferry-sim: predicts a Ferry training step on a cluster you do not have
// (docs/simulation.md). `ferry-sim --help` lists the flags.

#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/util/error.h"
#include "sim/cli.h"

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    ferry::sim::CliOptions cli =
        ferry::sim::ParseCommandLine(args, FERRY_SOURCE_DIR "/bench/workloads");
    if (cli.help) {
      std::fputs(ferry::sim::Usage().c_str(), stdout);
      return 0;
    }
    const auto start = std::chrono::steady_clock::now();
    ferry::sim::SimResult r = ferry::sim::Simulate(cli.sim);
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string out = cli.format == "json" ? ferry::sim::FormatJson(cli, r, wall_s)
                                                 : ferry::sim::FormatText(cli, r, wall_s);
    std::fputs(out.c_str(), stdout);
    return 0;
  } catch (const ferry::FerryError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
