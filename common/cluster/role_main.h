#pragma once

// The common frame of every Ferry program's main(): read the configuration (exit 2
// with the message on a bad one), set up logging, run the role, and turn a FerryError
// into a logged message and exit code 1.

#include <functional>
#include <string>

#include "common/config/config.h"

namespace ferry {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadConfig = 2;

// `--help` prints where the settings are (the environment) and returns 0.
// `role` fixes the program's role (nullptr: DMLC_ROLE decides). `body` runs the role
// and returns the exit code.
int RunRoleMain(int argc, char** argv, const NodeRole* role,
                const std::function<int(const Config&)>& body);

}  // namespace ferry
