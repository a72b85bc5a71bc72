#include "worker/device/device_push_pull.h"

#include <chrono>
#include <exception>
#include <utility>

#include "common/util/error.h"

namespace ferry {

void DevicePushPull::PinnedBlocks::Free(void* block) {
  try {
    device->FreePinned(block);
  } catch (const std::exception&) {  // at the end of a process the runtime may be gone
  }
}

DevicePushPull::DevicePushPull(Worker& worker, DeviceApi& device)
    : worker_(worker),
      device_(device),
      pool_(Pool::Create(PinnedBlocks{&device})),
      staging_(device) {}

DevicePushPull::~DevicePushPull() {
  MutexLock lock(mu_);
  for (auto& [buffer, event] : draining_) {
    device_.Synchronize(event);
    staging_.Release(event);
  }
  draining_.clear();  // back to the pool, which frees them with this object
}

void DevicePushPull::Collect() {
  std::vector<std::pair<Buffer, DeviceApi::Event>> still;
  for (auto& [buffer, event] : draining_) {
    if (device_.Query(event)) {
      staging_.Release(event);  // the buffer goes back to the pool as it is dropped here
    } else {
      still.emplace_back(std::move(buffer), event);
    }
  }
  draining_.swap(still);
}

Handle DevicePushPull::Start(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, bool average,
                             DeviceApi::Stream producer, DeviceApi::Stream consumer,
                             std::optional<int> priority, ReduceOp reduce) {
  auto op = std::make_shared<Op>();
  op->output = output;
  op->consumer = consumer;
  std::vector<PartitionSpec> parts;
  Handle h = 0;
  {
    // Held until the operation is registered: its completion may come on another thread.
    MutexLock lock(mu_);
    Collect();
    op->pinned = pool_->Acquire(count * DataTypeSize(dtype));
    {
      // Each partition's sum goes back as soon as it is in (a transport thread; `op->parts`
      // is filled below, before any partition can be released, let alone summed).
      Op* raw = op.get();
      h = worker_.PushPullStagedAsync(
          name, op->pinned.data(), op->pinned.data(), dtype, count, average, &parts, priority,
          [this](Handle done, const Verdict& v) { OnPushPullDone(done, v); },
          [this, raw](uint32_t i) {
            staging_.ToDevice(raw->output, raw->pinned.data(), raw->parts[i]);
          },
          reduce);
    }
    for (const PartitionSpec& p : parts) op->parts.push_back({p.offset, p.bytes});
    ops_[h] = op;
  }
  // Each partition goes as soon as it is in the pinned buffer (a runtime thread).
  staging_.ToHost(input, op->pinned.data(), op->parts, producer,
                  [this, h](size_t i) { worker_.ReleasePartition(h, static_cast<uint32_t>(i)); });
  return h;
}

void DevicePushPull::OnPushPullDone(Handle h, const Verdict& verdict) {
  MutexLock lock(mu_);
  auto it = ops_.find(h);
  if (it == ops_.end()) return;  // cannot happen: registered before any release
  Op& op = *it->second;
  if (verdict.ok()) {
    op.copied_back = staging_.Finish(op.consumer);  // after every partition's ToDevice
  } else {
    op.error = verdict.error;
    op.code = verdict.code;
  }
  op.finished = true;
  cv_.NotifyAll();
}

bool DevicePushPull::Poll(Handle h) {
  MutexLock lock(mu_);
  auto it = ops_.find(h);
  FERRY_ENFORCE(it != ops_.end(), ErrorCode::kInvalidArgument, "device push_pull ", h,
                ": unknown handle (waited for already?)");
  return it->second->finished;
}

void DevicePushPull::Wait(Handle h) {
  // Bounded: the Worker fails the push_pull at its deadline (FERRY_OP_TIMEOUT_MS).
  while (!WaitFor(h, 1000)) {
  }
}

bool DevicePushPull::WaitFor(Handle h, int64_t slice_ms, bool host_sync) {
  std::shared_ptr<Op> op;
  {
    MutexLock lock(mu_);
    auto it = ops_.find(h);
    FERRY_ENFORCE(it != ops_.end(), ErrorCode::kInvalidArgument, "device push_pull ", h,
                  ": unknown handle (waited for already?)");
    op = it->second;
    const auto slice = std::chrono::milliseconds(slice_ms);
    if (!cv_.WaitFor(mu_, slice, [&]() REQUIRES(mu_) { return op->finished; })) return false;
    ops_.erase(it);
    if (op->copied_back != 0) {
      // Before the buffer can go back to the pool (Collect) and another Start reuse it.
      if (host_sync) device_.Synchronize(op->copied_back);
      draining_.emplace_back(std::move(op->pinned), op->copied_back);
    }
  }
  if (op->copied_back == 0) {
    // Failed: ZeroMQ may still hold partitions of the pinned buffer queued for a dead peer
    // (worker.h, "Buffers"): it is never reused nor freed.
    new Buffer(std::move(op->pinned));
    throw FerryError(op->code, op->error);
  }
  return true;
}

}  // namespace ferry
