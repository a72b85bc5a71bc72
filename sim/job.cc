#include "sim/job.h"

#include "common/transport/message.h"
#include "sim/sim_worker.h"
#include "worker/placement.h"
#include "worker/partition_scheduling/autotune.h"

namespace ferry::sim {

const Layout& SimJob::LayoutFor(uint64_t partition_bytes) {
  std::unique_ptr<Layout>& layout = layouts[partition_bytes];
  if (layout) return *layout;
  layout = std::make_unique<Layout>();
  layout->number = static_cast<uint32_t>(layouts.size() - 1);
  layout->partition_bytes = partition_bytes;
  Placement placement(weights);
  for (size_t l = 0; l < workload.layers.size(); ++l) {
    std::vector<SimPart> parts;
    for (const PartitionSpec& p : SplitTensor(workload.layers[l].bytes, 4, partition_bytes)) {
      parts.push_back(SimPart{MakeLayoutKey(static_cast<uint32_t>(l), layout->number, p.index),
                              p.bytes, placement.Assign(p.bytes)});
    }
    layout->parts.push_back(std::move(parts));
  }
  return *layout;
}

uint64_t SimJob::TimedPartitionBytes(uint64_t current) {
  if (timed_partition_bytes == 0) {
    double sum = 0;
    int measured = 0;
    for (const SimWorker* w : workers) {
      const double rate = w->core().measured_rate_bytes_per_s();
      if (rate > 0) {
        sum += rate;
        measured++;
      }
    }
    const double mean = measured > 0 ? sum / measured : 0.0;
    const int64_t ceiling = static_cast<int64_t>(current);
    timed_partition_bytes = static_cast<uint64_t>(PartitionBytesForRate(
        mean, config.scheduling.partition_ms, std::min(kMinTimedPartitionBytes, ceiling), ceiling));
  }
  return timed_partition_bytes;
}

}  // namespace ferry::sim
