#include "worker/binding_core.h"

#include <utility>

#include "common/reduce/reduce.h"
#include "common/util/logging.h"
#include "common/util/status.h"

namespace ferry {

BindingCore& BindingCore::Process() {
  static BindingCore* core = new BindingCore();  // never destroyed (see the header)
  return *core;
}

void BindingCore::Init(const EnvLookup& env) {
  std::lock_guard<std::mutex> turn(turn_mu_);
  std::shared_ptr<Collective> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kInitialised) return;
    FERRY_ENFORCE(state_ != State::kShutDown, ErrorCode::kShutdown, kShutDownMessage);
    group = group_;
  }
  if (group) {  // suspended: the same rank joins again
    group->Resume();
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kInitialised;
    return;
  }
  // Workers need not set DMLC_ROLE; if set, it must say worker.
  const NodeRole role = NodeRole::kWorker;
  Config config = Config::FromEnvironment(env, &role);
  InitLogging("ferry", config, "worker");
  const bool local_size_from_env =
      env("FERRY_LOCAL_SIZE") != nullptr || env("BYTEPS_LOCAL_SIZE") != nullptr;
  group = LocalGroup::Create(config);
  auto devices = std::make_shared<DeviceBinding>(group, config.device_api);
  std::lock_guard<std::mutex> lock(mu_);
  group_ = std::move(group);
  devices_ = std::move(devices);
  local_size_from_env_ = local_size_from_env;
  state_ = State::kInitialised;
}

std::shared_ptr<Collective> BindingCore::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  FERRY_ENFORCE(state_ != State::kShutDown, ErrorCode::kShutdown, kShutDownMessage);
  FERRY_ENFORCE(state_ != State::kSuspended, ErrorCode::kShutdown, kSuspendedMessage);
  FERRY_ENFORCE(state_ == State::kInitialised, ErrorCode::kInvalidArgument, kNotInitialisedMessage);
  return group_;
}

std::shared_ptr<DeviceBinding> BindingCore::Devices() const {
  Get();  // throws unless initialised
  std::lock_guard<std::mutex> lock(mu_);
  return devices_;
}

bool BindingCore::IsInitialized() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kInitialised;
}

bool BindingCore::LocalSizeFromEnvironment() const {
  Get();  // throws unless initialised
  std::lock_guard<std::mutex> lock(mu_);
  return local_size_from_env_;
}

DataType BindingCore::CheckedDataType(int code) {
  FERRY_ENFORCE(IsValidDataType(code), ErrorCode::kInvalidArgument, "unknown ferry dtype code ",
                code);
  return static_cast<DataType>(code);
}

void BindingCore::Shutdown(bool final) {
  std::lock_guard<std::mutex> turn(turn_mu_);
  std::shared_ptr<Collective> group;
  std::shared_ptr<DeviceBinding> devices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kInitialised && state_ != State::kSuspended) return;
    if (!final && state_ == State::kSuspended) return;
    if (!final && group_->CanSuspend()) {
      group = group_;
    }
  }
  if (group) {
    group->Suspend();  // throws (the job failed, a timeout): still initialised
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kSuspended;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // From here on new calls are refused; calls in progress hold their own reference.
    state_ = State::kShutDown;
    group = std::move(group_);
    group_.reset();
    devices = std::move(devices_);
    devices_.reset();
  }
  // If this throws (the job failed), the group is still dropped: its threads stop and
  // its sockets close when the last call in progress lets go. The device path goes after
  // the group's operations (device_binding.h, "Lifetime").
  try {
    group->Shutdown();
  } catch (...) {
    devices.reset();
    throw;
  }
  devices.reset();
}

}  // namespace ferry
