#include "common/util/counters.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/util/strings.h"

namespace ferry {

Counter& CounterRegistry::Register(const std::string& name) {
  MutexLock lock(mu_);
  for (auto& [n, c] : counters_) {
    if (n == name) return c;
  }
  counters_.emplace_back(std::piecewise_construct, std::forward_as_tuple(name),
                         std::forward_as_tuple());
  return counters_.back().second;
}

CounterValues CounterRegistry::Snapshot() const {
  MutexLock lock(mu_);
  CounterValues out;
  out.reserve(counters_.size());
  for (const auto& [n, c] : counters_) out.emplace_back(n, c.value());
  return out;
}

namespace {

// Names and roles are ours (letters, digits, '_' and '.'), but escape what JSON needs.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

std::string CountersJson(const std::string& role, int rank, const CounterValues& values) {
  std::string s = StrCat("{\"role\": ", JsonString(role), ", \"rank\": ", rank, ", \"counters\": {");
  for (size_t i = 0; i < values.size(); ++i) {
    s += StrCat(i ? ", " : "", JsonString(values[i].first), ": ", values[i].second);
  }
  return s + "}}\n";
}

std::string StatsFilePath(const std::string& path_template, const std::string& role, int rank) {
  std::string out;
  for (size_t i = 0; i < path_template.size(); ++i) {
    if (path_template[i] == '%' && i + 1 < path_template.size() && path_template[i + 1] == 'r') {
      out += StrCat(role, "-", rank);
      ++i;
    } else {
      out += path_template[i];
    }
  }
  return out;
}

Status WriteStatsFile(const std::string& path_template, const std::string& role, int rank,
                      const CounterValues& values) {
  if (path_template.empty()) return Status::Ok();
  const std::string path = StatsFilePath(path_template, role, rank);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << CountersJson(role, rank, values);
    out.flush();
    if (!out) {
      return Status(ErrorCode::kInvalidConfig,
                    StrCat("FERRY_STATS_FILE: cannot write ", tmp, ": ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status(ErrorCode::kInvalidConfig,
                  StrCat("FERRY_STATS_FILE: cannot rename ", tmp, " to ", path, ": ",
                         std::strerror(errno)));
  }
  return Status::Ok();
}

uint64_t CounterValue(const CounterValues& values, const std::string& name) {
  for (const auto& [n, v] : values) {
    if (n == name) return v;
  }
  return 0;
}

}  // namespace ferry
