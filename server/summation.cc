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
    const size_t count = length / DataTypeSize(dtype);
    if (sum.empty()) {
      // Adopt the first push's frame as the sum: no copy. Later rounds adopt fresh
      // frames, so this buffer is never written again once the round is sent
      // (key_state.h, buffer invariant). A lent one (a worker's shared-memory slot) only
      // until the next push or Finish.
      sum = std::move(push);
    } else if (sum.lent() && !push.empty()) {
      // The lent first push and this one, in one pass, into the round's own sum.
      Buffer own = Own(sum.size());
      if (op == ReduceOp::kSum) {
        pool_->SumTo(own.data(), sum.data(), push.data(), count, dtype);
      } else {
        std::memcpy(own.data(), sum.data(), sum.size());
        ReduceInto(own.data(), push.data(), count, dtype, op);
      }
      sum = std::move(own);
    } else if (!push.empty() && op == ReduceOp::kSum) {
      pool_->SumInto(sum.data(), push.data(), count, dtype);
    } else if (!push.empty()) {
      ReduceInto(sum.data(), push.data(), count, dtype, op);
    }
  }
  bool Finish(uint64_t, uint64_t, Buffer& sum) override {
    if (sum.lent()) {  // one push alone: its slot goes back to the worker
      Buffer own = Own(sum.size());
      std::memcpy(own.data(), sum.data(), sum.size());
      sum = std::move(own);
    }
    return true;  // `sum` is the sum
  }
  void Reset(uint64_t) override {}  // the open sum lives in the caller's `sum`: it drops it
  void Forget(uint64_t) override {}
  size_t RunCompletions() override { return 0; }

 private:
  // A round's own sum buffer: in the shared arena when there is room (same-host workers
  // then read it without a copy), else on the heap. Only for rounds whose first push was
  // lent, so a job without same-host workers never touches the arena.
  Buffer Own(size_t bytes) const {
    Buffer b = allocate_shared_ ? allocate_shared_(bytes) : Buffer();
    return b.empty() ? Buffer::Allocate(bytes) : b;
  }

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
  bool Finish(uint64_t key, uint64_t generation, Buffer&) override {
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
