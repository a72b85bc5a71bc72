// ferry-test-fake-gpu-server: ferry-server with FERRY_SERVER_DEVICE=gpu whose engines
// sum on a CPU stand-in for the GPU (tests/server/fake_gpu_summer.h), so that the
// server's GPU path (sums that arrive after the round completed, resends meanwhile,
// joins, failures) runs in integration tests on machines without a GPU. Everything but
// the summer is the real server. For tests only.
//
// Flags (faults of the stand-in): --max_delay_us, --slow_every, --slow_ms,
// --fail_after_adds (see FakeGpuFaults).

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <memory>

#include "common/cluster/role_main.h"
#include "common/util/error.h"
#include "server/server.h"
#include "tests/server/fake_gpu_summer.h"

DEFINE_int32(max_delay_us, 2000, "each sum is due 0..max_delay_us after its round completed");
DEFINE_int32(slow_every, 0, "every Nth sum of an engine is due after --slow_ms (0: none)");
DEFINE_int32(slow_ms, 0, "the delay of the slow sums");
DEFINE_int32(fail_after_adds, 0,
             "the Nth push an engine adds, and every call after it, fails as a broken GPU "
             "would (0: never)");

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const ferry::NodeRole role = ferry::NodeRole::kServer;
  return ferry::RunRoleMain(argc, argv, &role, [](const ferry::Config& config) {
    FERRY_ENFORCE(config.server.device == ferry::ServerDevice::kGpu,
                  ferry::ErrorCode::kInvalidConfig,
                  "ferry-test-fake-gpu-server stands in for a GPU server: set "
                  "FERRY_SERVER_DEVICE=gpu");
    ferry::testing::FakeGpuFaults faults;
    faults.max_delay_us = FLAGS_max_delay_us;
    faults.slow_every = FLAGS_slow_every;
    faults.slow_ms = FLAGS_slow_ms;
    faults.fail_after_adds = FLAGS_fail_after_adds;
    LOG(INFO) << "summation device: a CPU stand-in for the GPU (FakeGpuSummer: sums due after "
                 "up to "
              << faults.max_delay_us << " us, every " << faults.slow_every << "th after "
              << faults.slow_ms << " ms, failure after " << faults.fail_after_adds << " adds)";
    ferry::Server server(config, [faults](const ferry::GpuSummerOptions& options) {
      return std::make_unique<ferry::testing::FakeGpuSummer>(options, faults);
    });
    return server.Run();
  });
}
