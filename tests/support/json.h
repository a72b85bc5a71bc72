#pragma once

// Json: a JSON value, parsed by nlohmann::json (strict RFC 8259), for tests that check
// files Ferry writes (the FERRY_TRACE_DIR timeline, the stats files). Header-only.
//
//   testing::Json j;
//   testing::JsonParser p(text);
//   ASSERT_TRUE(p.Parse(&j)) << "invalid JSON near byte " << p.at();
//   j["traceEvents"].items[0]["ph"].str

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace ferry::testing {

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
  const Json& operator[](const std::string& k) const {
    static const Json kMissing;
    auto it = fields.find(k);
    return it == fields.end() ? kMissing : it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(std::string text) : s_(std::move(text)) {}
  // False for text that is not one JSON value; at() then says where the parser stopped.
  bool Parse(Json* out) {
    try {
      *out = From(nlohmann::json::parse(s_));
      at_ = s_.size();
      return true;
    } catch (const nlohmann::json::parse_error& e) {
      at_ = e.byte > 0 ? e.byte - 1 : 0;          // nlohmann counts from 1
    } catch (const nlohmann::json::exception&) {  // e.g. a number too large for a double
      at_ = 0;
    }
    return false;
  }
  size_t at() const { return at_; }

 private:
  static Json From(const nlohmann::json& v) {
    Json j;
    if (v.is_boolean()) {
      j.kind = Json::kBool;
      j.b = v.get<bool>();
    } else if (v.is_number()) {
      j.kind = Json::kNumber;
      j.number = v.get<double>();
    } else if (v.is_string()) {
      j.kind = Json::kString;
      j.str = v.get<std::string>();
    } else if (v.is_array()) {
      j.kind = Json::kArray;
      j.items.reserve(v.size());
      for (const nlohmann::json& item : v) j.items.push_back(From(item));
    } else if (v.is_object()) {
      j.kind = Json::kObject;
      for (const auto& [key, value] : v.items()) j.fields[key] = From(value);
    }
    return j;
  }

  const std::string s_;
  size_t at_ = 0;
};

}  // namespace ferry::testing
