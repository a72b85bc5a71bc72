#include "common/compress/compression_spec.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "common/util/strings.h"

namespace ferry {

const char kCompressionForms[] =
    "none, fp16, bf16, onebit, topk:R, randomk:R (R in (0, 1]), dither:S or dither:S:linear "
    "(S in 1..127), each optionally followed by +ef and then +momentum:M (M in [0, 1))";

namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) out.push_back(part);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool ParseNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(s.c_str(), &end);
  return errno == 0 && end == s.c_str() + s.size() && *out == *out;  // no NaN
}

// The shortest text that reads back as `v` ("0.01", not "0.010000").
std::string Number(double v) {
  std::ostringstream out;
  out.precision(17);
  for (int digits = 1; digits <= 17; ++digits) {
    std::ostringstream o;
    o.precision(digits);
    o << v;
    if (std::strtod(o.str().c_str(), nullptr) == v) return o.str();
  }
  out << v;
  return out.str();
}

Status Bad(const std::string& text, const std::string& why) {
  return Status(ErrorCode::kInvalidArgument,
                StrCat("compression '", text, "': ", why, "; accepted: ", kCompressionForms));
}

// The compressor itself (the part before any '+').
Status ParseBase(const std::string& text, const std::string& base, CompressionSpec* spec) {
  const std::vector<std::string> f = Split(base, ':');
  const std::string name = AsciiToLower(f.empty() ? "" : f[0]);
  using Kind = CompressionSpec::Kind;
  auto plain = [&](Kind kind) -> Status {
    if (f.size() != 1) return Bad(text, StrCat(name, " takes no parameter"));
    spec->kind = kind;
    return Status::Ok();
  };
  if (name == "none") return plain(Kind::kNone);
  if (name == "fp16") return plain(Kind::kFp16);
  if (name == "bf16") return plain(Kind::kBf16);
  if (name == "onebit") return plain(Kind::kOnebit);
  if (name == "topk" || name == "randomk") {
    if (f.size() != 2 || !ParseNumber(f[1], &spec->ratio) || !(spec->ratio > 0) ||
        spec->ratio > 1) {
      return Bad(text, StrCat(name, " needs a ratio in (0, 1], as ", name, ":0.01"));
    }
    spec->kind = name == "topk" ? Kind::kTopk : Kind::kRandomk;
    return Status::Ok();
  }
  if (name == "dither") {
    double levels = 0;
    if (f.size() < 2 || f.size() > 3 || !ParseNumber(f[1], &levels) || levels < 1 ||
        levels > 127 || levels != static_cast<int>(levels) ||
        (f.size() == 3 && AsciiToLower(f[2]) != "linear")) {
      return Bad(text, "dither needs a whole number of levels in 1..127, as dither:32 or "
                       "dither:32:linear");
    }
    spec->kind = Kind::kDither;
    spec->levels = static_cast<int>(levels);
    spec->linear = f.size() == 3;
    return Status::Ok();
  }
  return Bad(text, StrCat("unknown compressor '", f.empty() ? "" : f[0], "'"));
}

}  // namespace

std::string CompressionSpec::ToString() const {
  std::string s;
  switch (kind) {
    case Kind::kNone: return "none";
    case Kind::kFp16: s = "fp16"; break;
    case Kind::kBf16: s = "bf16"; break;
    case Kind::kOnebit: s = "onebit"; break;
    case Kind::kTopk: s = "topk:" + Number(ratio); break;
    case Kind::kRandomk: s = "randomk:" + Number(ratio); break;
    case Kind::kDither: s = StrCat("dither:", levels, linear ? ":linear" : ""); break;
  }
  if (error_feedback) s += "+ef";
  if (momentum > 0) s += "+momentum:" + Number(momentum);
  return s;
}

Status CompressionSpec::Parse(const std::string& raw, CompressionSpec* out) {
  const std::string text = Trim(raw);
  CompressionSpec spec;
  if (text.empty()) {
    *out = spec;
    return Status::Ok();
  }
  const std::vector<std::string> parts = Split(text, '+');
  if (Status s = ParseBase(text, Trim(parts[0]), &spec); !s.ok()) return s;
  bool seen_momentum = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string option = AsciiToLower(Trim(parts[i]));
    if (option == "ef" && !spec.error_feedback && !seen_momentum) {
      spec.error_feedback = true;
    } else if (StartsWith(option, "momentum:") && !seen_momentum) {
      if (!ParseNumber(option.substr(9), &spec.momentum) || spec.momentum < 0 ||
          spec.momentum >= 1) {
        return Bad(text, "momentum needs a factor in [0, 1), as +momentum:0.9");
      }
      seen_momentum = true;
    } else {
      return Bad(text, StrCat("unexpected option '", parts[i], "' (once each, +ef before ",
                              "+momentum:M)"));
    }
  }
  if (spec.none() && (spec.error_feedback || spec.momentum > 0)) {
    return Bad(text, "none takes no option");
  }
  *out = spec;
  return Status::Ok();
}

}  // namespace ferry
