#include "sim/trace_workload.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "common/util/error.h"

namespace ferry {
namespace {

// What one event of a trace says, as far as the reader needs it: the top-level fields
// and those of "args" (strings and numbers; anything nested deeper is skipped).
struct Event {
  std::map<std::string, std::string> str;
  std::map<std::string, double> num;
  std::map<std::string, std::string> arg_str;
  std::map<std::string, double> arg_num;
};

// A strict JSON reader for the trace's object form, one event at a time: a trace of a
// long run holds millions of events, which are never all in memory.
class TraceParser {
 public:
  TraceParser(std::string text, std::string path) : s_(std::move(text)), path_(std::move(path)) {}

  // Calls `on_event` for each element of "traceEvents". A file that ends after a whole
  // event, without the closing brackets (a worker that was killed), is read up to there.
  template <typename F>
  void Read(F on_event) {
    Expect('{');
    bool found = false;
    if (Peek() != '}') {
      do {
        std::string key = String();
        Expect(':');
        if (key != "traceEvents") {
          Skip(0);
          continue;
        }
        found = true;
        Expect('[');
        if (Peek() == ']') {
          at_++;
          continue;
        }
        do {
          on_event(ReadEvent());
          if (AtEnd()) return;  // truncated after a whole event
        } while (Comma());
        Expect(']');
      } while (Comma());
    }
    Expect('}');
    FERRY_ENFORCE(found, ErrorCode::kInvalidConfig, path_,
                  ": not a Chrome trace of a Ferry worker (no \"traceEvents\")");
  }

 private:
  [[noreturn]] void Fail(const std::string& what) {
    throw FerryError(ErrorCode::kInvalidConfig,
                     StrCat(path_, ": not valid JSON at byte ", at_, ": ", what));
  }
  void Space() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) at_++;
  }
  bool AtEnd() {
    Space();
    return at_ == s_.size();
  }
  char Peek() {
    Space();
    if (at_ == s_.size()) Fail("unexpected end of file");
    return s_[at_];
  }
  void Expect(char c) {
    if (Peek() != c) Fail(StrCat("expected '", std::string(1, c), "'"));
    at_++;
  }
  bool Comma() {
    if (Peek() != ',') return false;
    at_++;
    return true;
  }
  std::string String() {
    Expect('"');
    std::string out;
    while (at_ < s_.size() && s_[at_] != '"') {
      char c = s_[at_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) break;
      char e = s_[at_++];
      if (e == 'u') {
        if (at_ + 4 > s_.size()) Fail("a \\u escape cut short");
        long code = std::strtol(s_.substr(at_, 4).c_str(), nullptr, 16);
        at_ += 4;
        if (code < 0x80) {
          out += static_cast<char>(code);
        } else if (code < 0x800) {  // UTF-8 (surrogate pairs are not joined)
          out += static_cast<char>(0xC0 | (code >> 6));
          out += static_cast<char>(0x80 | (code & 0x3F));
        } else {
          out += static_cast<char>(0xE0 | (code >> 12));
          out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (code & 0x3F));
        }
      } else {
        out += e == 'n'   ? '\n'
               : e == 't' ? '\t'
               : e == 'r' ? '\r'
               : e == 'b' ? '\b'
               : e == 'f' ? '\f'
                          : e;
      }
    }
    if (at_ >= s_.size()) Fail("a string without its closing quote");
    at_++;
    return out;
  }
  double Number() {
    Space();
    const char* begin = s_.c_str() + at_;
    char* end = nullptr;
    double v = std::strtod(begin, &end);
    if (end == begin) Fail("expected a value");
    at_ += static_cast<size_t>(end - begin);
    return v;
  }
  bool Word(const char* w) {
    size_t n = std::char_traits<char>::length(w);
    if (s_.compare(at_, n, w) != 0) return false;
    at_ += n;
    return true;
  }
  // Skips one value of any kind.
  void Skip(int depth) {
    if (depth > 64) Fail("nested too deeply");
    char c = Peek();
    if (c == '"') {
      String();
    } else if (c == '{' || c == '[') {
      at_++;
      const char close = c == '{' ? '}' : ']';
      if (Peek() == close) {
        at_++;
        return;
      }
      do {
        if (c == '{') {
          String();
          Expect(':');
        }
        Skip(depth + 1);
      } while (Comma());
      Expect(close);
    } else if (!Word("true") && !Word("false") && !Word("null")) {
      Number();
    }
  }
  // One flat object's strings and numbers into `str` and `num`; `args` (when given) gets
  // the "args" object's.
  void Object(std::map<std::string, std::string>* str, std::map<std::string, double>* num,
              Event* args) {
    Expect('{');
    if (Peek() == '}') {
      at_++;
      return;
    }
    do {
      std::string key = String();
      Expect(':');
      char c = Peek();
      if (c == '"') {
        (*str)[key] = String();
      } else if (c == '{' && args && key == "args") {
        Object(&args->arg_str, &args->arg_num, nullptr);
      } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
        (*num)[key] = Number();
      } else {
        Skip(1);
      }
    } while (Comma());
    Expect('}');
  }
  Event ReadEvent() {
    Event e;
    Object(&e.str, &e.num, &e);
    return e;
  }

  const std::string s_;
  const std::string path_;
  size_t at_ = 0;
};

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
  std::ifstream in(path);
  FERRY_ENFORCE(in.good(), ErrorCode::kInvalidConfig, "cannot read the trace ", path);
  std::stringstream text;
  text << in.rdbuf();
  RankTrace r;
  r.path = path;
  TraceParser(text.str(), path).Read([&](const Event& e) {
    auto str = [](const std::map<std::string, std::string>& m, const char* k) {
      auto it = m.find(k);
      return it == m.end() ? std::string() : it->second;
    };
    auto num = [](const std::map<std::string, double>& m, const char* k, double* out) {
      auto it = m.find(k);
      if (it == m.end()) return false;
      *out = it->second;
      return true;
    };
    const std::string ph = str(e.str, "ph"), cat = str(e.str, "cat"), name = str(e.str, "name");
    double ts = 0;
    if (!num(e.num, "ts", &ts)) return;
    if (ph == "i" && name.rfind("step ", 0) == 0) {
      r.steps.push_back(ts);
    } else if (ph == "X" && cat == "compute") {
      Span s;
      s.tensor = str(e.arg_str, "tensor");
      if (s.tensor.empty()) s.tensor = name;
      s.backward = str(e.arg_str, "phase") == "backward";
      s.ts = ts;
      num(e.num, "dur", &s.dur);
      r.spans.push_back(s);
    } else if (ph == "b" && cat == "partition") {
      double bytes = 0, priority = 0;
      if (!num(e.arg_num, "bytes", &bytes)) return;  // a stage, not the partition's slice
      num(e.arg_num, "priority", &priority);
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
