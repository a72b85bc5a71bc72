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

Placement::Placement(std::vector<double> weights) : loads_(weights.size(), 0) {
  SetWeights(std::move(weights));
}

void Placement::SetWeights(std::vector<double> weights) {
  CHECK(!weights.empty());
  CHECK(loads_.size() == weights.size()) << weights.size() << " weights for " << loads_.size()
                                         << " servers";
  double sum = 0;
  for (double w : weights) {
    CHECK_GE(w, 0.0) << "negative server weight";
    sum += w;
  }
  CHECK_GT(sum, 0.0) << "no server has a positive weight";
  weights_ = std::move(weights);
  shares_.assign(weights_.size(), 0.0);
  for (size_t s = 0; s < weights_.size(); ++s) shares_[s] = weights_[s] / sum;
}

void Placement::Restore(std::vector<double> weights, std::vector<uint64_t> loads) {
  CHECK_EQ(loads.size(), loads_.size()) << "a placement of another number of servers";
  SetWeights(std::move(weights));
  loads_ = std::move(loads);
  total_ = 0;
  for (uint64_t l : loads_) total_ += l;
}

int Placement::Assign(uint64_t bytes) {
  int best = -1;
  double best_shortfall = -std::numeric_limits<double>::infinity();
  const double after = static_cast<double>(total_ + bytes);
  for (size_t s = 0; s < weights_.size(); ++s) {
    if (shares_[s] <= 0) continue;
    double shortfall = shares_[s] * after - static_cast<double>(loads_[s]);
    if (shortfall > best_shortfall) {
      best_shortfall = shortfall;
      best = static_cast<int>(s);
    }
  }
  CHECK_GE(best, 0) << "no server has a positive weight";
  loads_[best] += bytes;
  total_ += bytes;
  return best;
}

void Placement::Release(int server, uint64_t bytes) {
  CHECK(server >= 0 && static_cast<size_t>(server) < loads_.size()) << "server " << server;
  CHECK_GE(loads_[server], bytes) << "releasing bytes never assigned to server " << server;
  loads_[server] -= bytes;
  total_ -= bytes;
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
