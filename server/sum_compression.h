#pragma once

// SumCompression: a server's side of gradient compression (common/compress/codec.h) for
// the dense keys of one engine (RoundProtocol owns one). A compressed push is decoded
// before anything else looks at it, so rounds, frames, deterministic order and the GPU
// summation see raw values; a round's sum of a compressed key is compressed once, when
// it is complete, and the same bytes answer every pusher (and a resend).
//
// Per key: the compressor of its sums, with error feedback's residual when the spec asks
// for it (the server's residual, of the sum). A new membership epoch forgets every
// residual (Clear); a retired key's goes with it (Forget).
//
// Threads: the engine thread that owns the keys only; no lock.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/compress/codec.h"
#include "common/transport/buffer.h"
#include "server/requests.h"

namespace ferry {

class SumCompression {
 public:
  // `max_raw_bytes`: the largest key a push may stand for (FERRY_MAX_MESSAGE_BYTES).
  explicit SumCompression(uint64_t max_raw_bytes) : max_raw_bytes_(max_raw_bytes) {}

  // A compressed push (Envelope.compression set) becomes the raw one it stands for:
  // payload decompressed, `length` the raw bytes; `compression` stays set. Returns the
  // reason if the push is malformed (an unknown spec, a frame, a non-float dtype, a raw
  // length that is no whole number of elements or too large, a corrupt payload), and
  // leaves it unchanged then.
  std::string DecodePush(Request& request);
  // The bytes every pusher of round `round` of `key` gets: `sum` (raw values of `dtype`)
  // compressed per `spec` (a canonical text DecodePush accepted).
  Buffer CompressSum(uint64_t key, uint32_t round, const std::string& spec, DataType dtype,
                     const Buffer& sum);
  void Forget(uint64_t key) { sums_.erase(key); }
  void Clear() { sums_.clear(); }

 private:
  // The parsed spec of `text`, cached; null if it does not parse (`why` set).
  const CompressionSpec* Spec(const std::string& text, std::string* why);

  const uint64_t max_raw_bytes_;
  std::unordered_map<std::string, CompressionSpec> specs_;
  std::unordered_map<uint64_t, std::unique_ptr<PartitionCompressor>> sums_;
};

}  // namespace ferry
