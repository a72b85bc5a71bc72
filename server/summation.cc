#include "server/summation.h"

#include <cstring>
#include <utility>

#include "common/util/error.h"

namespace ferry {
namespace {

class CpuSummation : public Summation {
 public:
  CpuSummation(SumPool* pool, SharedAllocator allocate_shared)
      : pool_(pool), allocate_shared_(std::move(allocate_shared)) {}

  void Add(uint64_t, DataType dtype, uint64_t length, Buffer& sum, Buffer push,
           ReduceOp op) override {
    if (sum.empty() && push.lent()) {
      // A worker's shared-memory slot (shm_lane.h) goes back to it once the push is
      // added: the first add copies it into the round's own sum, in shared memory when
      // there is room (so the same-host workers read it from there).
      if (allocate_shared_) sum = allocate_shared_(push.size());
      if (sum.empty()) sum = Buffer::Allocate(push.size());
      std::memcpy(sum.data(), push.data(), push.size());
    } else if (sum.empty()) {
      // Adopt the first push's frame as the sum: no copy. Later rounds adopt fresh
      // frames, so this buffer is never written again once the round is sent
      // (key_state.h, buffer invariant).
      sum = std::move(push);
    } else if (!push.empty() && op == ReduceOp::kSum) {
      pool_->SumInto(sum.data(), push.data(), length / DataTypeSize(dtype), dtype);
    } else if (!push.empty()) {
      ReduceInto(sum.data(), push.data(), length / DataTypeSize(dtype), dtype, op);
    }
  }
  bool Finish(uint64_t, uint64_t) override { return true; }  // `sum` is the sum
  void Reset(uint64_t) override {}  // the open sum lives in the caller's `sum`: it drops it
  void Forget(uint64_t) override {}
  size_t RunCompletions() override { return 0; }

 private:
  SumPool* const pool_;
  const SharedAllocator allocate_shared_;
};

class GpuSummation : public Summation {
 public:
  GpuSummation(std::unique_ptr<GpuSummer> summer, SumReady ready)
      : ready_(std::move(ready)), summer_(std::move(summer)) {}

  void Add(uint64_t key, DataType dtype, uint64_t, Buffer&, Buffer push, ReduceOp op) override {
    FERRY_ENFORCE(op == ReduceOp::kSum, ErrorCode::kInvalidArgument, "the GPU server sums only; ",
                  ReduceOpName(op), " needs FERRY_SERVER_DEVICE=cpu");
    // Copied into pinned staging before Add returns: `push` (the received frame) is
    // released when this function returns, and ZeroMQ may reuse its memory.
    summer_->Add(key, push.data(), push.size(), dtype);
  }
  bool Finish(uint64_t key, uint64_t generation) override {
    // The closure holds the key and the generation, never a key's state: the protocol
    // looks the key up again when the sum arrives and checks the generation. It runs
    // only inside summer_->RunCompletions (called from this object), so `this` is alive.
    summer_->Finish(
        key, [this, key, generation](Buffer sum) { ready_(key, generation, std::move(sum)); });
    return false;
  }
  void Reset(uint64_t key) override { summer_->Reset(key); }
  void Forget(uint64_t key) override { summer_->Forget(key); }
  size_t RunCompletions() override { return summer_->RunCompletions(); }

 private:
  // ready_ first: the summer (destroyed first) holds closures that call it.
  const SumReady ready_;
  std::unique_ptr<GpuSummer> summer_;
};

}  // namespace

std::unique_ptr<Summation> MakeCpuSummation(SumPool* pool, SharedAllocator allocate_shared) {
  return std::make_unique<CpuSummation>(pool, std::move(allocate_shared));
}

std::unique_ptr<Summation> MakeGpuSummation(std::unique_ptr<GpuSummer> summer,
                                            Summation::SumReady ready) {
  return std::make_unique<GpuSummation>(std::move(summer), std::move(ready));
}

}  // namespace ferry
