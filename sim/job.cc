#include "sim/job.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/compress/codec.h"

#include "common/transport/message.h"
#include "sim/sim_sender.h"
#include "worker/placement.h"
#include "worker/tensor_catalog.h"
#include "worker/partition_scheduling/autotune.h"

namespace ferry::sim {

const char* CatchUpName(CatchUp c) {
  switch (c) {
    case CatchUp::kMostLayers:
      return "most-layers";
    case CatchUp::kAllPartitions:
      return "all-partitions";
    case CatchUp::kOff:
      return "off";
  }
  return "?";
}

CodecRates CodecRatesOf(const CompressionSpec& spec) {
  // GB/s of raw float32 bytes on one core (ferry-compression-bench, 1 MiB partitions,
  // medians on the project's 2-vCPU VM): compression (without, with error feedback), then
  // decompression. Momentum costs about what error feedback does.
  struct Row {
    CompressionSpec::Kind kind;
    double compress, compress_ef, decompress;
  };
  static const Row kRows[] = {
      {CompressionSpec::Kind::kFp16, 1.66, 1.2, 2.04},
      {CompressionSpec::Kind::kBf16, 3.08, 1.8, 3.28},
      {CompressionSpec::Kind::kOnebit, 10.5, 2.88, 6.8},
      {CompressionSpec::Kind::kTopk, 0.51, 0.29, 135},
      {CompressionSpec::Kind::kRandomk, 300, 10.7, 117},
      {CompressionSpec::Kind::kDither, 0.49, 0.22, 0.64},
  };
  for (const Row& r : kRows) {
    if (r.kind != spec.kind) continue;
    const bool state = spec.error_feedback || spec.momentum > 0;
    return CodecRates{(state ? r.compress_ef : r.compress) * 1e3, r.decompress * 1e3};
  }
  return CodecRates{};
}

const Layout& SimJob::CatalogLayout(Layouts& layouts, const std::vector<uint64_t>& bytes,
                                    uint32_t first_id, uint64_t partition_bytes) const {
  std::unique_ptr<Layout>& layout = layouts[partition_bytes];
  if (layout) return *layout;
  layout = std::make_unique<Layout>();
  layout->number = static_cast<uint32_t>(layouts.size() - 1);  // the sizes used before it
  layout->partition_bytes = partition_bytes;
  Placement placement(weights);
  // The worker's choice (Worker::CompressionOf, PushCompression): float32 tensors of at
  // least FERRY_COMPRESSION_MIN_BYTES, partitions the compressor makes smaller.
  const CompressionSpec& spec = config.compression.spec;
  for (size_t l = 0; l < bytes.size(); ++l) {
    std::vector<SimPart> parts;
    const bool compress = bytes[l] >= static_cast<uint64_t>(config.compression.min_bytes);
    for (const PartitionSpec& p : SplitTensor(bytes[l], 4, partition_bytes)) {
      const bool smaller = compress && CompressesTo(spec, DataType::kFloat32, p.bytes);
      parts.push_back(SimPart{
          MakeLayoutKey(first_id + static_cast<uint32_t>(l), layout->number, p.index), p.bytes,
          placement.Assign(p.bytes), smaller ? CompressedBytes(spec, p.bytes / 4) : p.bytes});
    }
    layout->parts.push_back(std::move(parts));
  }
  return *layout;
}

const Layout& SimJob::LayoutFor(uint64_t partition_bytes) {
  std::vector<uint64_t> bytes;
  for (const Layer& l : workload.layers) bytes.push_back(l.bytes);
  return CatalogLayout(layouts, bytes, 0, partition_bytes);
}

int SimJob::AddProcessSet(int members, const std::vector<uint64_t>& bytes,
                          uint64_t partition_bytes) {
  if (sets.empty()) sets.emplace_back();  // the global set's place
  const int id = static_cast<int>(sets.size());
  CHECK_LE(id, kMaxProcessSets) << "too many process sets";
  sets.push_back(SimProcessSet{members, bytes, {}});
  SetLayoutFor(id, partition_bytes);  // its layout 0
  return id;
}

const Layout& SimJob::SetLayoutFor(int set, uint64_t partition_bytes) {
  CHECK(set >= 1 && set < static_cast<int>(sets.size())) << "no process set " << set;
  SimProcessSet& s = sets[static_cast<size_t>(set)];
  return CatalogLayout(s.layouts, s.bytes, ProcessSetFirstId(set), partition_bytes);
}

int SimJob::Members(uint64_t key) const {
  const int set = ProcessSetOfId(KeyTensor(key));
  return set == 0 ? num_workers : sets[static_cast<size_t>(set)].members;
}

bool SimJob::InGlobalSet(uint64_t key) const { return ProcessSetOfId(KeyTensor(key)) == 0; }

bool SimJob::SizesPartitionsByTime() const {
  const Config::Scheduling& c = config.scheduling;
  return c.partition_ms > 0 && !c.autotune && c.policy != SchedulingPolicy::kP3;
}

uint64_t SimJob::TimedPartitionBytes(uint64_t current) {
  if (timed_partition_bytes == 0) {
    double sum = 0;
    int measured = 0;
    for (const SimSender* w : senders) {
      const double rate = w->core().measured_rate_bytes_per_s();
      if (rate > 0) {
        sum += rate;
        measured++;
      }
    }
    const double mean = measured > 0 ? sum / measured : 0.0;
    timed_mean_rate = mean;
    const int64_t ceiling = static_cast<int64_t>(current);
    timed_partition_bytes = static_cast<uint64_t>(PartitionBytesForRate(
        mean, config.scheduling.partition_ms, std::min(kMinTimedPartitionBytes, ceiling), ceiling));
  }
  return timed_partition_bytes;
}

}  // namespace ferry::sim
