// ferry-placement-balance: bytes per server for real models' gradients, with Ferry's
// placement beside BytePS's default key hashing of the same partitions (see
// bench/placement_balance.h). Prints a Markdown table of max/mean bytes per server
// (1.00 = every server carries the same bytes). Computation only: no cluster.
//
//   build/bin/ferry-placement-balance [--workloads=DIR] [--models=vgg16,resnet50,bert_base]
//       [--servers=2,4,8] [--partition_bytes=N] [--goal=1.05]

#include <gflags/gflags.h>

#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "bench/placement_balance.h"
#include "common/config/config.h"
#include "common/util/error.h"
#include "common/util/program_flags.h"

DEFINE_string(workloads, FERRY_SOURCE_DIR "/../shared/workloads",
              "folder holding <model>_tensors.csv (default: ../shared/workloads beside the "
              "repository)");
DEFINE_string(models, "vgg16,resnet50,bert_base", "comma-separated model names");
DEFINE_string(servers, "2,4,8", "comma-separated server counts");
DEFINE_int64(partition_bytes, ferry::Config().scheduling.partition_bytes,
             "largest partition (FERRY_PARTITION_BYTES; default: Ferry's default)");
DEFINE_double(goal, 1.05, "max/mean that Ferry's placement should not exceed");

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("max/mean bytes per server: Ferry's placement vs BytePS's djb2 hashing");
  ferry::ParseProgramFlags(&argc, &argv, __FILE__);
  using namespace ferry::bench;
  std::vector<int> server_counts;
  for (const auto& s : Split(FLAGS_servers)) {
    int n = std::atoi(s.c_str());
    if (n < 1) {
      std::fprintf(stderr, "--servers: '%s' is not a positive count\n", s.c_str());
      return 2;
    }
    server_counts.push_back(n);
  }
  if (FLAGS_partition_bytes < 4) {
    std::fprintf(stderr, "--partition_bytes must be at least one float32 (4)\n");
    return 2;
  }
  const uint64_t partition = static_cast<uint64_t>(FLAGS_partition_bytes);
  std::printf("partition bytes %llu; tensors in forward order; float32\n\n",
              static_cast<unsigned long long>(partition));
  std::printf(
      "| model | tensors | MB | servers | partitions | Ferry max/mean | BytePS djb2 max/mean | "
      "largest-first max/mean (reference) |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  int missed = 0;
  for (const auto& model : Split(FLAGS_models)) {
    std::vector<TensorRow> tensors;
    try {
      tensors = ForwardOrder(ReadTensorCsv(FLAGS_workloads + "/" + model + "_tensors.csv"));
    } catch (const ferry::FerryError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    std::vector<uint64_t> bytes;
    for (const auto& t : tensors) bytes.push_back(t.bytes);
    double mb = static_cast<double>(std::accumulate(bytes.begin(), bytes.end(), uint64_t{0})) / 1e6;
    for (int servers : server_counts) {
      Balance ferry = FerryBalance(bytes, servers, partition);
      Balance byteps = BytePSBalance(bytes, servers, partition);
      Balance lpt = LargestFirstBalance(bytes, servers, partition);
      bool ok = ferry.MaxOverMean() <= FLAGS_goal;
      if (!ok) ++missed;
      std::printf("| %s | %zu | %.1f | %d | %zu | %.4f%s | %.4f | %.4f |\n", model.c_str(),
                  tensors.size(), mb, servers, ferry.partitions, ferry.MaxOverMean(),
                  ok ? "" : " (above goal)", byteps.MaxOverMean(), lpt.MaxOverMean());
    }
  }
  std::printf("\nFerry's goal: max/mean <= %.2f; missed in %d case(s).\n", FLAGS_goal, missed);
  return 0;
}
