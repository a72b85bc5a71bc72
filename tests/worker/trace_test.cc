// Tests of the worker's Chrome-trace writer (worker/trace.h): the file is valid JSON
// (checked by a strict little parser here), in the Trace Event Format, with each
// partition's stages as nested async slices in order, instants, and escaped names.

#include "worker/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/util/clock.h"
#include "common/util/status.h"

namespace ferry {
namespace {

// A JSON value and a strict parser (RFC 8259 minus \u surrogate checks).
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

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}
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

std::string TempDir() {
  char dir[] = "/tmp/ferry-trace-test-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  return dir;
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  Parser p(text.str());
  EXPECT_TRUE(p.Parse(&j)) << "not valid JSON near byte " << p.at() << " of " << path;
  return j;
}

TEST(TraceTest, WritesValidChromeTraceJson) {
  std::string dir = TempDir();
  std::string path;
  {
    Trace trace(dir, 3);
    path = trace.path();
    EXPECT_EQ(path, dir + "/ferry-worker-3.json");
    int64_t t0 = NowUs();
    trace.Instant("step 1", t0, "{}");
    PartitionTimes p;
    p.tensor = "layer \"1\"\\weight\n";  // quotes, backslash, control character
    p.partition = 2;
    p.key = 77;
    p.server = 1;
    p.bytes = 4096;
    p.priority = -1;
    p.round = 5;
    p.fused = true;
    p.ready_us = t0 + 10;
    p.sent_us = t0 + 20;
    p.acked_us = t0 + 30;
    p.result_us = t0 + 50;
    p.done_us = t0 + 55;
    trace.Partition(p);
    p.acked_us = 0;  // answered with the sum at once: no "server" stage
    p.fused = false;
    trace.Partition(p);
    trace.Instant("scheduling", t0 + 60, "{\"partition_bytes\":1024}");
  }  // the destructor closes the document
  Json j = ReadJson(path);
  ASSERT_EQ(j.kind, Json::kObject);
  EXPECT_EQ(j["displayTimeUnit"].str, "ms");
  const std::vector<Json>& ev = j["traceEvents"].items;
  ASSERT_EQ(ev.size(), 1u + 1 + 10 + 8 + 1);  // metadata, instant, 2 partitions, instant
  EXPECT_EQ(ev[0]["ph"].str, "M");
  EXPECT_EQ(ev[0]["args"]["name"].str, "worker 3");
  EXPECT_EQ(ev[1]["ph"].str, "i");
  EXPECT_EQ(ev[1]["name"].str, "step 1");
  // The first partition: its slice, then queue, push, server, return, nested in order.
  std::vector<std::string> names, phases;
  double last_ts = -1;
  for (size_t i = 2; i < 12; ++i) {
    EXPECT_EQ(ev[i]["cat"].str, "partition");
    EXPECT_EQ(ev[i]["id"].number, 1);
    EXPECT_EQ(ev[i]["pid"].number, 3);
    EXPECT_EQ(ev[i]["tid"].number, 1);
    EXPECT_GE(ev[i]["ts"].number, last_ts) << "stages out of time order";
    last_ts = ev[i]["ts"].number;
    names.push_back(ev[i]["name"].str);
    phases.push_back(ev[i]["ph"].str);
  }
  const std::string part = "layer \"1\"\\weight\n[2]";
  EXPECT_EQ(names, (std::vector<std::string>{part, "queue", "queue", "push", "push", "server",
                                             "server", "return", "return", part}));
  EXPECT_EQ(phases, (std::vector<std::string>{"b", "b", "e", "b", "e", "b", "e", "b", "e", "e"}));
  EXPECT_EQ(ev[2]["args"]["key"].number, 77);
  EXPECT_EQ(ev[2]["args"]["bytes"].number, 4096);
  EXPECT_EQ(ev[2]["args"]["priority"].number, -1);
  EXPECT_EQ(ev[2]["args"]["round"].number, 5);
  EXPECT_TRUE(ev[2]["args"]["fused"].b);
  EXPECT_EQ(ev[6]["ts"].number - ev[5]["ts"].number, 10);  // push: sent -> acknowledged
  EXPECT_EQ(ev[12]["id"].number, 2);
  EXPECT_FALSE(ev[12]["args"]["fused"].b);
  EXPECT_EQ(ev[17]["name"].str, "return");  // no "server" stage without an ack
  EXPECT_EQ(ev.back()["name"].str, "scheduling");
  EXPECT_EQ(ev.back()["args"]["partition_bytes"].number, 1024);
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

TEST(TraceTest, UnwritableDirectoryIsAConfigurationError) {
  try {
    Trace trace("/nonexistent/ferry-trace", 0);
    FAIL() << "opened a trace in a directory that does not exist";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("FERRY_TRACE_DIR"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
