#pragma once

// Compression codecs (compression_spec.h) for the partitions of floating-point tensors:
// the worker compresses each push, the server decompresses the pushes, sums them and
// compresses the sum once for every pusher.
//
// Wire formats (little-endian; the size is fixed by the spec and the element count n,
// whatever the tensor's dtype; k = max(1, floor(R * n))):
//   fp16, bf16  n x uint16 (round to nearest even)
//   onebit      float32 scale (mean |x|), then ceil(n / 8) bytes: bit i % 8 of byte i / 8
//               is set where element i is negative; element i reads back as -scale or +scale
//   topk        k x (uint32 index, float32 value), indices strictly ascending, below n
//   randomk     k x float32: the values at the indices drawn from the seed (in draw order;
//               an index may be drawn twice), which every side draws alike
//   dither      float32 scale (max |x|), then n bytes: bit 7 the sign, bits 0-6 the level
//               l in 0..S (natural levels: 0 and 2^(l-S); linear: l / S)
//
// Every codec computes in float32 (float64 tensors too); the decompressed values are
// written in the tensor's dtype. The same spec, seed and input give the same bytes on
// every machine (no floating-point reduction order depends on threads or vector width:
// the sums are taken in index order).
//
// Seeds: CompressionSeed(key, round) is shared by every worker and the server (random-k's
// indices); dithering's rounding adds the pusher's rank, so workers round independently.

#include <cstdint>
#include <vector>

#include "common/compress/compression_spec.h"
#include "common/types/data_type.h"
#include "common/util/status.h"

namespace ferry {

// The wire bytes of n elements (any float dtype). REQUIRES: !spec.none().
uint64_t CompressedBytes(const CompressionSpec& spec, uint64_t n);
// Whether a partition of `raw_bytes` of `dtype` is compressed: a floating-point dtype,
// and fewer wire bytes than raw ones (fp16 of a float16 tensor is not).
bool CompressesTo(const CompressionSpec& spec, DataType dtype, uint64_t raw_bytes);
// The seed of round `round` of `key`, plus `salt` (dithering: the pusher's rank + 1).
uint64_t CompressionSeed(uint64_t key, uint32_t round, uint64_t salt = 0);
// The seed of worker `rank`'s push of round `round` of `key`: the round's shared one, but
// for dithering (each worker rounds on its own).
uint64_t PushSeed(const CompressionSpec& spec, uint64_t key, uint32_t round, int rank);

// Writes the n values `wire` stands for into `out` (n elements of `dtype`). A wire of the
// wrong size, an index out of order or range, a level above S, a negative scale or a
// dithering scale that is not finite is refused (kBadMessage, saying which) and `out` is
// left unspecified. What an encoder wrote is never refused: non-finite gradients travel as
// onebit's non-finite scale (as raw pushes would carry them) and as dithering's zeros.
Status Decompress(const CompressionSpec& spec, DataType dtype, const uint8_t* wire,
                  uint64_t wire_bytes, uint64_t n, uint64_t seed, void* out);

// One partition's compressor on one side, with the state its options keep: the residual
// of error feedback (what compression lost, added to the next round's values) and the
// momentum. Not thread-safe: one partition is compressed by one thread at a time (a
// partition's next round starts only after its previous one finished).
class PartitionCompressor {
 public:
  // `momentum`: whether this side applies the spec's momentum (workers do; the server,
  // compressing sums, does not).
  PartitionCompressor(const CompressionSpec& spec, DataType dtype, uint64_t n, bool momentum);

  // Compresses the n elements at `input` into `out` (CompressedBytes(spec, n) bytes).
  void Compress(const void* input, uint64_t seed, uint8_t* out);
  // Forgets the residual and the momentum (an elastic reset).
  void Clear();
  const CompressionSpec& spec() const { return spec_; }
  // Error feedback's residual (tests).
  const std::vector<float>& residual() const { return residual_; }

 private:
  const CompressionSpec spec_;
  const DataType dtype_;
  const uint64_t n_;
  const bool momentum_on_;
  std::vector<float> residual_;  // error feedback; empty without it
  std::vector<float> momentum_;  // empty without momentum
  std::vector<float> work_;      // the values compressed this round (float32)
  std::vector<float> decoded_;   // what they read back as (error feedback)
};

// The codecs on float32 values, for PartitionCompressor, the tests' references and the
// benchmarks: `values` -> `out` (CompressedBytes bytes).
void CompressFloats(const CompressionSpec& spec, const float* values, uint64_t n, uint64_t seed,
                    uint8_t* out);

}  // namespace ferry
