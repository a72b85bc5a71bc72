#include "server/summation.h"

#include <utility>

namespace ferry {
namespace {

class CpuSummation : public Summation {
 public:
  explicit CpuSummation(SumPool* pool) : pool_(pool) {}

  void Add(uint64_t, KeyState& state, Buffer push) override {
    if (state.sum.empty()) {
      // Adopt the first push's frame as the sum: no copy. Later rounds adopt fresh
      // frames, so this buffer is never written again once the round is sent
      // (key_state.h, buffer invariant).
      state.sum = std::move(push);
    } else if (!push.empty()) {
      pool_->SumInto(state.sum.data(), push.data(), state.length / DataTypeSize(state.dtype),
                     state.dtype);
    }
  }
  bool Finish(uint64_t, KeyState&) override { return true; }  // state.sum is the sum
  void Reset(uint64_t) override {}  // the round lives in state.sum: the server drops it
  size_t RunCompletions() override { return 0; }

 private:
  SumPool* const pool_;
};

class GpuSummation : public Summation {
 public:
  GpuSummation(std::unique_ptr<GpuSummer> summer, SumReady ready)
      : ready_(std::move(ready)), summer_(std::move(summer)) {}

  void Add(uint64_t key, KeyState& state, Buffer push) override {
    // Copied into pinned staging before Add returns: `push` (the received frame) is
    // released when this function returns, and ZeroMQ may reuse its memory.
    summer_->Add(key, push.data(), push.size(), state.dtype);
  }
  bool Finish(uint64_t key, KeyState& state) override {
    // The closure holds the key and the generation, never a KeyState&: the server
    // looks the key up again when the sum arrives and checks the generation. It runs
    // only inside summer_->RunCompletions (called from this object), so `this` is alive.
    summer_->Finish(key, [this, key, generation = state.generation](Buffer sum) {
      ready_(key, generation, std::move(sum));
    });
    return false;
  }
  void Reset(uint64_t key) override { summer_->Reset(key); }
  size_t RunCompletions() override { return summer_->RunCompletions(); }

 private:
  // ready_ first: the summer (destroyed first) holds closures that call it.
  const SumReady ready_;
  std::unique_ptr<GpuSummer> summer_;
};

}  // namespace

std::unique_ptr<Summation> MakeCpuSummation(SumPool* pool) {
  return std::make_unique<CpuSummation>(pool);
}

std::unique_ptr<Summation> MakeGpuSummation(std::unique_ptr<GpuSummer> summer,
                                            Summation::SumReady ready) {
  return std::make_unique<GpuSummation>(std::move(summer), std::move(ready));
}

}  // namespace ferry
