#include "worker/c_api.h"

#include <climits>
#include <memory>
#include <mutex>
#include <string>

#include "common/util/logging.h"
#include "common/util/status.h"
#include "worker/local/local_group.h"

namespace {

std::mutex g_mu;                          // guards g_worker
std::unique_ptr<ferry::LocalGroup> g_worker;  // the process's worker (local_group.h)
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

ferry::LocalGroup& Get() {
  std::lock_guard<std::mutex> lock(g_mu);
  FERRY_ENFORCE(g_worker != nullptr, ferry::ErrorCode::kInvalidArgument,
                "ferry is not initialised: call ferry_init() first");
  return *g_worker;
}

ferry::DataType Type(int dtype) {
  FERRY_ENFORCE(ferry::IsValidDataType(dtype), ferry::ErrorCode::kInvalidArgument, "unknown dtype ",
                dtype);
  return static_cast<ferry::DataType>(dtype);
}

}  // namespace

extern "C" {

int ferry_init(void) {
  return Guard([]() -> int {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_worker) return 0;
    ferry::Config config = ferry::Config::FromEnvironment(ferry::ProcessEnvironment());
    FERRY_ENFORCE(config.role == ferry::NodeRole::kWorker, ferry::ErrorCode::kInvalidConfig,
                  "ferry_init() runs in a worker, but DMLC_ROLE=", ferry::NodeRoleName(config.role));
    ferry::InitLogging("ferry", config, "worker");
    g_worker = ferry::LocalGroup::Create(config);
    return 0;
  });
}

int ferry_rank(void) { return Guard([] { return Get().rank(); }); }
int ferry_size(void) { return Guard([] { return Get().size(); }); }
int ferry_local_rank(void) { return Guard([] { return Get().local_rank(); }); }
int ferry_local_size(void) { return Guard([] { return Get().local_size(); }); }

int ferry_declare_tensor(const char* name, int dtype, const int64_t* shape, int ndim) {
  return Guard([&] {
    std::vector<int64_t> dims(shape, shape + ndim);
    return Get().DeclareTensor(name, Type(dtype), dims);
  });
}

int64_t ferry_push_pull_async(const char* name, const void* input, void* output, int dtype,
                              uint64_t count, int average, int32_t priority) {
  return Guard([&]() -> int64_t {
    std::optional<int> p;
    if (priority != INT32_MIN) p = priority;
    return static_cast<int64_t>(
        Get().PushPullAsync(name, input, output, Type(dtype), count, average != 0, p));
  });
}

int64_t ferry_push_pull_rows_async(const char* name, const int64_t* rows, uint64_t num_rows,
                                   const void* values, void* output, int dtype, int average,
                                   int32_t priority) {
  return Guard([&]() -> int64_t {
    std::optional<int> p;
    if (priority != INT32_MIN) p = priority;
    return static_cast<int64_t>(Get().PushPullRowsAsync(name, rows, num_rows, values, output,
                                                        Type(dtype), average != 0, p));
  });
}

int ferry_poll(int64_t handle) { return Guard([&] { return Get().Poll(handle) ? 1 : 0; }); }

int ferry_wait(int64_t handle) {
  return Guard([&] {
    Get().Wait(handle);
    return 0;
  });
}

int ferry_broadcast(const char* name, void* data, int dtype, uint64_t count, int root) {
  return Guard([&] {
    Get().Broadcast(name, data, Type(dtype), count, root);
    return 0;
  });
}

int ferry_barrier(void) {
  return Guard([] {
    Get().Barrier();
    return 0;
  });
}

int ferry_join(void) {
  return Guard([] {
    Get().Join();
    return 0;
  });
}

int ferry_step_boundary(void) {
  return Guard([] {
    Get().StepBoundary();
    return 0;
  });
}

int ferry_set_scheduling(int64_t partition_bytes, int64_t credit_bytes) {
  return Guard([&] {
    Get().SetScheduling(partition_bytes, credit_bytes);
    return 0;
  });
}

int ferry_shutdown(void) {
  return Guard([] {
    std::unique_ptr<ferry::LocalGroup> w;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      w = std::move(g_worker);
    }
    if (w) w->Shutdown();
    return 0;
  });
}

const char* ferry_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
