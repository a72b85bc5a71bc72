#pragma once

// Json: a JSON value and a strict parser (RFC 8259, minus \u surrogate pairs), for tests
// that check files Ferry writes (the FERRY_TRACE_DIR timeline). Header-only.
//
//   testing::Json j;
//   testing::JsonParser p(text);
//   ASSERT_TRUE(p.Parse(&j)) << "invalid JSON near byte " << p.at();
//   j["traceEvents"].items[0]["ph"].str

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
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
  bool Parse(Json* out) {
    if (!Value(out)) return false;
    Space();
    return at_ == s_.size();
  }
  size_t at() const { return at_; }

 private:
  void Space() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) at_++;
  }
  bool Eat(char c) {
    Space();
    if (at_ < s_.size() && s_[at_] == c) {
      at_++;
      return true;
    }
    return false;
  }
  bool Literal(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(at_, n, word) != 0) return false;
    at_ += n;
    return true;
  }
  bool String(std::string* out) {
    if (!Eat('"')) return false;
    while (at_ < s_.size() && s_[at_] != '"') {
      char c = s_[at_++];
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (at_ >= s_.size()) return false;
      char e = s_[at_++];
      if (e == 'u') {
        if (at_ + 4 > s_.size()) return false;
        *out += static_cast<char>(std::stoi(s_.substr(at_, 4), nullptr, 16));
        at_ += 4;
      } else if (std::string("\"\\/bfnrt").find(e) != std::string::npos) {
        *out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else {
        return false;
      }
    }
    return Eat('"');
  }
  bool Value(Json* v) {
    Space();
    if (at_ >= s_.size()) return false;
    char c = s_[at_];
    if (c == '{') {
      v->kind = Json::kObject;
      at_++;
      if (Eat('}')) return true;
      do {
        std::string key;
        Json item;
        if (!String(&key) || !Eat(':') || !Value(&item)) return false;
        v->fields[key] = std::move(item);
      } while (Eat(','));
      return Eat('}');
    }
    if (c == '[') {
      v->kind = Json::kArray;
      at_++;
      if (Eat(']')) return true;
      do {
        v->items.emplace_back();
        if (!Value(&v->items.back())) return false;
      } while (Eat(','));
      return Eat(']');
    }
    if (c == '"') {
      v->kind = Json::kString;
      return String(&v->str);
    }
    if (Literal("true") || Literal("false")) {
      v->kind = Json::kBool;
      v->b = s_[at_ - 1] == 'e' && s_[at_ - 2] == 'u';
      return true;
    }
    if (Literal("null")) return true;
    const char* begin = s_.c_str() + at_;
    char* end = nullptr;
    v->kind = Json::kNumber;
    v->number = std::strtod(begin, &end);
    if (end == begin) return false;
    at_ += end - begin;
    return true;
  }
  const std::string s_;
  size_t at_ = 0;
};

}  // namespace ferry::testing
