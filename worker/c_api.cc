#include "worker/c_api.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <chrono>

#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"
#include "worker/binding_core.h"
#include "worker/device/cuda_device.h"
#include "worker/reserved_tensor_names.h"

namespace {

thread_local std::string g_last_error;

// Runs `body`, turning a FerryError into -code and the thread's last error.
template <typename F>
auto Guard(F body) -> decltype(body()) {
  try {
    return body();
  } catch (const ferry::FerryError& e) {
    g_last_error = e.what();
    return -static_cast<int>(e.code());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return -static_cast<int>(ferry::ErrorCode::kInternal);
  }
}

// The group for one call (binding_core.h): each C function holds the shared_ptr for its
// whole call, so ferry_shutdown() on another thread cannot destroy the group under it.
std::shared_ptr<ferry::Collective> Get() { return ferry::BindingCore::Process().Get(); }

ferry::DataType Type(int dtype) { return ferry::BindingCore::CheckedDataType(dtype); }

std::optional<int> Priority(int32_t priority) {
  if (priority == INT32_MIN) return std::nullopt;
  return priority;
}

// The device path's handles are waited for there, the others in the group's table.
std::shared_ptr<ferry::DeviceBinding> DevicesOwning(int64_t handle) {
  auto devices = ferry::BindingCore::Process().Devices();
  return devices->Owns(static_cast<ferry::Handle>(handle)) ? devices : nullptr;
}

// One look at each handle, in order: the first finished, or 0.
int64_t FirstFinished(const std::vector<int64_t>& handles) {
  for (int64_t h : handles) {
    auto devices = DevicesOwning(h);
    const bool done = devices ? devices->Poll(h) : Get()->Poll(h);
    if (done) return h;
  }
  return 0;
}

// `text` into `out` (`size` bytes with the terminating 0), cut if longer.
void CopyText(const std::string& text, char* out, uint64_t size) {
  if (out == nullptr || size == 0) return;
  const size_t n = std::min<size_t>(text.size(), size - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace

extern "C" {

int ferry_init(void) {
  return Guard([] {
    ferry::BindingCore::Process().Init();
    return 0;
  });
}

int ferry_is_initialized(void) { return ferry::BindingCore::Process().IsInitialized() ? 1 : 0; }

int ferry_num_servers(void) { return Guard([] { return Get()->num_servers(); }); }

int ferry_local_size_from_environment(void) {
  return Guard([] { return ferry::BindingCore::Process().LocalSizeFromEnvironment() ? 1 : 0; });
}

int ferry_rank(void) { return Guard([] { return Get()->rank(); }); }
int ferry_size(void) { return Guard([] { return Get()->size(); }); }
int ferry_local_rank(void) { return Guard([] { return Get()->local_rank(); }); }
int ferry_local_size(void) { return Guard([] { return Get()->local_size(); }); }

int ferry_declare_tensor(const char* name, int dtype, const int64_t* shape, int ndim) {
  return Guard([&] {
    std::vector<int64_t> dims(shape, shape + ndim);
    return Get()->DeclareTensor(name, Type(dtype), dims);
  });
}

int ferry_add_process_set(const int32_t* ranks, int n, int id) {
  return Guard([&] { return Get()->AddProcessSet(std::vector<int>(ranks, ranks + n), id); });
}

int ferry_remove_process_set(int set) {
  return Guard([&] {
    Get()->RemoveProcessSet(set);
    return 0;
  });
}

int ferry_declare_tensor_in_set(int set, const char* name, int dtype, const int64_t* shape,
                                int ndim) {
  return Guard([&] {
    std::vector<int64_t> dims(shape, shape + ndim);
    Get()->DeclareInProcessSet(set, name, Type(dtype), dims);  // its id may exceed an int
    return 0;
  });
}

int64_t ferry_push_pull_async(const char* name, const void* input, void* output, int dtype,
                              uint64_t count, int average, int32_t priority) {
  return Guard([&]() -> int64_t {
    return static_cast<int64_t>(Get()->PushPullAsync(name, input, output, Type(dtype), count,
                                                     average != 0, Priority(priority)));
  });
}

int64_t ferry_pull_average_async(const char* name, void* output, int dtype, uint64_t count) {
  return Guard([&]() -> int64_t {
    return static_cast<int64_t>(Get()->PullAverageAsync(name, output, Type(dtype), count));
  });
}

int64_t ferry_reduce_async(const char* name, const void* input, void* output, int dtype,
                           uint64_t count, int op, int32_t priority) {
  return Guard([&]() -> int64_t {
    FERRY_ENFORCE(ferry::IsValidReduceOp(op), ferry::ErrorCode::kInvalidArgument, "reduce of '",
                  name, "': unknown reduce op ", op);
    return static_cast<int64_t>(Get()->ReduceAsync(name, input, output, Type(dtype), count,
                                                   static_cast<ferry::ReduceOp>(op),
                                                   Priority(priority)));
  });
}

int64_t ferry_send_async(const void* data, uint64_t count, int dtype, int dst, int tag,
                         int32_t priority) {
  return Guard([&]() -> int64_t {
    return static_cast<int64_t>(Get()->SendAsync(data, count, Type(dtype), dst, tag, priority));
  });
}

int64_t ferry_recv_async(void* data, uint64_t count, int dtype, int src, int tag) {
  return Guard([&]() -> int64_t {
    return static_cast<int64_t>(Get()->RecvAsync(data, count, Type(dtype), src, tag));
  });
}

int64_t ferry_push_pull_device_async(const char* name, const void* input, void* output,
                                     int dtype, uint64_t count, int average, int op,
                                     int32_t priority, int device, uintptr_t stream) {
  return Guard([&]() -> int64_t {
    FERRY_ENFORCE(ferry::IsValidReduceOp(op), ferry::ErrorCode::kInvalidArgument,
                  "device push_pull of '", name, "': unknown reduce op ", op);
    auto devices = ferry::BindingCore::Process().Devices();
    return static_cast<int64_t>(devices->PushPullAsync(
        name, input, output, Type(dtype), count, average != 0, static_cast<ferry::ReduceOp>(op),
        Priority(priority), device, stream));
  });
}

int ferry_cuda_built(void) { return ferry::CudaBuilt() ? 1 : 0; }

int64_t ferry_push_pull_rows_async(const char* name, const int64_t* rows, uint64_t num_rows,
                                   const void* values, void* output, int dtype, int average,
                                   int32_t priority) {
  return Guard([&]() -> int64_t {
    return static_cast<int64_t>(Get()->PushPullRowsAsync(
        name, rows, num_rows, values, output, Type(dtype), average != 0, Priority(priority)));
  });
}

int ferry_poll(int64_t handle) {
  return Guard([&] {
    auto devices = DevicesOwning(handle);
    return (devices ? devices->Poll(handle) : Get()->Poll(handle)) ? 1 : 0;
  });
}

int ferry_wait_for(int64_t handle, int64_t timeout_ms) {
  return Guard([&] {
    auto devices = DevicesOwning(handle);
    const bool done =
        devices ? devices->WaitFor(handle, timeout_ms) : Get()->WaitFor(handle, timeout_ms);
    return done ? 1 : 0;
  });
}

int ferry_wait(int64_t handle) {
  int r = 0;
  while ((r = ferry_wait_for(handle, 1000)) == 0) {
  }
  return r < 0 ? r : 0;  // an error, with the thread's last error set
}

int64_t ferry_wait_any(const int64_t* handles, int count, int64_t timeout_ms) {
  return Guard([&]() -> int64_t {
    std::vector<int64_t> all(handles, handles + std::max(count, 0));
    auto devices = ferry::BindingCore::Process().Devices();
    const bool any_device = std::any_of(all.begin(), all.end(), [&](int64_t h) {
      return devices->Owns(static_cast<ferry::Handle>(h));
    });
    if (!any_device) {
      std::vector<ferry::Handle> group(all.begin(), all.end());
      return static_cast<int64_t>(Get()->WaitAny(group, timeout_ms));
    }
    // Device handles among them: a look at each in slices of at most 1 ms.
    const int64_t deadline = ferry::NowUs() + timeout_ms * 1000;
    while (true) {
      if (int64_t h = FirstFinished(all)) return h;
      const int64_t left_us = deadline - ferry::NowUs();
      if (left_us <= 0) return int64_t{0};
      std::this_thread::sleep_for(std::chrono::microseconds(std::min<int64_t>(left_us, 1000)));
    }
  });
}

int ferry_set_compression(const char* name, const char* compression) {
  return Guard([&] {
    Get()->SetCompression(name, compression);
    return 0;
  });
}

int ferry_broadcast(const char* name, void* data, int dtype, uint64_t count, int root) {
  return Guard([&] {
    Get()->Broadcast(name, data, Type(dtype), count, root);
    return 0;
  });
}

int ferry_barrier(void) {
  return Guard([] {
    Get()->Barrier();
    return 0;
  });
}

int ferry_reset(void) {
  return Guard([] {
    Get()->Reset();
    return 0;
  });
}

int64_t ferry_epoch(void) {
  return Guard([]() -> int64_t { return static_cast<int64_t>(Get()->epoch()); });
}

int ferry_hosts_updated(void) { return Guard([] { return Get()->HostsUpdated() ? 1 : 0; }); }

int ferry_join(void) {
  return Guard([] { return Get()->Join(); });
}

int ferry_step_boundary(void) {
  return Guard([] {
    Get()->StepBoundary();
    return 0;
  });
}

int ferry_contributors(const char* name, int32_t* ranks, int capacity) {
  return Guard([&] {
    const std::vector<int> all = Get()->Contributors(name);
    const int n = std::min(static_cast<int>(all.size()), capacity);
    for (int i = 0; i < n; ++i) ranks[i] = all[static_cast<size_t>(i)];
    return n;
  });
}

int ferry_trace_compute(const char* name, int backward, int64_t begin_us, int64_t end_us) {
  return Guard([&] {
    Get()->TraceCompute(name, backward != 0, begin_us, end_us);
    return 0;
  });
}

int64_t ferry_now_us(void) { return ferry::NowUs(); }

int ferry_set_scheduling(int64_t partition_bytes, int64_t credit_bytes) {
  return Guard([&] {
    Get()->SetScheduling(partition_bytes, credit_bytes);
    return 0;
  });
}

int ferry_scheduling(int64_t* partition_bytes, int64_t* credit_bytes, double* window_gain,
                     int64_t* frame_bytes, char* policy, uint64_t policy_size) {
  return Guard([&] {
    auto group = Get();
    const ferry::SchedulingChoice c = group->scheduling();
    *partition_bytes = c.partition_bytes;
    *credit_bytes = c.credit_bytes;
    *window_gain = c.window_gain;
    *frame_bytes = c.frame_bytes;
    CopyText(group->scheduling_policy(), policy, policy_size);
    return 0;
  });
}

int64_t ferry_counters(char* text, uint64_t size) {
  return Guard([&]() -> int64_t {
    std::string all;
    for (auto& [name, value] : Get()->Counters()) {
      all += name;
      all += ' ';
      all += std::to_string(value);
      all += '\n';
    }
    CopyText(all, text, size);
    return static_cast<int64_t>(all.size());
  });
}

const char* ferry_host_ids_tensor_name(void) {
  static const std::string name =
      ferry::ReservedTensorName(ferry::reserved::kBinding, "host_ids");
  return name.c_str();
}

int ferry_suspend(void) {
  return Guard([] {
    ferry::BindingCore::Process().Shutdown(/*final=*/false);
    return 0;
  });
}

int ferry_shutdown(void) {
  return Guard([] {
    ferry::BindingCore::Process().Shutdown();
    return 0;
  });
}

const char* ferry_last_error(void) { return g_last_error.c_str(); }

const char* ferry_error_code_name(int code) {
  return ferry::ErrorCodeName(static_cast<ferry::ErrorCode>(code));
}

}  // extern "C"
