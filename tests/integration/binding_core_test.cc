// BindingCore (worker/binding_core.h): its states, its messages and its lifetime rule, with
// this test process as the only worker of a job on loopback (the scheduler and the server
// are child processes). The C API's side: ferry-test-c-shutdown (rows_cluster_test.cc).

#include "worker/binding_core.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/util/status.h"
#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

// The FerryError `f` throws (fails the test if none).
FerryError Thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const FerryError& e) {
    return e;
  }
  ADD_FAILURE() << "no FerryError";
  return FerryError(ErrorCode::kInternal, "none");
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(BindingCoreTest, CallsBeforeInitAreRefusedAsNotInitialised) {
  BindingCore core;
  EXPECT_FALSE(core.IsInitialized());
  FerryError e = Thrown([&] { core.Get(); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(e.what(), "not initialised")) << e.what();
  EXPECT_TRUE(Contains(e.what(), "ferry_init()")) << e.what();
  EXPECT_TRUE(Contains(e.what(), "ferry.torch.init()")) << e.what();
  core.Shutdown();  // a no-op
  EXPECT_EQ(Thrown([&] { core.Get(); }).code(), ErrorCode::kInvalidArgument);
}

TEST(BindingCoreTest, TheRoleIsCheckedOneWay) {
  BindingCore core;
  auto env = TestCluster().RoleEnv("server");
  FerryError e = Thrown([&] { core.Init(MapEnvironment(env)); });
  EXPECT_TRUE(Contains(e.what(), "DMLC_ROLE")) << e.what();
  EXPECT_FALSE(core.IsInitialized());
  EXPECT_EQ(Thrown([&] { core.Get(); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(BindingCore::CheckedDataType(0), DataType::kFloat32);
  FerryError dtype = Thrown([] { BindingCore::CheckedDataType(42); });
  EXPECT_TRUE(Contains(dtype.what(), "unknown ferry dtype code 42")) << dtype.what();
}

// A call in progress holds the group (Get()); Shutdown() on another thread ends the job and
// drops the core's reference only: the group stays usable until the call lets go. Later
// calls, Init() included, are refused with kShutdown.
TEST(BindingCoreTest, AGroupHeldByACallOutlivesShutdownOnAnotherThread) {
  TestCluster group;
  group.StartScheduler();
  group.StartServer();
  auto env = group.RoleEnv("worker");
  env["DMLC_WORKER_ID"] = "0";
  env.erase("DMLC_ROLE");  // a worker need not say so

  BindingCore core;
  core.Init(MapEnvironment(env));
  core.Init(MapEnvironment(env));  // idempotent
  ASSERT_TRUE(core.IsInitialized());
  EXPECT_FALSE(core.LocalSizeFromEnvironment());

  std::shared_ptr<Collective> call = core.Get();  // the call in progress
  std::vector<float> in(1000, 2.0f), out(1000, 0.0f);
  Handle h =
      call->PushPullAsync("held", in.data(), out.data(), DataType::kFloat32, in.size(), false);
  std::thread other([&] {
    core.Shutdown();
    core.Shutdown();  // idempotent
  });
  other.join();

  EXPECT_FALSE(core.IsInitialized());
  EXPECT_EQ(call.use_count(), 1);  // the core let go; the call keeps the group alive
  call->Wait(h);                   // finished before Shutdown() returned
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(call->rank(), 0);
  EXPECT_EQ(call->size(), 1);
  FerryError late = Thrown([&] {
    call->PushPullAsync("held", in.data(), out.data(), DataType::kFloat32, in.size(), false);
  });
  EXPECT_EQ(late.code(), ErrorCode::kShutdown) << late.what();

  FerryError get = Thrown([&] { core.Get(); });
  EXPECT_EQ(get.code(), ErrorCode::kShutdown);
  EXPECT_TRUE(Contains(get.what(), "ferry was shut down")) << get.what();
  EXPECT_EQ(Thrown([&] { core.Init(MapEnvironment(env)); }).code(), ErrorCode::kShutdown);
  EXPECT_EQ(Thrown([&] { core.LocalSizeFromEnvironment(); }).code(), ErrorCode::kShutdown);
  call.reset();  // the group is destroyed here, on this thread

  for (const ChildResult& r : group.WaitAll(30000L)) {
    EXPECT_TRUE(r.exited && r.exit_code == 0) << group.AllOutput();
  }
}

// Re-initialisation: Shutdown(final=false) suspends (calls refused as shut down, "init()"
// named), Init() joins again under the same rank with every name free, any number of times;
// a final Shutdown() ends the job cleanly.
TEST(BindingCoreTest, ANonFinalShutdownIsUndoneByInit) {
  TestCluster group;
  group.StartScheduler();
  group.StartServer();
  auto env = group.RoleEnv("worker");
  env["DMLC_WORKER_ID"] = "0";

  BindingCore core;
  core.Init(MapEnvironment(env));
  for (int cycle = 0; cycle < 3; ++cycle) {
    std::vector<float> x(10 + cycle, 1.0f + cycle);  // another size under one name each time
    core.Get()->PushPull("x", x.data(), x.data(), DataType::kFloat32, x.size(), false);
    EXPECT_EQ(x[0], 1.0f + cycle);
    core.Shutdown(/*final=*/false);
    core.Shutdown(/*final=*/false);  // idempotent
    EXPECT_FALSE(core.IsInitialized());
    FerryError get = Thrown([&] { core.Get(); });
    EXPECT_EQ(get.code(), ErrorCode::kShutdown);
    EXPECT_TRUE(Contains(get.what(), "call ferry.torch.init() to join the job again"))
        << get.what();
    core.Init(MapEnvironment(env));
    ASSERT_TRUE(core.IsInitialized());
    EXPECT_EQ(core.Get()->rank(), 0);
  }
  core.Shutdown();
  EXPECT_EQ(Thrown([&] { core.Init(MapEnvironment(env)); }).code(), ErrorCode::kShutdown);
  for (const ChildResult& r : group.WaitAll(30000L)) {
    EXPECT_TRUE(r.exited && r.exit_code == 0) << group.AllOutput();
  }
}

}  // namespace
}  // namespace ferry::testing
