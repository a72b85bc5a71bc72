#pragma once

// Partitioning and placement of tensors on servers.
//
// A tensor is cut into partitions of at most `partition_bytes` (rounded down to a
// whole number of elements; the last partition takes the remainder). Each partition
// goes to the server furthest below its share once the partition is counted: with
// `total` the bytes placed so far, argmax over servers s of
// weight[s] * (total + bytes) - load[s], ties to the lowest rank, servers of weight 0
// never. Every worker declares the same tensors in the same order and gets the same
// weights from the scheduler, so every worker computes the same placement with no
// extra round trip.
//
// Guarantee: no server ever holds a partition's worth of bytes more than its share,
// load[s] - weight[s] * total < largest partition, whatever the weights (the chosen
// server's shortfall is at least bytes / (servers of positive weight) > 0 before it
// takes the partition). With equal weights the rule is "least loaded first".
// The rule it replaces, argmin (load[s] + bytes) / weight[s], lets a heavy server run
// ahead of its share by up to weight[s] * (servers - 1) partitions (24 partitions for
// one server of weight 0.5 beside 50 of weight 0.01; see placement_test.cc).
//
// Weights that change (a server left, elastic training): the owner releases the partitions
// of the servers whose weight is now 0 and assigns them again in a fixed order
// (TensorCatalog::SetServerWeights); the others stay where they are.
//
// Releases: a tensor re-declared with another layout gives its partitions' bytes back
// (Release) before the new cut is placed. The guarantee then holds again once the servers
// below their share have been refilled by later partitions (a release can leave the
// others above their share for a while); every worker releases and assigns the same bytes
// in the same order, so every worker still computes the same placement.

#include <cstdint>
#include <string>
#include <vector>

#include "common/types/data_type.h"

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
  // REQUIRES: weights non-empty, non-negative, at least one positive. Only their
  // ratios matter: they are normalized to sum to 1.
  explicit Placement(std::vector<double> weights);
  // Picks the server for a partition of `bytes` and adds it to that server's load.
  int Assign(uint64_t bytes);
  // Gives back `bytes` that Assign put on `server` earlier. REQUIRES: they were assigned.
  void Release(int server, uint64_t bytes);
  // New weights (same servers; a server that left has weight 0) for the Assigns from now
  // on; the loads stay. REQUIRES: as for the constructor, and as many as before.
  void SetWeights(std::vector<double> weights);
  // Takes another placement's state (its weights and loads): Assign then decides as that
  // placement would. REQUIRES: as many servers as this one; weights as for SetWeights.
  void Restore(std::vector<double> weights, std::vector<uint64_t> loads);
  const std::vector<uint64_t>& loads() const { return loads_; }
  const std::vector<double>& weights() const { return weights_; }
  uint64_t total() const { return total_; }  // bytes placed so far

 private:
  std::vector<double> weights_;  // as given
  std::vector<double> shares_;   // weights_ / their sum
  std::vector<uint64_t> loads_;
  uint64_t total_ = 0;
};

// FNV-1a hash of a tensor's name, dtype and shape: what every push carries so a
// server can tell that workers declared the same tensor under one key.
uint64_t TensorHash(const std::string& name, DataType dtype, const std::vector<int64_t>& shape);

}  // namespace ferry
