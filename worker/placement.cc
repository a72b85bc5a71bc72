#include "worker/placement.h"

#include <glog/logging.h>

#include <limits>

namespace ferry {

std::vector<PartitionSpec> SplitTensor(uint64_t bytes, size_t element_size,
                                       uint64_t partition_bytes) {
  CHECK_GE(partition_bytes, element_size);
  uint64_t step = partition_bytes - partition_bytes % element_size;
  std::vector<PartitionSpec> parts;
  uint64_t offset = 0;
  uint32_t index = 0;
  do {
    PartitionSpec p;
    p.index = index++;
    p.offset = offset;
    p.bytes = std::min(step, bytes - offset);
    parts.push_back(p);
    offset += p.bytes;
  } while (offset < bytes);
  return parts;
}

Placement::Placement(std::vector<double> weights)
    : weights_(std::move(weights)), loads_(weights_.size(), 0) {
  CHECK(!weights_.empty());
}

int Placement::Assign(uint64_t bytes) {
  int best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < weights_.size(); ++s) {
    if (weights_[s] <= 0) continue;
    double score = static_cast<double>(loads_[s] + bytes) / weights_[s];
    if (score < best_score) {
      best_score = score;
      best = static_cast<int>(s);
    }
  }
  CHECK_GE(best, 0) << "no server has a positive weight";
  loads_[best] += bytes;
  return best;
}

uint64_t TensorHash(const std::string& name, DataType dtype, const std::vector<int64_t>& shape) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  };
  mix(name.data(), name.size());
  int32_t t = static_cast<int32_t>(dtype);
  mix(&t, sizeof t);
  for (int64_t d : shape) mix(&d, sizeof d);
  return h;
}

}  // namespace ferry
