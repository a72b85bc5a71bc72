// DeviceStaging on the fake device (host memory as device memory, a thread per stream):
// the order of copies against the producer's work, partitions handed over one by one in
// the order given while later ones still copy, the sums back before the consumer's work,
// and nothing on the caller's thread waiting for the device.

#include "worker/device/device_staging.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/util/mutex.h"
#include "tests/server/gpu/gpu_test_support.h"
#include "worker/device/cuda_device.h"
#include "worker/device/fake_device.h"

namespace ferry {
namespace {

// What the ready callbacks saw, in order: the partition index and its bytes as they were
// in host memory when the callback ran.
struct Readies {
  Mutex mu;
  CondVar cv;
  std::vector<size_t> order GUARDED_BY(mu);
  std::vector<std::vector<uint8_t>> seen GUARDED_BY(mu);

  void WaitFor(size_t n) EXCLUDES(mu) {
    MutexLock lock(mu);
    cv.Wait(mu, [&]() REQUIRES(mu) { return order.size() >= n; });
  }
};

std::vector<DeviceStaging::Part> Parts(std::initializer_list<std::pair<uint64_t, uint64_t>> l) {
  std::vector<DeviceStaging::Part> parts;
  for (auto [offset, bytes] : l) parts.push_back({offset, bytes});
  return parts;
}

// The copies wait for the producer's work queued before the call (a kernel still writing
// the gradient), and ready(i) sees each partition's final bytes, in the order given.
TEST(DeviceStagingTest, CopiesStartAfterTheProducersWorkAndHandPartitionsOverInOrder) {
  FakeDevice device;
  const DeviceApi::Stream producer = device.NewStream();
  std::vector<uint8_t> grad(12, 0);
  auto kernel = device.Hold(producer);  // the producer still runs...
  device.HostCallback(producer, [&] {   // ...and then writes the gradient
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<uint8_t>(10 + i);
  });
  uint8_t* pinned = static_cast<uint8_t*>(device.AllocPinned(grad.size()));
  std::memset(pinned, 0, grad.size());
  Readies r;
  {
    DeviceStaging staging(device);
    // Priority order: the last partition first.
    const auto parts = Parts({{8, 4}, {0, 4}, {4, 4}});
    staging.ToHost(grad.data(), pinned, parts, producer, [&](size_t i) {
      MutexLock lock(r.mu);
      r.order.push_back(i);
      r.seen.emplace_back(pinned + parts[i].offset, pinned + parts[i].offset + parts[i].bytes);
      r.cv.NotifyAll();
    });
    device.Quiesce();  // everything that can run without the producer has run
    EXPECT_EQ(device.copies(), 0u);
    {
      MutexLock lock(r.mu);
      EXPECT_TRUE(r.order.empty());
    }
    kernel->Open();
    r.WaitFor(3);
  }
  MutexLock lock(r.mu);
  EXPECT_EQ(r.order, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(r.seen[0], (std::vector<uint8_t>{18, 19, 20, 21}));
  EXPECT_EQ(r.seen[1], (std::vector<uint8_t>{10, 11, 12, 13}));
  EXPECT_EQ(r.seen[2], (std::vector<uint8_t>{14, 15, 16, 17}));
  EXPECT_EQ(device.copied_bytes(), 12u);
  device.FreePinned(pinned);
  EXPECT_EQ(device.pinned_live(), 0);
}

// Work the producer queues after ToHost is not waited for (an event, not a device-wide
// synchronize): the copies finish while the producer's later work is still held.
TEST(DeviceStagingTest, TheProducersLaterWorkDoesNotHoldTheCopies) {
  FakeDevice device;
  const DeviceApi::Stream producer = device.NewStream();
  std::vector<uint8_t> grad(8, 7);
  std::vector<uint8_t> host(8, 0);
  Readies r;
  DeviceStaging staging(device);
  staging.ToHost(grad.data(), host.data(), Parts({{0, 8}}), producer, [&](size_t i) {
    MutexLock lock(r.mu);
    r.order.push_back(i);
    r.cv.NotifyAll();
  });
  auto next_iteration = device.Hold(producer);  // the next forward pass, queued later
  r.WaitFor(1);
  EXPECT_EQ(host, grad);
  next_iteration->Open();
}

// Each partition is handed over as soon as it is in host memory: ready(0) runs (and the
// caller may send partition 0) before partition 1 has been copied, so sending partition 0
// overlaps copying partition 1.
TEST(DeviceStagingTest, APartitionIsHandedOverBeforeTheNextIsCopied) {
  FakeDevice device;
  const DeviceApi::Stream producer = device.NewStream();
  std::vector<uint8_t> grad = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> host(8, 0);
  Readies r;
  std::vector<uint64_t> copies_at_ready(2, 0);
  DeviceStaging staging(device);
  staging.ToHost(grad.data(), host.data(), Parts({{0, 4}, {4, 4}}), producer, [&](size_t i) {
    MutexLock lock(r.mu);
    copies_at_ready[i] = device.copies();
    r.order.push_back(i);
    r.cv.NotifyAll();
  });
  r.WaitFor(2);
  MutexLock lock(r.mu);
  EXPECT_EQ(copies_at_ready, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(host, grad);
}

// The sums go back on the staging's own stream; the consumer's stream waits on Finish's
// event: its later work (the optimizer step) runs only after every copy back, and the
// caller's thread did not wait for the device.
TEST(DeviceStagingTest, TheConsumersLaterWorkWaitsForEveryCopyBack) {
  FakeDevice device;
  const DeviceApi::Stream consumer = device.NewStream();
  std::vector<uint8_t> grad(8, 0);
  std::vector<uint8_t> sums = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> seen_by_optimizer;
  auto slow_link = device.HoldCopies();
  DeviceStaging staging(device);
  const auto parts = Parts({{4, 4}, {0, 4}});
  // The sums arrive in any order; each goes back as it comes.
  staging.ToDevice(grad.data(), sums.data(), parts[0]);
  staging.ToDevice(grad.data(), sums.data(), parts[1]);
  const DeviceApi::Event done = staging.Finish(consumer);
  device.HostCallback(consumer, [&] { seen_by_optimizer = grad; });  // the optimizer step
  device.Quiesce();
  EXPECT_FALSE(device.Query(done));
  EXPECT_TRUE(seen_by_optimizer.empty());  // held behind the copies
  slow_link->Open();
  const DeviceApi::Event step = device.NewEvent();
  device.Record(step, consumer);
  device.Synchronize(step);
  EXPECT_EQ(seen_by_optimizer, sums);
  EXPECT_TRUE(device.Query(done));
  staging.Release(done);
  device.DestroyEvent(step);
}

// The same staging on a real GPU (CudaDevice; skipped without one, a failure under
// FERRY_REQUIRE_GPU=1 as scripts/gpu-checks runs it): the partitions reach pinned memory in
// the order given with their bytes, and the sums copied back are what the consumer's
// stream reads after Finish.
TEST(DeviceStagingTest, OnARealGpuPartitionsAndSumsArriveExactly) {
  FERRY_SKIP_WITHOUT_GPU();
  std::unique_ptr<DeviceApi> device = NewCudaDevice(0);
  constexpr size_t kBytes = 3 << 20;  // 3 MiB in 3 partitions
  const auto parts = Parts({{2 << 20, 1 << 20}, {0, 1 << 20}, {1 << 20, 1 << 20}});
  auto* source = static_cast<uint8_t*>(device->AllocPinned(kBytes));
  auto* host = static_cast<uint8_t*>(device->AllocPinned(kBytes));
  auto* sums = static_cast<uint8_t*>(device->AllocPinned(kBytes));
  auto* check = static_cast<uint8_t*>(device->AllocPinned(kBytes));
  void* grad = device->AllocDevice(kBytes);
  for (size_t i = 0; i < kBytes; ++i) {
    source[i] = static_cast<uint8_t>(i * 7 + 1);
    sums[i] = static_cast<uint8_t>(i * 3 + 2);
  }
  std::memset(host, 0, kBytes);
  const DeviceApi::Stream producer = device->NewStream(), consumer = device->NewStream();
  device->CopyToDevice(grad, source, kBytes, producer);  // "backward" writes the gradient
  Readies r;
  {
    DeviceStaging staging(*device);
    // The upload may still be queued: the staging's copies wait for the producer's event.
    staging.ToHost(grad, host, parts, producer, [&](size_t i) {
      MutexLock lock(r.mu);
      r.order.push_back(i);
      r.cv.NotifyAll();
    });
    r.WaitFor(3);
    for (const auto& p : parts) staging.ToDevice(grad, sums, p);
    const DeviceApi::Event done = staging.Finish(consumer);
    device->CopyToHost(check, grad, kBytes, consumer);  // the optimizer's read
    const DeviceApi::Event read = device->NewEvent();
    device->Record(read, consumer);
    device->Synchronize(read);
    staging.Release(done);
    device->DestroyEvent(read);
  }
  {
    MutexLock lock(r.mu);
    EXPECT_EQ(r.order, (std::vector<size_t>{0, 1, 2}));
  }
  size_t wrong_there = 0, wrong_back = 0;
  for (size_t i = 0; i < kBytes; ++i) {
    wrong_there += host[i] != static_cast<uint8_t>(i * 7 + 1);
    wrong_back += check[i] != sums[i];
  }
  EXPECT_EQ(wrong_there, 0u) << device->Describe();
  EXPECT_EQ(wrong_back, 0u) << device->Describe();
  device->DestroyStream(producer);
  device->DestroyStream(consumer);
  device->FreeDevice(grad);
  for (uint8_t* p : {source, host, sums, check}) device->FreePinned(p);
}

}  // namespace
}  // namespace ferry
