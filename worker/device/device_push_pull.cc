#include "worker/device/device_push_pull.h"

#include <utility>

#include "common/util/error.h"

namespace ferry {

DevicePushPull::DevicePushPull(Worker& worker, DeviceApi& device)
    : worker_(worker), device_(device), staging_(device) {}

DevicePushPull::~DevicePushPull() {
  MutexLock lock(mu_);
  for (auto& [buffer, event] : draining_) {
    device_.Synchronize(event);
    staging_.Release(event);
    device_.FreePinned(buffer);
  }
  // A failed operation's buffer stays allocated (see Wait).
}

void DevicePushPull::Collect() {
  std::vector<std::pair<void*, DeviceApi::Event>> still;
  for (auto& [buffer, event] : draining_) {
    if (device_.Query(event)) {
      staging_.Release(event);
      device_.FreePinned(buffer);
    } else {
      still.emplace_back(buffer, event);
    }
  }
  draining_.swap(still);
}

Handle DevicePushPull::Start(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, bool average,
                             DeviceApi::Stream producer, DeviceApi::Stream consumer) {
  auto op = std::make_shared<Op>();
  op->output = output;
  op->consumer = consumer;
  op->pinned = device_.AllocPinned(count * DataTypeSize(dtype));
  std::vector<PartitionSpec> parts;
  Handle h = 0;
  {
    // Held until the operation is registered: its completion may come on another thread.
    MutexLock lock(mu_);
    Collect();
    try {
      // Each partition's sum goes back as soon as it is in (a transport thread; `op->parts`
      // is filled below, before any partition can be released, let alone summed).
      Op* raw = op.get();
      h = worker_.PushPullStagedAsync(
          name, op->pinned, op->pinned, dtype, count, average, &parts, std::nullopt,
          [this](Handle done, const Verdict& v) { OnPushPullDone(done, v); },
          [this, raw](uint32_t i) { staging_.ToDevice(raw->output, raw->pinned, raw->parts[i]); });
    } catch (...) {
      device_.FreePinned(op->pinned);
      throw;
    }
    for (const PartitionSpec& p : parts) op->parts.push_back({p.offset, p.bytes});
    ops_[h] = op;
  }
  // Each partition goes as soon as it is in the pinned buffer (a runtime thread).
  staging_.ToHost(input, op->pinned, op->parts, producer,
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
  std::shared_ptr<Op> op;
  {
    MutexLock lock(mu_);
    auto it = ops_.find(h);
    FERRY_ENFORCE(it != ops_.end(), ErrorCode::kInvalidArgument, "device push_pull ", h,
                  ": unknown handle (waited for already?)");
    op = it->second;
    // Bounded: the Worker fails the push_pull at its deadline (FERRY_OP_TIMEOUT_MS).
    cv_.Wait(mu_, [&]() REQUIRES(mu_) { return op->finished; });
    ops_.erase(it);
    if (op->copied_back != 0) {
      draining_.emplace_back(op->pinned, op->copied_back);
    }
  }
  if (op->copied_back == 0) {
    // Failed: ZeroMQ may still hold partitions of the pinned buffer queued for a dead peer
    // (worker.h, "Buffers"); it stays allocated, as the Worker's contract asks.
    throw FerryError(op->code, op->error);
  }
}

}  // namespace ferry
