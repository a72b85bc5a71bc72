#pragma once

// StatsFiles: the counters the nodes of a test cluster write at exit (FERRY_STATS_FILE),
// read back for assertions instead of parsing log sentences. Header-only.
//
//   StatsFiles stats;                                  // a fresh temporary folder
//   env["FERRY_STATS_FILE"] = stats.path_template();   // <dir>/%r.json
//   ... run the cluster ...
//   EXPECT_GT(stats.Sum("worker", "resends"), 0u);

#include <dirent.h>

#include <algorithm>
#include <unistd.h>
#include <stdlib.h>

#include <algorithm>
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
    for (uint64_t v : Values(role, counter)) {
      if (v == UINT64_MAX) return v;
      total += v;
    }
    return total;
  }
  // The smallest value of `counter` over the files of `role` (UINT64_MAX: none, or one bad).
  uint64_t Min(const std::string& role, const std::string& counter) const {
    std::vector<uint64_t> values = Values(role, counter);
    if (values.empty() || std::count(values.begin(), values.end(), UINT64_MAX)) return UINT64_MAX;
    return *std::min_element(values.begin(), values.end());
  }

 private:
  // `counter` in each file of `role`; UINT64_MAX for a file that is not valid JSON or lacks it.
  std::vector<uint64_t> Values(const std::string& role, const std::string& counter) const {
    std::vector<uint64_t> out;
    for (const std::string& f : Files(role + "-")) {
      std::ifstream in(dir_ + "/" + f);
      std::stringstream text;
      text << in.rdbuf();
      Json j;
      JsonParser p(text.str());
      const bool ok = p.Parse(&j) && j["counters"][counter].kind == Json::kNumber;
      out.push_back(ok ? static_cast<uint64_t>(j["counters"][counter].number) : UINT64_MAX);
    }
    return out;
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
