#pragma once

// Operation: one push_pull (dense or rows) of one tensor, from the call until it
// finished, as the Worker's kinds of operation (operation_kind.h) and the Sequencer
// (sequencer.h) see it. Its progress counters are guarded by WorkerContext::mu.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/compress/compression_spec.h"
#include "common/reduce/reduce.h"
#include "common/transport/message.h"
#include "worker/operation_table.h"
#include "worker/tensor_catalog.h"

namespace ferry {

// Sparse rows of one operation (RowsPushPull), fixed at the call.
struct RowsPlan {
  uint64_t row_elements = 0;
  uint64_t row_bytes = 0;
  std::vector<Message> pushes;  // by server rank, built at the call; sent at the start
  // By server rank: for each row its push carries, the row's index in the caller's list
  // (where its sum goes in `output`). Read without the lock.
  std::vector<std::vector<uint64_t>> positions;
};

// One push_pull (dense or rows) of one tensor, from the call until it finished.
struct Operation {
  Handle handle = 0;  // in the Worker's OperationTable
  std::shared_ptr<TensorInfo> tensor;  // its declaration: held until the operation is gone
  const uint8_t* input = nullptr;
  uint8_t* output = nullptr;
  bool average = false;
  // Worker::PullAverageAsync: no input; a header-only push that sits the round out.
  bool sit_out = false;
  // The ranks some partition's sum left out (backup workers, Envelope.left_out; a rank
  // mask; empty: none). Under WorkerContext::mu.
  std::string left_out;
  ReduceOp reduce = ReduceOp::kSum;  // dense push_pull: how the servers combine the pushes
  // Dense push_pull: how its partitions are compressed (push_compression.h); none: raw.
  CompressionSpec compression;
  int priority = 0;
  uint32_t layout = 0;    // the layout generation its partitions use
  int replies_left = 0;   // partitions (rows: servers) whose answer has not arrived
  int releases_left = 0;  // payloads handed to ZeroMQ and not yet released (resends add)
  bool started = false;
  bool done = false;  // no more writes to `output`; finished in the table
  std::unique_ptr<RowsPlan> rows;  // sparse rows; null for a dense push_pull
  // A staged input (the device path, worker/device/device_staging.h): partition i may be
  // sent only once released[i] (its bytes are in `input`; Worker::ReleasePartition).
  // Empty: every partition is ready at Start.
  std::vector<bool> released;
  uint32_t releases_pending = 0;  // partitions not yet released
  // Optional: called with a partition's index once its whole sum is in `output` (on the
  // thread that delivered it, outside the lock, while the operation is held: its
  // completion, a failure's included, waits until this returns). Must not block.
  std::function<void(uint32_t part)> part_summed;
};

}  // namespace ferry
