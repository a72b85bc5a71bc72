#pragma once

// Logging set-up: glog's level and verbosity from the Config, and the node's name in
// every line ("I1129 15:40:01.123456 server 1 file.cc:42] ..."), so that the interleaved
// logs of a local cluster say which process wrote each line.

#include <string>

namespace ferry {

struct Config;

// Applies config.diagnostics.log_level and config.diagnostics.log_verbosity to glog, names the node in every
// line and logs config.warnings. InitGoogleLogging may run once per process (a
// framework in the same process may have run it already); later calls only update
// level and name.
void InitLogging(const char* argv0, const Config& config, const std::string& node_name);
// Renames the node in log lines (e.g. "worker ?" -> "worker 1" once the rank is known).
// Thread-safe: other threads keep logging meanwhile.
void SetLogNodeName(const std::string& name);

}  // namespace ferry
