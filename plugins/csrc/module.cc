// ferry._core: the native half of the `ferry` Python package (ferry.torch is the other).
//
// A thin pybind11 wrapper of the C++ ferry::LocalGroup (worker/local/local_group.h: a
// ferry::Worker, or with FERRY_LOCAL_SIZE > 1 the machine's local group), one per process,
// owned by ferry::BindingCore (worker/binding_core.h) as the C API's is: the same
// configuration, role check, error messages and lifetime rules in both bindings.
// Tensors cross as raw addresses (tensor.data_ptr()) plus dtype code and element
// count, so this file needs no torch headers; ferry/torch/*.py keeps the tensors alive
// while the core uses their memory.
//
// Errors: ferry::FerryError becomes ferry._core.FerryError (a RuntimeError subclass)
// carrying the core's message and its code (`.code`, `.code_name`).
// The GIL is released in every call that can block (init, wait, broadcast, barrier,
// shutdown), so other Python threads, and the autograd engine's hooks, keep running.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"
#include "worker/binding_core.h"
#include "worker/reserved_tensor_names.h"

namespace py = pybind11;

namespace {

PyObject* g_error_type = nullptr;  // ferry._core.FerryError
// ferry._core.MembershipChangedError, a FerryError: elastic training's recoverable error.
PyObject* g_membership_type = nullptr;

// The worker for one call (worker/binding_core.h, the owner shared with the C API). A
// shared_ptr, so shutdown() on one thread cannot destroy the worker under a call still
// running on another.
std::shared_ptr<ferry::Collective> Get() { return ferry::BindingCore::Process().Get(); }

ferry::DataType Type(int dtype) { return ferry::BindingCore::CheckedDataType(dtype); }

const void* Address(uintptr_t p) { return reinterpret_cast<const void*>(p); }

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Native core of the ferry package: wraps ferry::LocalGroup (see ferry.torch).";

  static py::exception<ferry::FerryError> error(m, "FerryError", PyExc_RuntimeError);
  g_error_type = error.ptr();
  static py::exception<ferry::FerryError> changed(m, "MembershipChangedError", error.ptr());
  g_membership_type = changed.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ferry::FerryError& e) {
      PyObject* type = e.code() == ferry::ErrorCode::kMembershipChanged ? g_membership_type
                                                                          : g_error_type;
      py::object instance = py::reinterpret_borrow<py::object>(type)(e.what());
      instance.attr("code") = static_cast<int>(e.code());
      instance.attr("code_name") = ferry::ErrorCodeName(e.code());
      PyErr_SetObject(type, instance.ptr());
    }
  });

  // Dtype codes (worker/c_api.h): the Python side maps torch dtypes to these.
  m.attr("FLOAT32") = static_cast<int>(ferry::DataType::kFloat32);
  m.attr("FLOAT16") = static_cast<int>(ferry::DataType::kFloat16);
  m.attr("BFLOAT16") = static_cast<int>(ferry::DataType::kBFloat16);
  m.attr("FLOAT64") = static_cast<int>(ferry::DataType::kFloat64);
  m.attr("INT32") = static_cast<int>(ferry::DataType::kInt32);
  // ferry.torch's own tensors (worker/reserved_tensor_names.h: the bindings' kind).
  m.attr("HOST_IDS_TENSOR") = ferry::ReservedTensorName(ferry::reserved::kBinding, "host_ids");
  m.attr("INT64") = static_cast<int>(ferry::DataType::kInt64);
  // Ferry has no CUDA data path in this build: GPU tensors are refused by ferry.torch.
  m.attr("CUDA") = false;
  // Errors the Python side finds itself (an allgather's shapes): raised as the core's are.
  m.attr("MISMATCH") = static_cast<int>(ferry::ErrorCode::kMismatch);
  m.def(
      "fail",
      [](int code, const std::string& message) {
        throw ferry::FerryError(static_cast<ferry::ErrorCode>(code), message);
      },
      py::arg("code"), py::arg("message"), "Raises FerryError(message) with `code`.");

  m.def(
      "init", [] { ferry::BindingCore::Process().Init(); },
      py::call_guard<py::gil_scoped_release>(),
      "Reads the environment (DMLC_*, FERRY_*) and joins the cluster as a worker; after "
      "shutdown(final=False) joins it again under the same rank. Idempotent; raises "
      "FerryError (code kShutdown) after a final shutdown.");
  m.def("is_initialized", [] { return ferry::BindingCore::Process().IsInitialized(); });
  m.def(
      "shutdown", [](bool final) { ferry::BindingCore::Process().Shutdown(final); },
      py::arg("final") = true, py::call_guard<py::gil_scoped_release>(),
      "Waits for this worker's operations and leaves the job (final: for good; the job ends "
      "once every worker has). Not final: init() may join again (worker/binding_core.h). "
      "Idempotent; raises FerryError if the job failed. Every later call raises FerryError "
      "(code kShutdown).");
  m.def(
      "require_initialized", [] { Get(); },
      "Raises FerryError unless initialised (before init(): not initialised; after "
      "shutdown(): shut down).");
  m.def("rank", [] { return Get()->rank(); });
  m.def("size", [] { return Get()->size(); });
  m.def("num_servers", [] { return Get()->num_servers(); });
  m.def("local_rank", [] { return Get()->local_rank(); });
  m.def("local_size", [] { return Get()->local_size(); });
  m.def(
      "local_size_from_environment",
      [] { return ferry::BindingCore::Process().LocalSizeFromEnvironment(); },
      "True if the launcher set FERRY_LOCAL_SIZE / BYTEPS_LOCAL_SIZE: then local_rank() and "
      "local_size() are its word (checked by the core's configuration).");

  m.def(
      "declare",
      [](const std::string& name, int dtype, const std::vector<int64_t>& shape,
         std::optional<int> priority) {
        return Get()->DeclareTensor(name, Type(dtype), shape, priority);
      },
      py::arg("name"), py::arg("dtype"), py::arg("shape"), py::arg("priority") = py::none(),
      "Declares a tensor (forward order, identically on every worker); returns its id.");

  m.def(
      "push_pull_async",
      [](const std::string& name, uintptr_t input, uintptr_t output, int dtype, uint64_t count,
         bool average, std::optional<int> priority) {
        return Get()->PushPullAsync(name, Address(input),
                                    const_cast<void*>(Address(output)), Type(dtype), count,
                                    average, priority);
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("count"),
      py::arg("average"), py::arg("priority") = py::none(),
      "Starts a push_pull of `count` elements at address `input` into `output`; returns a "
      "handle. Both buffers must stay alive (and input unchanged) until wait() returns.");

  m.def(
      "reduce_async",
      [](const std::string& name, uintptr_t input, uintptr_t output, int dtype, uint64_t count,
         int op, std::optional<int> priority) {
        FERRY_ENFORCE(ferry::IsValidReduceOp(op), ferry::ErrorCode::kInvalidArgument,
                      "reduce of '", name, "': unknown reduce op ", op);
        return Get()->ReduceAsync(name, Address(input), const_cast<void*>(Address(output)),
                                  Type(dtype), count, static_cast<ferry::ReduceOp>(op), priority);
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("count"),
      py::arg("op"), py::arg("priority") = py::none(),
      "As push_pull_async, the pushes combined by `op` (REDUCE_MIN, REDUCE_MAX, REDUCE_PRODUCT) "
      "instead of summed; returns a handle.");
  m.attr("REDUCE_MIN") = static_cast<int>(ferry::ReduceOp::kMin);
  m.attr("REDUCE_MAX") = static_cast<int>(ferry::ReduceOp::kMax);
  m.attr("REDUCE_PRODUCT") = static_cast<int>(ferry::ReduceOp::kProduct);

  m.def(
      "push_pull_rows_async",
      [](const std::string& name, uintptr_t rows, uint64_t num_rows, uintptr_t values,
         uintptr_t output, int dtype, bool average, std::optional<int> priority) {
        return Get()->PushPullRowsAsync(name, static_cast<const int64_t*>(Address(rows)),
                                        num_rows, Address(values),
                                        const_cast<void*>(Address(output)), Type(dtype),
                                        average, priority);
      },
      py::arg("name"), py::arg("rows"), py::arg("num_rows"), py::arg("values"),
      py::arg("output"), py::arg("dtype"), py::arg("average"),
      py::arg("priority") = py::none(),
      "Starts a sparse-rows push_pull (Worker::PushPullRowsAsync): `num_rows` int64 row ids "
      "at address `rows`, their rows at `values`; the sums go to `output`. Returns a handle.");
  m.def("poll", [](uint64_t handle) { return Get()->Poll(handle); }, py::arg("handle"));
  m.def(
      "wait",
      [](uint64_t handle) {
        auto w = Get();
        w->Wait(handle);
      },
      py::arg("handle"), py::call_guard<py::gil_scoped_release>(),
      "Blocks until the operation finished; raises FerryError if it failed.");
  m.def(
      "wait_for",
      [](uint64_t handle, int64_t timeout_ms) {
        auto w = Get();
        return w->WaitFor(handle, timeout_ms);
      },
      py::arg("handle"), py::arg("timeout_ms"), py::call_guard<py::gil_scoped_release>(),
      "Waits at most timeout_ms: True once finished (raises FerryError if it failed), "
      "False if still running.");
  m.def(
      "wait_any",
      [](const std::vector<uint64_t>& handles, int64_t timeout_ms) {
        auto w = Get();
        return w->WaitAny(handles, timeout_ms);
      },
      py::arg("handles"), py::arg("timeout_ms"), py::call_guard<py::gil_scoped_release>(),
      "Waits at most timeout_ms for any of the handles: the first finished one in the "
      "list (wait on it next: it raises its error), or 0 if none finished in time.");
  m.def(
      "broadcast",
      [](const std::string& name, uintptr_t data, int dtype, uint64_t count, int root) {
        auto w = Get();
        w->Broadcast(name, const_cast<void*>(Address(data)), Type(dtype), count, root);
      },
      py::arg("name"), py::arg("data"), py::arg("dtype"), py::arg("count"), py::arg("root"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "barrier",
      [] {
        auto w = Get();
        w->Barrier();
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "reset",
      [] {
        auto w = Get();
        w->Reset();
      },
      py::call_guard<py::gil_scoped_release>(),
      "Elastic training: takes the job's new membership after MembershipChangedError "
      "(Worker::Reset); rank() and size() may change. ferry.torch.elastic.run calls it.");
  m.def("epoch", [] { return Get()->epoch(); },
        "The membership epoch of this worker's operations (elastic training; 0 otherwise).");
  m.def(
      "hosts_updated",
      [] {
        auto w = Get();
        return w->HostsUpdated();
      },
      py::call_guard<py::gil_scoped_release>(),
      "Elastic training, at a commit on every worker: whether workers wait to join (then "
      "raise HostsUpdatedInterrupt and reset(); Worker::HostsUpdated).");
  m.def(
      "join",
      [] {
        auto w = Get();
        return w->Join();
      },
      py::call_guard<py::gil_scoped_release>(),
      "Uneven data: this worker has no more batches; returns once every worker joined, with "
      "the rank that joined last.");
  m.def(
      "step_boundary",
      [] {
        auto w = Get();
        w->StepBoundary();
      },
      py::call_guard<py::gil_scoped_release>(),
      "The end of a training iteration (Worker::StepBoundary): times it, drives "
      "FERRY_AUTOTUNE and marks FERRY_TRACE_DIR's timeline.");
  m.def(
      "trace_compute",
      [](const std::string& tensor, bool backward, int64_t begin_us, int64_t end_us) {
        Get()->TraceCompute(tensor, backward, begin_us, end_us);
      },
      py::arg("tensor"), py::arg("backward"), py::arg("begin_us"), py::arg("end_us"),
      "A span of compute for FERRY_TRACE_DIR's timeline (Worker::TraceCompute): "
      "[begin_us, end_us] of now_us(), the forward or backward compute of `tensor`. A no-op "
      "without FERRY_TRACE_DIR.");
  m.def("now_us", [] { return ferry::NowUs(); },
        "Microseconds on the core's clock (the steady clock): the times of trace_compute.");
  m.def(
      "set_scheduling",
      [](int64_t partition_bytes, int64_t credit_bytes) {
        auto w = Get();
        w->SetScheduling(partition_bytes, credit_bytes);
      },
      py::arg("partition_bytes"), py::arg("credit_bytes"),
      py::call_guard<py::gil_scoped_release>(),
      "Partition size and credit (bytes) from the next push_pull on; waits for this "
      "worker's operations. Call on every worker at the same point, between iterations.");
  m.def("scheduling", [] {
    auto w = Get();
    ferry::SchedulingChoice c = w->scheduling();
    py::dict d;
    d["policy"] = w->scheduling_policy();
    d["partition_bytes"] = c.partition_bytes;
    d["credit_bytes"] = c.credit_bytes;
    d["window_gain"] = c.window_gain;  // 0: the credit is fixed (FERRY_WINDOW)
    d["frame_bytes"] = c.frame_bytes;  // 0: whole partitions
    return d;
  });
  m.def("stats", [] {
    // Every counter of the worker's registry (Worker::Counters), "van.x" as "van_x".
    py::dict d;
    for (auto& [name, value] : Get()->Counters()) {
      std::string key = name;
      std::replace(key.begin(), key.end(), '.', '_');
      d[py::str(key)] = value;
    }
    return d;
  });
}
