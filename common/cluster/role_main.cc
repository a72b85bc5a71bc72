#include "common/cluster/role_main.h"

#include <glog/logging.h>

#include <unistd.h>

#include <csignal>
#include <cstdio>

#include "common/util/error.h"
#include "common/util/logging.h"
#include "common/util/program_flags.h"

namespace ferry {

int RunRoleMain(int argc, char** argv, const NodeRole* role,
                const std::function<int(const Config&)>& body) {
  if (AsksForHelp(argc, argv)) {
    std::printf("%s runs one node of a Ferry job (%s). Its settings are environment variables "
                "(DMLC_*, FERRY_*): docs/configuration.md lists them all, ferry.env.example "
                "shows a job's.\n",
                argv[0], role ? NodeRoleName(*role) : "the role DMLC_ROLE names");
    return kExitOk;
  }
  Config config;
  try {
    config = Config::FromEnvironment(ProcessEnvironment(), role);
  } catch (const FerryError& e) {
    std::fprintf(stderr, "ferry: %s\n", e.what());
    return kExitBadConfig;
  }
  InitLogging(argv[0], config, NodeRoleName(config.role));
  LOG(INFO) << "ferry " << NodeRoleName(config.role) << " (pid " << getpid()
            << "): " << config.Summary();
  // A peer that vanished must surface as an error, not kill us with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return body(config);
  } catch (const FerryError& e) {
    LOG(ERROR) << e.what();
    return e.code() == ErrorCode::kInvalidConfig ? kExitBadConfig : kExitFailure;
  }
}

}  // namespace ferry
