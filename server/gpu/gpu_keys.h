#pragma once

// GpuKeys: the device-independent bookkeeping of a GpuSummer (gpu_summer.h), shared by
// CudaSummer and the tests' CPU stand-in (tests/server/fake_gpu_summer.h), so both
// keep the contract's rules with the same words: each key's length and type (fixed by
// its first Add), its stream (round robin at the first Add) and whether a round is open,
// and the refusals of a bad call (FerryError(kInvalidArgument), nothing changed).
//
// `Accumulator` is where a key's sum builds up (device memory, or a host Buffer in the
// stand-in). Threads: the summer's one thread only.

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>

#include "common/types/data_type.h"
#include "common/util/error.h"

namespace ferry {
namespace gpu {

template <typename Accumulator>
class GpuKeys {
 public:
  struct Key {
    size_t lane = 0;  // the stream the key's work is queued on
    size_t bytes = 0;
    DataType type = DataType::kFloat32;
    Accumulator accumulator;
    bool open = false;  // a round has had its first Add and no Finish yet
  };

  // Throws FerryError(kInvalidArgument) unless 1 <= streams <= 64.
  explicit GpuKeys(int streams) : streams_(static_cast<size_t>(streams)) {
    FERRY_ENFORCE(streams >= 1 && streams <= 64, ErrorCode::kInvalidArgument,
                  "GpuSummer: streams must be 1..64, got ", streams);
  }

  size_t streams() const { return streams_; }

  // The key an Add of `bytes` of `type` goes to. Its first Add defines it, on the next
  // stream in turn, with an accumulator of `bytes` made by `allocate(accumulator,
  // bytes)`. Refuses an invalid type, a length that is not whole elements, and a length
  // or type other than the key's.
  template <typename Allocate>
  Key& ForAdd(uint64_t key, size_t bytes, DataType type, Allocate&& allocate) {
    FERRY_ENFORCE(IsValidDataType(static_cast<int32_t>(type)), ErrorCode::kInvalidArgument,
                  "GpuSummer: key ", key, ": invalid data type ", static_cast<int32_t>(type));
    FERRY_ENFORCE(bytes % DataTypeSize(type) == 0, ErrorCode::kInvalidArgument, "GpuSummer: key ",
                  key, ": ", bytes, " bytes is not a whole number of ", DataTypeName(type),
                  " elements");
    auto it = keys_.find(key);
    if (it != keys_.end()) {
      const Key& k = it->second;
      FERRY_ENFORCE(k.bytes == bytes && k.type == type, ErrorCode::kInvalidArgument,
                    "GpuSummer: key ", key, " holds ", k.bytes, " bytes of ", DataTypeName(k.type),
                    "; Add got ", bytes, " bytes of ", DataTypeName(type));
      return it->second;
    }
    Key k;
    k.lane = next_lane_;
    k.bytes = bytes;
    k.type = type;
    allocate(k.accumulator, bytes);
    next_lane_ = (next_lane_ + 1) % streams_;
    return keys_.emplace(key, std::move(k)).first->second;
  }

  // The key a Finish ends. Refuses a key without an open round.
  Key& ForFinish(uint64_t key) {
    auto it = keys_.find(key);
    FERRY_ENFORCE(it != keys_.end() && it->second.open, ErrorCode::kInvalidArgument,
                  "GpuSummer: Finish of key ", key, ", which has no open round");
    return it->second;
  }

  // The key, or null if it never had an Add (or was forgotten).
  const Key* Find(uint64_t key) const {
    auto it = keys_.find(key);
    return it == keys_.end() ? nullptr : &it->second;
  }
  // Drops the key and its accumulator (the caller made sure no queued work uses it).
  void Forget(uint64_t key) { keys_.erase(key); }

  // Drops the key's open round, if any.
  void Reset(uint64_t key) {
    auto it = keys_.find(key);
    if (it != keys_.end()) it->second.open = false;
  }

  bool HasOpenRound(uint64_t key) const {
    auto it = keys_.find(key);
    return it != keys_.end() && it->second.open;
  }

 private:
  const size_t streams_;
  size_t next_lane_ = 0;
  std::unordered_map<uint64_t, Key> keys_;
};

}  // namespace gpu
}  // namespace ferry
