#include "sim/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

#include "common/util/error.h"

namespace ferry {
namespace {

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, ',')) fields.push_back(field);
  return fields;
}

double ParseNumber(const std::string& text, const std::string& where) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  FERRY_ENFORCE(!text.empty() && end && *end == '\0' && std::isfinite(v) && v >= 0,
                ErrorCode::kInvalidArgument, where, ": '", text, "' is not a non-negative number");
  return v;
}

std::string ModelName(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  const std::string suffix = "_layers.csv";
  if (base.size() > suffix.size() &&
      base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return base.substr(0, base.size() - suffix.size());
  }
  return base;
}

const char* const kHeader = "row,name,params,bytes,ntensors,fwd_ms,bwd_ms";

}  // namespace

Workload LoadWorkload(const std::string& path) {
  std::ifstream in(path);
  FERRY_ENFORCE(in.good(), ErrorCode::kInvalidArgument, "cannot open the workload file '", path,
                "'");
  Workload w;
  w.model = ModelName(path);
  std::string line;
  bool header = false;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::string where = StrCat(path, ":", number);
    if (!header) {
      FERRY_ENFORCE(line == kHeader, ErrorCode::kInvalidArgument, where, ": expected the header '",
                    kHeader, "', got '", line, "'");
      header = true;
      continue;
    }
    std::vector<std::string> f = SplitCsv(line);
    FERRY_ENFORCE(f.size() == 7, ErrorCode::kInvalidArgument, where, ": expected 7 fields, got ",
                  f.size());
    Layer layer;
    layer.name = f[1];
    layer.bytes = static_cast<uint64_t>(ParseNumber(f[3], where + " (bytes)"));
    layer.fwd_ms = ParseNumber(f[5], where + " (fwd_ms)");
    layer.bwd_ms = ParseNumber(f[6], where + " (bwd_ms)");
    FERRY_ENFORCE(layer.bytes > 0 && layer.bytes % 4 == 0, ErrorCode::kInvalidArgument, where,
                  ": bytes ", layer.bytes, " is not a positive multiple of 4 (float32)");
    w.layers.push_back(layer);
  }
  FERRY_ENFORCE(header && !w.layers.empty(), ErrorCode::kInvalidArgument, "the workload file '",
                path, "' has no layers");
  std::reverse(w.layers.begin(), w.layers.end());  // backprop order -> forward order
  return w;
}

Workload PushPullWorkload(uint64_t bytes) {
  FERRY_ENFORCE(bytes > 0 && bytes % 4 == 0, ErrorCode::kInvalidArgument, "a push_pull of ", bytes,
                " bytes: need a positive multiple of 4 (float32)");
  Workload w;
  w.model = "pushpull";
  w.layers.push_back(Layer{"tensor", bytes, 0.0, 0.0});
  return w;
}

Workload ScaleWorkload(const Workload& workload, double compute_scale, double byte_scale) {
  Workload w = workload;
  for (Layer& l : w.layers) {
    l.fwd_ms *= compute_scale;
    l.bwd_ms *= compute_scale;
    double elements = std::round(static_cast<double>(l.bytes / 4) * byte_scale);
    l.bytes = 4 * std::max<uint64_t>(1, static_cast<uint64_t>(elements));
  }
  return w;
}

IterationSummary Summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  size_t n = ms.size();
  IterationSummary s;
  s.median_ms = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  s.p90_ms = ms[static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n))) - 1];
  s.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(n);
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  return s;
}

}  // namespace ferry
