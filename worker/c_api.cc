#include "worker/c_api.h"

#include <climits>
#include <memory>
#include <string>

#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"
#include "worker/binding_core.h"

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

}  // namespace

extern "C" {

int ferry_init(void) {
  return Guard([] {
    ferry::BindingCore::Process().Init();
    return 0;
  });
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

int64_t ferry_push_pull_async(const char* name, const void* input, void* output, int dtype,
                              uint64_t count, int average, int32_t priority) {
  return Guard([&]() -> int64_t {
    std::optional<int> p;
    if (priority != INT32_MIN) p = priority;
    return static_cast<int64_t>(
        Get()->PushPullAsync(name, input, output, Type(dtype), count, average != 0, p));
  });
}

int64_t ferry_push_pull_rows_async(const char* name, const int64_t* rows, uint64_t num_rows,
                                   const void* values, void* output, int dtype, int average,
                                   int32_t priority) {
  return Guard([&]() -> int64_t {
    std::optional<int> p;
    if (priority != INT32_MIN) p = priority;
    return static_cast<int64_t>(Get()->PushPullRowsAsync(name, rows, num_rows, values, output,
                                                         Type(dtype), average != 0, p));
  });
}

int ferry_poll(int64_t handle) { return Guard([&] { return Get()->Poll(handle) ? 1 : 0; }); }

int ferry_wait(int64_t handle) {
  return Guard([&] {
    Get()->Wait(handle);
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

int ferry_join(void) {
  return Guard([] {
    Get()->Join();
    return 0;
  });
}

int ferry_step_boundary(void) {
  return Guard([] {
    Get()->StepBoundary();
    return 0;
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

int ferry_shutdown(void) {
  return Guard([] {
    ferry::BindingCore::Process().Shutdown();
    return 0;
  });
}

const char* ferry_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
