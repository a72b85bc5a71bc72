#pragma once

// TensorRetirements: which workers retired which tensors (RETIRE: a worker declared a
// name anew with another dtype or size and is done with the old declaration's keys,
// worker/tensor_catalog.h). One per engine, used by its thread only; no lock.
//
// A tensor's keys are dropped once every worker retired it or joined (a joined worker
// pushes nothing). Until then they stay, so a worker that has not yet received the last
// sum of the old declaration can still ask for it again (RESEND_SUM). A worker that
// pushes a tensor another worker retired disagrees with it on the declaration: it is
// refused with the reason (Refusal), as are rounds of it already waiting for pushes.
// Entries live only while a retirement is incomplete: normally the tensors being
// re-declared. A worker that never retires a tensor (it was refused, or an operation of it
// ended with requests still out, sequencer.h) leaves its entry, and the tensor's keys,
// until every worker joined.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ferry {

class TensorRetirements {
 public:
  explicit TensorRetirements(int num_workers) : num_workers_(num_workers) {}

  // `rank` retired `tensor`. True the first time any worker retires it.
  bool Note(uint32_t tensor, int rank);
  // The tensors every worker retired or joined (`joined` by rank); forgotten here.
  std::vector<uint32_t> TakeComplete(const std::vector<bool>& joined);
  // Whether `rank` retired `tensor` (and not every worker did yet).
  bool RetiredBy(uint32_t tensor, int rank) const;
  // Empty when `rank` may push `tensor`; else why not (another worker retired it, or
  // `rank` itself did). `rank` -1: why an open round of it (other workers' pushes) is refused.
  std::string Refusal(uint32_t tensor, int rank) const;
  bool empty() const { return retired_.empty(); }

 private:
  const int num_workers_;
  std::map<uint32_t, std::vector<bool>> retired_;  // tensor -> by rank: retired it
};

}  // namespace ferry
