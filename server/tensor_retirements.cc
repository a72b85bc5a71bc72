#include "server/tensor_retirements.h"

#include "common/util/strings.h"

namespace ferry {

bool TensorRetirements::Note(uint32_t tensor, int rank) {
  auto [it, added] = retired_.try_emplace(tensor, std::vector<bool>(num_workers_, false));
  if (rank >= 0 && rank < num_workers_) it->second[rank] = true;
  return added;
}

std::vector<uint32_t> TensorRetirements::TakeComplete(const std::vector<bool>& joined) {
  std::vector<uint32_t> done;
  for (auto it = retired_.begin(); it != retired_.end();) {
    bool complete = true;
    for (int r = 0; r < num_workers_ && complete; ++r) {
      complete = it->second[r] || (static_cast<size_t>(r) < joined.size() && joined[r]);
    }
    if (complete) {
      done.push_back(it->first);
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
  return done;
}

bool TensorRetirements::RetiredBy(uint32_t tensor, int rank) const {
  auto it = retired_.find(tensor);
  return it != retired_.end() && rank >= 0 && rank < num_workers_ && it->second[rank];
}

std::string TensorRetirements::Refusal(uint32_t tensor, int rank) const {
  auto it = retired_.find(tensor);
  if (it == retired_.end()) return "";
  if (RetiredBy(tensor, rank)) {
    return StrCat("worker ", rank, " used tensor ", tensor, " after it retired it");
  }
  std::string ranks;
  for (int r = 0; r < num_workers_; ++r) {
    if (it->second[r]) ranks += StrCat(ranks.empty() ? "" : ", ", r);
  }
  return StrCat("worker(s) ", ranks, " declared the name of tensor ", tensor,
                " anew (another dtype or size) and retired it, but ",
                rank < 0 ? std::string("other workers still use the old declaration")
                         : StrCat("worker ", rank, " still uses the old declaration"),
                ": every worker must declare a name anew at the same point");
}

}  // namespace ferry
