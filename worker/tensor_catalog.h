#pragma once

// TensorCatalog: a worker's tensors (declarations in forward order), their cuts into
// partitions for every partition size used so far (layouts), the placement of those
// partitions on servers, and each partition's next round.
//
// Layouts: a tensor cut with another partition size uses fresh keys (a layout
// generation in the key, common/transport/message.h), because a server fixes a key's
// length at its first push. Cutting in id order makes the placement a function of the
// declarations and the size alone, so every worker computes the same whenever it
// switches, and switching back reuses a layout's keys and rounds.
// Invariant: the current layout has cut every declared tensor; every layout cuts
// tensors in id order.
//
// Not thread-safe: its owner (the Worker) guards it with its lock.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/reduce/reduce.h"
#include "worker/placement.h"

namespace ferry {

// A tensor cut in one layout.
struct Cut {
  std::vector<PartitionSpec> parts;  // empty: not cut in this layout yet
  std::vector<uint32_t> rounds;      // next round, per partition
};

struct TensorInfo {
  uint32_t id = 0;  // the declaration index
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t hash = 0;  // TensorHash: servers compare it across workers
  int priority = 0;
  std::vector<Cut> cuts;              // by layout generation
  std::vector<uint32_t> rows_rounds;  // by server rank: next round of its rows key (lazy)
};

std::string ShapeString(const std::vector<int64_t>& shape);

class TensorCatalog {
 public:
  // `partition_bytes`: the first layout's; `server_weights`: placement weights by rank.
  TensorCatalog(uint64_t partition_bytes, std::vector<double> server_weights);

  // Declares a tensor (see Worker::DeclareTensor): a new name gets the next id and is
  // cut in the current layout; a known one must match in dtype and element count (its
  // priority is updated when given). Throws FerryError (kInvalidArgument).
  TensorInfo& Declare(const std::string& name, DataType dtype, const std::vector<int64_t>& shape,
                      std::optional<int> priority);
  TensorInfo* Find(const std::string& name);  // null if not declared
  TensorInfo& at(uint32_t id) { return *tensors_[id]; }
  size_t size() const { return tensors_.size(); }
  // The tensor's name for messages; "?" if unknown.
  std::string NameOf(uint32_t id) const;

  // The generation new operations use, and its partition size.
  uint32_t layout() const { return layout_; }
  uint64_t partition_bytes() const { return layouts_[layout_]->partition_bytes; }
  // Switches new operations to partitions of `bytes`: finds or makes its layout and cuts
  // every tensor in it. Returns the generation. Throws (kInvalidArgument), cutting
  // nothing, if a tensor would get too many partitions or all layouts are used.
  // REQUIRES: no operation of the worker unfinished.
  uint32_t SwitchPartitionBytes(uint64_t bytes);
  // Every key starts over at round 0 (after a join).
  void ResetRounds();
  // Bytes placed on each server (by rank) in the current layout.
  std::vector<uint64_t> PlacedBytes() const;

 private:
  struct Layout {
    Layout(uint64_t bytes, const std::vector<double>& weights)
        : partition_bytes(bytes), placement(weights) {}
    uint64_t partition_bytes;
    Placement placement;
    uint32_t cut = 0;  // tensors 0..cut-1 are cut in this layout
  };
  void CutTensor(uint32_t gen, TensorInfo& t);

  const std::vector<double> server_weights_;
  std::vector<std::unique_ptr<TensorInfo>> tensors_;  // by id
  std::map<std::string, uint32_t> ids_;               // name -> id
  std::vector<std::unique_ptr<Layout>> layouts_;      // by generation
  uint32_t layout_ = 0;
};

}  // namespace ferry
