#include "sim/pipeline_spec.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/util/error.h"

namespace ferry::sim {
namespace {

using nlohmann::json;

// A table's limits: K x R and R x W stay far inside 64 bits (PipelineRows spreads K rows
// over the servers by the rows each owns).
constexpr uint64_t kMostTableRows = 10000000000ull;
constexpr uint64_t kMostRows = 1000000000ull;
constexpr uint64_t kMostTableBytes = 1ull << 40;

// Reading one file: every refusal names it and the field.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void Refuse(const std::string& field, const std::string& why) const {
    throw FerryError(ErrorCode::kInvalidConfig, StrCat("ferry-sim: --pipeline ", path_, ": ",
                                                       field.empty() ? "" : field + ": ", why));
  }

  // `object` has no field outside `known`.
  void OnlyKnown(const json& object, const std::string& where,
                 const std::vector<std::string>& known) const {
    for (const auto& [name, value] : object.items()) {
      if (std::find(known.begin(), known.end(), name) != known.end()) continue;
      std::string list;
      for (const std::string& k : known) list += StrCat(list.empty() ? "" : ", ", k);
      Refuse(where.empty() ? name : StrCat(where, ".", name),
             StrCat("unknown field (a pipeline has ", list, ")"));
    }
  }

  const json& Field(const json& object, const std::string& where, const std::string& name) const {
    const auto it = object.find(name);
    if (it == object.end()) Refuse(where.empty() ? name : StrCat(where, ".", name), "missing");
    return *it;
  }

  uint64_t Bytes(const json& v, const std::string& field) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() % 4 != 0) {
      Refuse(field, StrCat(v.dump(), " is not a positive multiple of 4 (float32 bytes)"));
    }
    return v.get<uint64_t>();
  }

  double Ms(const json& v, const std::string& field) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      Refuse(field, StrCat(v.dump(), " is not a time in ms >= 0"));
    }
    return v.get<double>();
  }

  uint64_t Count(const json& v, const std::string& field, uint64_t most) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > most) {
      Refuse(field, StrCat(v.dump(), " is not a whole number from 1 to ", most));
    }
    return v.get<uint64_t>();
  }

  SparseRows Rows(const json& v, const std::string& where) const {
    if (!v.is_object()) Refuse(where, "not an object");
    OnlyKnown(v, where, {"table_rows", "row_bytes", "rows"});
    SparseRows r;
    r.table_rows = Count(Field(v, where, "table_rows"), where + ".table_rows", kMostTableRows);
    r.row_bytes = Bytes(Field(v, where, "row_bytes"), where + ".row_bytes");
    r.rows = Count(Field(v, where, "rows"), where + ".rows", kMostRows);
    if (r.row_bytes > kMostTableBytes / r.table_rows) {
      Refuse(where, StrCat("a table of ", r.table_rows, " rows of ", r.row_bytes,
                           " bytes is more than 2^40 bytes"));
    }
    return r;
  }

  PipelineStage Stage(const json& v, const std::string& where) const {
    if (!v.is_object()) Refuse(where, "not an object");
    OnlyKnown(v, where, {"forward_ms", "backward_ms", "tensors", "sparse_rows"});
    PipelineStage s;
    s.forward_ms = Ms(Field(v, where, "forward_ms"), where + ".forward_ms");
    s.backward_ms = Ms(Field(v, where, "backward_ms"), where + ".backward_ms");
    const json& tensors = Field(v, where, "tensors");
    if (!tensors.is_array()) Refuse(where + ".tensors", "not a list of byte counts");
    for (size_t i = 0; i < tensors.size(); ++i) {
      s.tensors.push_back(Bytes(tensors[i], StrCat(where, ".tensors[", i, "]")));
    }
    if (v.contains("sparse_rows")) s.sparse_rows = Rows(v["sparse_rows"], where + ".sparse_rows");
    return s;
  }

  PipelineSpec Spec(const json& v) const {
    if (!v.is_object()) Refuse("", "not a JSON object");
    OnlyKnown(v, "", {"micro_batches", "activation_bytes", "stash", "stages", "comment"});
    if (v.contains("comment") && !v["comment"].is_string()) Refuse("comment", "not a string");
    PipelineSpec p;
    const json& m = Field(v, "", "micro_batches");
    if (!m.is_number_unsigned() || m.get<uint64_t>() < 1 || m.get<uint64_t>() > 1000000) {
      Refuse("micro_batches", StrCat(m.dump(), " is not a whole number from 1 to 1000000"));
    }
    p.micro_batches = static_cast<int>(m.get<uint64_t>());
    p.activation_bytes = Bytes(Field(v, "", "activation_bytes"), "activation_bytes");
    const json& stash = Field(v, "", "stash");
    if (!stash.is_boolean()) Refuse("stash", StrCat(stash.dump(), " is not true or false"));
    p.stash = stash.get<bool>();
    const json& stages = Field(v, "", "stages");
    if (!stages.is_array() || stages.empty()) Refuse("stages", "not a non-empty list of stages");
    for (size_t s = 0; s < stages.size(); ++s) {
      p.stages.push_back(Stage(stages[s], StrCat("stages[", s, "]")));
    }
    return p;
  }

 private:
  const std::string path_;
};

// As hybrid_bench.py sizes its tensors: max(1, floor(bytes x scale) / 4) float32 words.
uint64_t ScaleBytes(uint64_t bytes, double scale) {
  const auto scaled = static_cast<uint64_t>(std::floor(static_cast<double>(bytes) * scale));
  return 4 * std::max<uint64_t>(1, scaled / 4);
}

}  // namespace

PipelineSpec LoadPipeline(const std::string& path) {
  Reader reader(path);
  std::ifstream in(path);
  if (!in) reader.Refuse("", "cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  json v;
  try {
    v = json::parse(text.str());
  } catch (const json::exception& e) {
    reader.Refuse("", StrCat("not JSON (", e.what(), ")"));
  }
  PipelineSpec p = reader.Spec(v);
  p.name = std::filesystem::path(path).stem().string();
  return p;
}

PipelineSpec ScalePipeline(const PipelineSpec& spec, double compute_scale, double byte_scale) {
  PipelineSpec p = spec;
  p.activation_bytes = ScaleBytes(p.activation_bytes, byte_scale);
  for (PipelineStage& s : p.stages) {
    s.forward_ms *= compute_scale;
    s.backward_ms *= compute_scale;
    for (uint64_t& t : s.tensors) t = ScaleBytes(t, byte_scale);
    if (s.sparse_rows) s.sparse_rows->row_bytes = ScaleBytes(s.sparse_rows->row_bytes, byte_scale);
  }
  return p;
}

std::vector<PipelineOp> Schedule1F1B(int stage, int stages, int micro_batches) {
  std::vector<PipelineOp> ops;
  const int warm = std::min(stages - 1 - stage, micro_batches);
  int forwards = 0, backwards = 0;
  while (forwards < warm) ops.push_back({true, forwards++});
  while (forwards < micro_batches) {
    ops.push_back({true, forwards++});
    ops.push_back({false, backwards++});
  }
  while (backwards < micro_batches) ops.push_back({false, backwards++});
  return ops;
}

}  // namespace ferry::sim
