// ferry-server: the summation service of a Ferry job (see server/server.h).
#include "common/cluster/role_main.h"
#include "server/server.h"

int main(int argc, char** argv) {
  const ferry::NodeRole role = ferry::NodeRole::kServer;
  return ferry::RunRoleMain(argc, argv, &role, [](const ferry::Config& config) {
    ferry::Server server(config);
    return server.Run();
  });
}
