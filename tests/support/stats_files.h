#pragma once

// StatsFiles: the counters the nodes of a test cluster write at exit (FERRY_STATS_FILE),
// read back for assertions instead of parsing log sentences. Header-only.
//
//   StatsFiles stats;                                  // a fresh temporary folder
//   env["FERRY_STATS_FILE"] = stats.path_template();   // <dir>/%r.json
//   ... run the cluster ...
//   EXPECT_GT(stats.Sum("worker", "resends"), 0u);

#include <dirent.h>
#include <unistd.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/json.h"

namespace ferry::testing {

class StatsFiles {
 public:
  StatsFiles() {
    char dir[] = "/tmp/ferry-stats-XXXXXX";
    dir_ = mkdtemp(dir) ? dir : "/tmp";
  }
  ~StatsFiles() {
    for (const std::string& f : Files("")) std::remove((dir_ + "/" + f).c_str());
    rmdir(dir_.c_str());
  }
  StatsFiles(const StatsFiles&) = delete;
  StatsFiles& operator=(const StatsFiles&) = delete;

  std::string path_template() const { return dir_ + "/%r.json"; }
  // How many nodes of `role` wrote their file.
  int Count(const std::string& role) const { return static_cast<int>(Files(role + "-").size()); }
  // The sum of `counter` over every file of `role` ("worker", "server", "scheduler"); a
  // file that is not valid JSON, or lacks the counter, fails the test's expectations by
  // counting as a huge number (so EXPECT_EQ / EXPECT_LE notice it).
  uint64_t Sum(const std::string& role, const std::string& counter) const {
    uint64_t total = 0;
    for (const std::string& f : Files(role + "-")) {
      std::ifstream in(dir_ + "/" + f);
      std::stringstream text;
      text << in.rdbuf();
      Json j;
      JsonParser p(text.str());
      if (!p.Parse(&j) || j["counters"][counter].kind != Json::kNumber) return UINT64_MAX;
      total += static_cast<uint64_t>(j["counters"][counter].number);
    }
    return total;
  }

 private:
  std::vector<std::string> Files(const std::string& prefix) const {
    std::vector<std::string> out;
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.rfind(prefix, 0) == 0 && name.size() > 5 &&
            name.compare(name.size() - 5, 5, ".json") == 0) {
          out.push_back(name);
        }
      }
      closedir(d);
    }
    return out;
  }
  std::string dir_;
};

}  // namespace ferry::testing
