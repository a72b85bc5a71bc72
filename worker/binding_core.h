#pragma once

// BindingCore: the one owner of a process's ferry::LocalGroup (local/local_group.h) behind
// every binding: the C API (c_api.cc), and through it the Python package's ferry._core
// (plugins/ferry/_core.py), so every binding reads the configuration, checks the role,
// starts logging and refuses calls in the same way, with the same messages.
//
// States: not initialised -> Init() -> initialised -> Shutdown(final) -> shut down (a
// process joins one job once). Re-initialisation: Shutdown(/*final=*/false) ->
// suspended (Collective::Suspend: the rank stays in the job, every declaration dropped)
// -> Init() -> initialised again (Collective::Resume), any number of times; a final
// Shutdown() from there, or the process's exit, ends it. The job ends once every worker
// is suspended or shut down and at least one is shut down for good (scheduler.h), so a
// program that calls ferry.torch.shutdown() and exits costs nothing. A local group
// (FERRY_LOCAL_SIZE > 1) and asynchronous training cannot suspend (CanSuspend):
// Shutdown(false) is final there.
//   Get() before Init():   FerryError kInvalidArgument, kNotInitialisedMessage.
//   Get() while suspended: FerryError kShutdown, kSuspendedMessage.
//   Get() after Shutdown(): FerryError kShutdown, kShutDownMessage; Init() likewise.
//
// Lifetime: Get() hands out a shared_ptr, and every call a binding makes holds it for the
// whole call. Shutdown() drops only the core's reference: a call in progress on another
// thread (say, waiting on a handle) keeps the group alive and returns (done, or with the
// group's error); the group is destroyed when the last such call lets go, on that call's
// thread.
//
// Thread-safety: every method may be called from any thread at any time. Init() and
// Shutdown() take turns: a Shutdown() during an Init() waits for it to finish, a second
// Shutdown() waits for the first to finish and then returns. Get() and IsInitialized()
// never wait for them. Errors throw FerryError.

#include <memory>
#include <mutex>
#include <string>

#include "common/config/config.h"
#include "common/reduce/reduce.h"
#include "worker/device/device_binding.h"
#include "worker/local/local_group.h"

namespace ferry {

class BindingCore {
 public:
  // The message of Get() before Init() ("not initialised" is what callers match).
  static constexpr const char* kNotInitialisedMessage =
      "ferry is not initialised: call ferry_init() (C) or ferry.torch.init() (Python) first";
  // The message of Get() and Init() after a final Shutdown().
  static constexpr const char* kShutDownMessage =
      "ferry was shut down for good: no call may follow a final shutdown (ferry_shutdown() in "
      "C, the exit of a Python process, or ferry.torch.shutdown() in a local group or in "
      "asynchronous training), and a process joins one job once";
  // The message of Get() after a non-final Shutdown().
  static constexpr const char* kSuspendedMessage =
      "ferry was shut down: call ferry.torch.init() to join the job again";

  BindingCore() = default;
  BindingCore(const BindingCore&) = delete;
  BindingCore& operator=(const BindingCore&) = delete;

  // The process's core, shared by every binding linked into one library. Never destroyed
  // (a group still running at exit is not torn down under static destructors).
  static BindingCore& Process();

  // Reads the environment (Config::FromEnvironment with the role fixed to worker:
  // DMLC_ROLE may be unset, else it must say worker), starts logging (InitLogging) and
  // joins the cluster (LocalGroup::Create; blocks until every node registered).
  // Idempotent while initialised; resumes a suspended core (Collective::Resume); throws
  // kShutdown after a final Shutdown(), or the error of the configuration or of joining
  // (then the core stays not initialised, or suspended).
  void Init() { Init(ProcessEnvironment()); }
  void Init(const EnvLookup& env);

  // The group for one call: hold it until the call returns. Throws (see above).
  std::shared_ptr<Collective> Get() const;

  // The device path of the group (device/device_binding.h): hold it for the call, as the
  // group. Throws like Get().
  std::shared_ptr<DeviceBinding> Devices() const;

  // True between Init() and Shutdown() (false while suspended).
  bool IsInitialized() const;

  // Whether the launcher gave the local group's shape (FERRY_LOCAL_SIZE or
  // BYTEPS_LOCAL_SIZE was set at Init()): then Get()->local_rank() and local_size() are
  // its word, validated by Config. Throws like Get().
  bool LocalSizeFromEnvironment() const;

  // A binding's dtype code (worker/c_api.h: 0 float32 .. 5 int64) as a DataType; throws
  // kInvalidArgument "unknown ferry dtype code N" for any other.
  static DataType CheckedDataType(int code);

  // `final`: waits for this worker's operations and leaves the job (Collective::Shutdown),
  // then drops the core's reference. Idempotent; a no-op before Init(); ends a suspension.
  // The core is shut down afterwards even when Collective::Shutdown throws (the job
  // failed): that error reaches the first caller only. Not `final`: suspends (above),
  // where the group can (else as final); if Suspend throws, the core stays initialised.
  void Shutdown(bool final = true);

 private:
  enum class State { kNotInitialised, kInitialised, kSuspended, kShutDown };

  std::mutex turn_mu_;     // held through Init() and Shutdown(): they take turns
  mutable std::mutex mu_;  // guards the members below; never held across a blocking call
  State state_ = State::kNotInitialised;
  std::shared_ptr<Collective> group_;  // set while kInitialised
  std::shared_ptr<DeviceBinding> devices_;  // with group_
  bool local_size_from_env_ = false;
};

}  // namespace ferry
