// ferry-scheduler: the control plane of a Ferry job (see scheduler/scheduler.h).
#include "common/cluster/role_main.h"
#include "scheduler/scheduler.h"

int main(int argc, char** argv) {
  const ferry::NodeRole role = ferry::NodeRole::kScheduler;
  return ferry::RunRoleMain(argc, argv, &role, [](const ferry::Config& config) {
    ferry::Scheduler scheduler(config);
    return scheduler.Run();
  });
}
