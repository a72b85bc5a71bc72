#include "sim/trace_workload.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/util/error.h"

namespace ferry {
namespace {

using Json = nlohmann::json;

// Whether the file `in` ends right after a whole event: the parse error came at its end
// (`error_byte`, nlohmann's 1-based count, is past the last byte) and nothing but white
// space follows the event's closing brace (not even the comma before a next event).
bool EndsAfterAnEvent(std::ifstream& in, size_t error_byte) {
  in.clear();
  in.seekg(0, std::ios::end);
  std::streamoff at = in.tellg();
  if (at < 0 || error_byte <= static_cast<size_t>(at)) return false;
  char c = 0;
  while (at > 0) {
    in.seekg(--at);
    if (!in.get(c)) return false;
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
  }
  return c == '}';
}

// Calls `on_event` with each element of the trace's "traceEvents", in file order. A trace
// of a long run holds millions of events: the parser's callback drops each event from the
// document once it is handed over (and every other top-level field at once), so one event
// at a time is in memory. A file that ends after a whole event, without the closing
// brackets (a worker that was killed), is read up to there.
template <typename F>
void ReadTraceEvents(const std::string& path, F on_event) {
  std::ifstream in(path, std::ios::binary);
  FERRY_ENFORCE(in.good(), ErrorCode::kInvalidConfig, "cannot read the trace ", path);
  auto not_a_trace = [&](const char* why) {
    return FerryError(ErrorCode::kInvalidConfig,
                      StrCat(path, ": not a Chrome trace of a Ferry worker (", why, ")"));
  };
  using Event = Json::parse_event_t;
  bool at_events = false;    // the value being read is that of the top-level "traceEvents"
  bool in_events = false;    // inside that array
  bool found = false;        // saw it
  bool after_event = false;  // the last thing read was a whole event
  // Depths: 0 the document, 1 its fields, 2 the events (in "traceEvents"), 3 their fields.
  auto filter = [&](int depth, Event event, Json& parsed) -> bool {
    after_event = false;
    if (depth == 0 && event != Event::object_start && event != Event::object_end) {
      throw not_a_trace("not a JSON object with \"traceEvents\"");
    }
    if (depth == 1) {
      if (event == Event::key) {
        at_events = parsed == "traceEvents";
        return at_events;  // the other fields are parsed but not kept
      }
      if (at_events) {
        if (event != Event::array_start) throw not_a_trace("\"traceEvents\" is not an array");
        at_events = false;
        in_events = found = true;
      } else if (event == Event::array_end) {
        in_events = false;
      }
      return true;
    }
    if (depth == 2 && in_events) {
      if (event == Event::object_end) {
        on_event(parsed);
        after_event = true;
        return false;  // handed over: not kept in the document
      }
      if (event == Event::value || event == Event::array_start) {
        throw not_a_trace("an element of \"traceEvents\" is not an object");
      }
    }
    return true;
  };
  try {
    [[maybe_unused]] const Json rest = Json::parse(in, filter);  // {"traceEvents": []}
  } catch (const Json::parse_error& e) {
    if (!after_event || !EndsAfterAnEvent(in, e.byte)) {
      std::string what = e.what();  // "[json.exception.parse_error.101] parse error at ..."
      what = what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2);
      throw FerryError(ErrorCode::kInvalidConfig,
                       StrCat(path, ": not valid JSON at byte ", e.byte - 1, ": ", what));
    }
  } catch (const Json::exception& e) {  // e.g. a number too large for a double
    throw FerryError(ErrorCode::kInvalidConfig, StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!found) throw not_a_trace("no \"traceEvents\"");
}

// `object`'s field `key`, or null.
const Json& Field(const Json& object, const char* key) {
  static const Json kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string Str(const Json& object, const char* key) {
  const Json& v = Field(object, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}

bool Num(const Json& object, const char* key, double* out) {
  const Json& v = Field(object, key);
  if (!v.is_number()) return false;
  *out = v.get<double>();
  return true;
}

struct Span {
  std::string tensor;
  bool backward = false;
  double ts = 0;
  double dur = 0;
};

struct PartitionMark {
  std::string tensor;
  double ts = 0;
  uint64_t bytes = 0;
  int priority = 0;
};

// One worker's file, as read.
struct RankTrace {
  std::string path;
  std::vector<double> steps;  // "step <n>" instants, in time order
  std::vector<Span> spans;
  std::vector<PartitionMark> partitions;
};

bool Reserved(const std::string& tensor) { return tensor.rfind("__ferry__/", 0) == 0; }

// ferry-train-sim's "train_sim/<index>/<layer>" -> "<layer>".
std::string LayerName(const std::string& tensor) {
  const std::string prefix = "train_sim/";
  if (tensor.rfind(prefix, 0) != 0) return tensor;
  size_t i = prefix.size();
  size_t digits = i;
  while (digits < tensor.size() && std::isdigit(static_cast<unsigned char>(tensor[digits])))
    digits++;
  if (digits == i || digits >= tensor.size() || tensor[digits] != '/') return tensor;
  return tensor.substr(digits + 1);
}

RankTrace ReadRank(const std::string& path) {
  RankTrace r;
  r.path = path;
  ReadTraceEvents(path, [&](const Json& e) {
    const Json& args = Field(e, "args");
    const std::string ph = Str(e, "ph"), cat = Str(e, "cat"), name = Str(e, "name");
    double ts = 0;
    if (!Num(e, "ts", &ts)) return;
    if (ph == "i" && name.rfind("step ", 0) == 0) {
      r.steps.push_back(ts);
    } else if (ph == "X" && cat == "compute") {
      Span s;
      s.tensor = Str(args, "tensor");
      if (s.tensor.empty()) s.tensor = name;
      s.backward = Str(args, "phase") == "backward";
      s.ts = ts;
      Num(e, "dur", &s.dur);
      r.spans.push_back(s);
    } else if (ph == "b" && cat == "partition") {
      double bytes = 0, priority = 0;
      if (!Num(args, "bytes", &bytes)) return;  // a stage, not the partition's slice
      Num(args, "priority", &priority);
      PartitionMark p;
      p.tensor = name.substr(0, name.rfind('['));
      p.ts = ts;
      p.bytes = static_cast<uint64_t>(bytes);
      p.priority = static_cast<int>(priority);
      r.partitions.push_back(p);
    }
  });
  std::sort(r.steps.begin(), r.steps.end());
  return r;
}

// One tensor in one used iteration of one rank.
struct Sample {
  double fwd_us = 0;
  double bwd_us = 0;
  uint64_t bytes = 0;
  double first_fwd = -1;  // start of its first forward span, since the iteration began
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

Workload LoadTraceWorkload(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  FERRY_ENFORCE(fs::is_directory(dir, ec), ErrorCode::kInvalidConfig, "the trace directory '", dir,
                "' is not a directory");
  std::vector<std::pair<int, std::string>> files;  // (rank, path)
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string base = entry.path().filename().string();
    const std::string prefix = "ferry-worker-", suffix = ".json";
    if (base.size() <= prefix.size() + suffix.size() || base.rfind(prefix, 0) != 0 ||
        base.compare(base.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string rank =
        base.substr(prefix.size(), base.size() - prefix.size() - suffix.size());
    if (rank.find_first_not_of("0123456789") != std::string::npos) continue;
    files.emplace_back(std::atoi(rank.c_str()), entry.path().string());
  }
  FERRY_ENFORCE(!ec, ErrorCode::kInvalidConfig, "cannot list the trace directory '", dir,
                "': ", ec.message());
  FERRY_ENFORCE(!files.empty(), ErrorCode::kInvalidConfig, "the trace directory '", dir,
                "' holds no ferry-worker-<rank>.json: record a run with FERRY_TRACE_DIR=", dir);
  std::sort(files.begin(), files.end());

  // Per tensor: every sample, the priorities seen; the tensors in first-seen order.
  std::map<std::string, std::vector<Sample>> samples;
  std::map<std::string, std::map<int, int>> priorities;  // tensor -> priority -> count
  size_t num_samples = 0;
  for (const auto& [rank, path] : files) {
    RankTrace r = ReadRank(path);
    FERRY_ENFORCE(!r.spans.empty(), ErrorCode::kInvalidConfig, path,
                  ": no compute spans: record the trace with a ferry-train-sim or ferry.torch "
                  "of this version (or report compute with Worker::TraceCompute)");
    FERRY_ENFORCE(r.steps.size() >= 2, ErrorCode::kInvalidConfig, path, ": ", r.steps.size(),
                  " \"step\" mark(s): no whole iteration (the program calls StepBoundary once "
                  "per iteration; run at least two)");
    FERRY_ENFORCE(!r.partitions.empty(), ErrorCode::kInvalidConfig, path,
                  ": no partitions: the run pushed no gradients");
    const size_t iterations = r.steps.size() - 1;
    const size_t first = iterations >= 2 ? 1 : 0;  // the first is warm-up
    // The iteration an event at `ts` belongs to, or -1 outside the used ones.
    auto iteration_of = [&](double ts) -> long {
      auto it = std::upper_bound(r.steps.begin(), r.steps.end(), ts);
      if (it == r.steps.begin() || it == r.steps.end()) return -1;
      size_t i = static_cast<size_t>(it - r.steps.begin()) - 1;
      return i < first ? -1 : static_cast<long>(i - first);
    };
    const size_t used = iterations - first;
    std::map<std::string, std::vector<Sample>> mine;
    auto sample = [&](const std::string& tensor, long i) -> Sample& {
      std::vector<Sample>& v = mine[tensor];
      v.resize(used);
      return v[static_cast<size_t>(i)];
    };
    for (const Span& s : r.spans) {
      // By its end: ferry-train-sim's first backward span starts on its compute clock,
      // just before the "step" mark its forward's sleep ended in.
      long i = iteration_of(s.ts + s.dur);
      if (i < 0 || Reserved(s.tensor)) continue;
      Sample& x = sample(s.tensor, i);
      (s.backward ? x.bwd_us : x.fwd_us) += s.dur;
      const double offset = s.ts - r.steps[static_cast<size_t>(i) + first];
      if (!s.backward && (x.first_fwd < 0 || offset < x.first_fwd)) x.first_fwd = offset;
    }
    for (const PartitionMark& p : r.partitions) {
      long i = iteration_of(p.ts);
      if (i < 0 || Reserved(p.tensor)) continue;
      sample(p.tensor, i).bytes += p.bytes;
      priorities[p.tensor][p.priority]++;
    }
    // Every tensor gets a sample for each used iteration of every rank (zeros if absent).
    for (auto& [tensor, v] : samples) v.resize(num_samples + used);
    for (auto& [tensor, v] : mine) {
      std::vector<Sample>& all = samples[tensor];
      all.resize(num_samples + used);
      std::copy(v.begin(), v.end(), all.begin() + static_cast<long>(num_samples));
    }
    num_samples += used;
  }

  struct Row {
    Layer layer;
    bool has_fwd = false;
    double order = 0;  // median start of the first forward span
    int priority = 0;  // the most frequent
  };
  std::vector<Row> rows;
  for (auto& [tensor, v] : samples) {
    v.resize(num_samples);
    Row row;
    row.layer.name = tensor;
    std::vector<double> fwd, bwd, order;
    std::map<uint64_t, int> bytes;
    for (const Sample& x : v) {
      fwd.push_back(x.fwd_us);
      bwd.push_back(x.bwd_us);
      if (x.first_fwd >= 0) order.push_back(x.first_fwd);
      if (x.bytes) bytes[x.bytes]++;
    }
    int best = 0;
    for (const auto& [b, n] : bytes) {
      if (n >= best) {  // the larger on a tie (ascending keys)
        best = n;
        row.layer.bytes = b;
      }
    }
    row.layer.fwd_ms = Median(fwd) / 1000.0;
    row.layer.bwd_ms = Median(bwd) / 1000.0;
    row.has_fwd = !order.empty();
    row.order = Median(order);
    best = 0;
    for (const auto& [p, n] : priorities[tensor]) {
      if (n > best) {
        best = n;
        row.priority = p;
      }
    }
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.has_fwd != b.has_fwd) return a.has_fwd;
    if (a.has_fwd) return a.order < b.order;
    return a.priority > b.priority;
  });

  // Compute without a gradient goes to the layer before it (forward order).
  Workload w;
  w.model = fs::path(dir).lexically_normal().filename().string();
  if (w.model.empty()) w.model = fs::path(dir).lexically_normal().parent_path().filename().string();
  double carry_fwd = 0, carry_bwd = 0;  // of tensors before the first layer with bytes
  for (const Row& row : rows) {
    if (row.layer.bytes == 0) {
      if (w.layers.empty()) {
        carry_fwd += row.layer.fwd_ms;
        carry_bwd += row.layer.bwd_ms;
      } else {
        w.layers.back().fwd_ms += row.layer.fwd_ms;
        w.layers.back().bwd_ms += row.layer.bwd_ms;
      }
      continue;
    }
    Layer layer = row.layer;
    layer.name = LayerName(layer.name);
    layer.fwd_ms += carry_fwd;
    layer.bwd_ms += carry_bwd;
    carry_fwd = carry_bwd = 0;
    w.layers.push_back(layer);
  }
  FERRY_ENFORCE(!w.layers.empty(), ErrorCode::kInvalidConfig, "the traces in '", dir,
                "' have no partitions in a whole iteration (between two \"step\" marks)");
  return w;
}

}  // namespace ferry
