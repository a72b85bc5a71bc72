#pragma once

// Partitioning and placement of tensors on servers.
//
// A tensor is cut into partitions of at most `partition_bytes` (rounded down to a
// whole number of elements; the last partition takes the remainder). Each partition
// goes to the server with the least weighted load after adding it: argmin over
// servers s of (load[s] + bytes) / weight[s], ties to the lowest rank, servers of
// weight 0 never. Every worker declares the same tensors in the same order and gets
// the same weights from the scheduler, so every worker computes the same placement
// with no extra round trip.

#include <cstdint>
#include <string>
#include <vector>

#include "common/reduce/reduce.h"

namespace ferry {

struct PartitionSpec {
  uint32_t index = 0;
  uint64_t offset = 0;  // bytes from the tensor's start
  uint64_t bytes = 0;
  int server = 0;       // server rank
};

// Byte ranges of a tensor's partitions. REQUIRES: partition_bytes >= element size.
std::vector<PartitionSpec> SplitTensor(uint64_t bytes, size_t element_size,
                                       uint64_t partition_bytes);

class Placement {
 public:
  // REQUIRES: weights non-empty, non-negative, at least one positive.
  explicit Placement(std::vector<double> weights);
  // Picks the server for a partition of `bytes` and adds it to that server's load.
  int Assign(uint64_t bytes);
  const std::vector<uint64_t>& loads() const { return loads_; }
  const std::vector<double>& weights() const { return weights_; }

 private:
  std::vector<double> weights_;
  std::vector<uint64_t> loads_;
};

// FNV-1a hash of a tensor's name, dtype and shape: what every push carries so a
// server can tell that workers declared the same tensor under one key.
uint64_t TensorHash(const std::string& name, DataType dtype, const std::vector<int64_t>& shape);

}  // namespace ferry
