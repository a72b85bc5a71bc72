#include "worker/process_sets.h"

#include <algorithm>

#include "common/types/process_set.h"
#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry {

int ProcessSets::Add(std::vector<int> ranks, int workers, int named) {
  std::sort(ranks.begin(), ranks.end());
  FERRY_ENFORCE(!ranks.empty(), ErrorCode::kInvalidArgument, "a process set needs a rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    FERRY_ENFORCE(ranks[i] >= 0 && ranks[i] < workers, ErrorCode::kInvalidArgument,
                  "process set: rank ", ranks[i], " is not a worker rank (0..", workers - 1, ")");
    FERRY_ENFORCE(i == 0 || ranks[i] != ranks[i - 1], ErrorCode::kInvalidArgument,
                  "process set: rank ", ranks[i], " is named twice");
  }
  const std::string label = StrCat("process set {", ProcessSetRanks(ProcessSetMask(ranks)), "}");
  if (named != 0) {
    FERRY_ENFORCE(named >= kFirstNamedSet && named <= kMaxProcessSets && !sets_.count(named),
                  ErrorCode::kInvalidArgument, label, ": id ", named, " is taken or outside ",
                  kFirstNamedSet, "..", kMaxProcessSets);
  } else {
    FERRY_ENFORCE(next_id_ < kFirstNamedSet, ErrorCode::kInvalidArgument, label, ": at most ",
                  kFirstNamedSet - 1, " process sets per job (ids are not reused)");
  }
  const int id = named != 0 ? named : next_id_++;
  Set& s = sets_[id];
  s.mask = ProcessSetMask(ranks);
  s.ranks = std::move(ranks);
  s.catalog = std::make_unique<TensorCatalog>(partition_bytes_, server_weights_, false,
                                              ProcessSetFirstId(id));
  return id;
}

void ProcessSets::SwitchPartitionBytes(uint64_t bytes) {
  for (auto& [id, set] : sets_) set.catalog->SwitchPartitionBytes(bytes);
  partition_bytes_ = bytes;
}

void ProcessSets::Remove(int id) {
  FERRY_ENFORCE(sets_.count(id), ErrorCode::kInvalidArgument, "process set ", id,
                " is not registered");
  for (auto it = set_of_name_.begin(); it != set_of_name_.end();) {
    it = it->second == id ? set_of_name_.erase(it) : std::next(it);
  }
  sets_.erase(id);
}

std::shared_ptr<TensorInfo> ProcessSets::Declare(int id, int rank, const std::string& name,
                                                 DataType dtype, const std::vector<int64_t>& shape,
                                                 std::optional<int> priority,
                                                 std::shared_ptr<TensorInfo>* superseded) {
  auto it = sets_.find(id);
  FERRY_ENFORCE(it != sets_.end(), ErrorCode::kInvalidArgument, "tensor '", name,
                "': process set ", id, " is not registered (add_process_set)");
  Set& s = it->second;
  FERRY_ENFORCE(IsProcessSetMember(s.mask, rank), ErrorCode::kInvalidArgument, "tensor '", name,
                "': rank ", rank, " is not a member of process set ", id, " {",
                ProcessSetRanks(s.mask), "}; only its members call its collectives");
  auto bound = set_of_name_.find(name);
  FERRY_ENFORCE(bound == set_of_name_.end() || bound->second == id, ErrorCode::kInvalidArgument,
                "tensor '", name, "' belongs to process set ", bound->second,
                ", not to process set ", id);
  std::shared_ptr<TensorInfo> t = s.catalog->Declare(name, dtype, shape, priority, superseded);
  t->members = s.mask;
  t->set_size = static_cast<int>(s.ranks.size());
  set_of_name_[name] = id;
  return t;
}

TensorCatalog* ProcessSets::OfName(const std::string& name) {
  auto bound = set_of_name_.find(name);
  return bound == set_of_name_.end() ? nullptr : sets_.at(bound->second).catalog.get();
}

TensorCatalog* ProcessSets::OfId(uint32_t id) {
  const int set = ProcessSetOfId(id);
  if (set == 0) return nullptr;
  auto it = sets_.find(set);
  return it == sets_.end() ? nullptr : it->second.catalog.get();
}

std::vector<int> ProcessSets::Ranks(int id) const {
  auto it = sets_.find(id);
  return it == sets_.end() ? std::vector<int>() : it->second.ranks;
}

}  // namespace ferry
