#pragma once

// PushCompression: a worker's side of gradient compression (common/compress/codec.h) for
// its dense push_pulls (DensePushPull owns one). An operation's compressor is chosen when
// it is submitted (Operation::compression: the tensor's own, set by a binding, else
// FERRY_COMPRESSION for a floating-point sum of at least FERRY_COMPRESSION_MIN_BYTES);
// each of its partitions that the compressor makes smaller is compressed when it is sent,
// with error feedback's residual and the momentum kept per key, and the compressed sum of
// every worker's pushes is decompressed into the output.
//
// Scheduling counts wire bytes: a compressed partition's task, credit and window are its
// compressed size. A compressed partition goes whole and alone (never cut in frames,
// never fused), and its compressed bytes are kept until it is answered, so a resend sends
// the same bytes (the residual is updated once per round).
//
// Invariant: one partition of a key is compressed at a time (a tensor's operations run one
// at a time; a partition is sent once per round), so a key's state is never shared.
// An elastic epoch clears every residual and momentum (Clear), as the servers do.
//
// Threads: the caller of DensePushPull's sends and replies, under WorkerContext::mu.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/compress/codec.h"
#include "common/transport/buffer.h"
#include "common/transport/message.h"
#include "worker/operation.h"
#include "worker/worker_counters.h"

namespace ferry {

class PushCompression {
 public:
  explicit PushCompression(WorkerCounters& counters) : counters_(counters) {}

  // Whether partition `p` of `op` travels compressed.
  static bool Compressed(const Operation& op, const PartitionSpec& p);
  // The bytes partition `p` of `op` puts on the wire (p.bytes when not compressed).
  static uint64_t WireBytes(const Operation& op, const PartitionSpec& p);
  // Partition `p` of `op`, compressed for round `round` of `key` by worker `rank`.
  // REQUIRES: Compressed(op, p).
  Buffer Compress(const Operation& op, const PartitionSpec& p, uint64_t key, uint32_t round,
                  int rank);
  // Marks push `m` of partition `p` of `op` as compressed (its compressor's text and the
  // raw bytes its payload stands for).
  static void Label(const Operation& op, const PartitionSpec& p, Message* m);
  // Why the sum `m` does not answer compressed partition `p` of `op` (empty if it does).
  static std::string CheckSum(const Operation& op, const PartitionSpec& p, const Message& m);
  // Writes the values the compressed sum `m` stands for into `out` (p.bytes), divided by
  // `workers` when `op` averages. False (nothing useful written) if `m` is corrupt; `why`
  // says how.
  static bool Deliver(const Operation& op, const PartitionSpec& p, const Message& m,
                      int workers, uint8_t* out, std::string* why);
  // Forgets every key's residual and momentum.
  void Clear() { keys_.clear(); }

 private:
  WorkerCounters& counters_;
  std::unordered_map<uint64_t, std::unique_ptr<PartitionCompressor>> keys_;
};

}  // namespace ferry
