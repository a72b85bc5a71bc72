#pragma once

// ProcessSets: a worker's process sets (Horovod's): subsets of the worker ranks whose
// tensors are summed over their members only. Each set has its own TensorCatalog, whose ids
// start at ProcessSetFirstId(set) (tensor_catalog.h): its tensors are cut and placed like
// the global set's, in their own key space, so members agree on them whatever the other
// workers declare. A push of a set's tensor names its members (Envelope.members); a server
// sums it over them (server/round_protocol.h, Absent) and averages divide by their number.
//
// Contract: every worker adds the same sets in the same order (the id is the order of
// Add, from 1), members or not, or every member adds a set under the same named id; a tensor name belongs to one set (ferry.torch keeps the
// names of different sets apart). Ids are never reused. Not with elastic training or
// asynchronous training (the Worker refuses); Join refuses while a set exists. Sets follow
// the global set's partition size: SwitchPartitionBytes re-cuts every set's tensors when
// the global set's are (SetScheduling, autotune, FERRY_PARTITION_MS: every worker at the
// same point, so members agree), and a set added later starts in the size in force.
//
// Not thread-safe: the Worker guards it with WorkerContext::mu.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/tensor_catalog.h"

namespace ferry {

class ProcessSets {
 public:
  // `partition_bytes` (until SwitchPartitionBytes), `server_weights`: what a set's catalog
  // starts with.
  ProcessSets(uint64_t partition_bytes, std::vector<double> server_weights)
      : partition_bytes_(partition_bytes), server_weights_(std::move(server_weights)) {}

  // A new set of worker ranks `ranks` (of `workers`); returns its id: `id` when given
  // (kFirstNamedSet..kMaxProcessSets, unused: a set that only its members register, such as
  // a torch.distributed group, whose id every rank computes alike), else the next in order
  // (below kFirstNamedSet). Throws FerryError (kInvalidArgument) for an empty set, a rank out
  // of range or twice, an id taken or out of range, or too many sets.
  static constexpr int kFirstNamedSet = 128;
  int Add(std::vector<int> ranks, int workers, int id = 0);
  // Switches new operations of every set to partitions of `bytes`
  // (TensorCatalog::SwitchPartitionBytes), and sets added later start in it.
  // REQUIRES: no operation of the worker unfinished.
  void SwitchPartitionBytes(uint64_t bytes);
  // Forgets set `id` and its declarations (their keys stay on the servers). Throws for an
  // unknown id. REQUIRES: no operation of its tensors unfinished.
  void Remove(int id);
  // Declares `name` in set `id` (TensorCatalog::Declare) for rank `rank`. Throws FerryError
  // (kInvalidArgument) unless the set exists, `rank` is a member and the name is not
  // another set's.
  std::shared_ptr<TensorInfo> Declare(int id, int rank, const std::string& name, DataType dtype,
                                      const std::vector<int64_t>& shape,
                                      std::optional<int> priority,
                                      std::shared_ptr<TensorInfo>* superseded);
  // The catalog of the set `name` was declared in, or of declaration `id`; null: the
  // global set's.
  TensorCatalog* OfName(const std::string& name);
  TensorCatalog* OfId(uint32_t id);
  // The set `name` was declared in; 0: none (the global set).
  int SetOf(const std::string& name) const {
    auto bound = set_of_name_.find(name);
    return bound == set_of_name_.end() ? 0 : bound->second;
  }
  bool empty() const { return sets_.empty(); }
  // The members of set `id`; empty if unknown.
  std::vector<int> Ranks(int id) const;

 private:
  struct Set {
    std::vector<int> ranks;  // ascending
    std::string mask;        // common/types/process_set.h
    std::unique_ptr<TensorCatalog> catalog;
  };
  uint64_t partition_bytes_;
  const std::vector<double> server_weights_;
  std::map<int, Set> sets_;
  std::map<std::string, int> set_of_name_;
  int next_id_ = 1;
};

}  // namespace ferry
