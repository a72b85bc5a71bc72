#include "common/config/env_reader.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry {

[[noreturn]] void ThrowInvalidConfig(const std::string& variable, const std::string& value,
                          const std::string& allowed) {
  throw FerryError(ErrorCode::kInvalidConfig,
                   StrCat("invalid configuration: ", variable, "='", value, "': ", allowed));
}

const char* EnvReader::Get(const char* name, const char* alias, std::string* used) const {
  const char* value = env_(name);
  const char* alias_value = alias ? env_(alias) : nullptr;
  if (value && alias_value && std::strcmp(value, alias_value) != 0) {
    warnings_->push_back(StrCat(name, "='", value, "' overrides ", alias, "='", alias_value,
                                "'"));
  }
  if (value) {
    *used = name;
    return value;
  }
  *used = alias ? alias : name;
  return alias_value;
}

bool EnvReader::Has(const char* name, const char* alias) const {
  return env_(name) != nullptr || (alias && env_(alias) != nullptr);
}

int64_t EnvReader::Int(const char* name, const char* alias, int64_t def, int64_t min, int64_t max) const {
  std::string used;
  const char* text = Get(name, alias, &used);
  if (!text) return def;
  std::string s(text);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  bool ok = !s.empty() && end && *end == '\0' && errno == 0 && !std::isspace(s[0]);
  if (!ok || v < min || v > max) {
    ThrowInvalidConfig(used, s, StrCat("expected an integer from ", min, " to ", max));
  }
  return v;
}

double EnvReader::Double(const char* name, double def, double min, double max) const {
  std::string used;
  const char* text = Get(name, nullptr, &used);
  if (!text) return def;
  std::string s(text);
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  bool ok = !s.empty() && end && *end == '\0' && errno == 0 && !std::isspace(s[0]) &&
            std::isfinite(v);
  if (!ok || v < min || v > max) {
    ThrowInvalidConfig(used, s, StrCat("expected a number from ", min, " to ", max));
  }
  return v;
}

bool EnvReader::Bool(const char* name, const char* alias, bool def) const {
  std::string used;
  const char* text = Get(name, alias, &used);
  if (!text) return def;
  const std::string s = AsciiToLower(text);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off" || s.empty()) return false;
  ThrowInvalidConfig(used, text, "expected 0 or 1 (or true/false)");
}

std::string EnvReader::Str(const char* name, const char* alias, const std::string& def) const {
  std::string used;
  const char* text = Get(name, alias, &used);
  return text ? std::string(text) : def;
}

std::vector<int64_t> EnvReader::IntList(const char* name, int64_t min, int64_t max) const {
  return List<int64_t>(name, min, max, "integers", [](const std::string& item, int64_t* v) {
    char* end = nullptr;
    *v = std::strtoll(item.c_str(), &end, 10);
    return *end == '\0';
  });
}

std::vector<double> EnvReader::DoubleList(const char* name, double min, double max) const {
  return List<double>(name, min, max, "numbers", [](const std::string& item, double* v) {
    char* end = nullptr;
    *v = std::strtod(item.c_str(), &end);
    return *end == '\0' && std::isfinite(*v);
  });
}

template <typename T, typename Parse>
std::vector<T> EnvReader::List(const char* name, T min, T max, const char* what, Parse parse) const {
  std::string used;
  const char* text = Get(name, nullptr, &used);
  std::vector<T> out;
  if (!text) return out;
  for (const std::string& item : SplitList(text)) {
    errno = 0;
    T v{};
    if (item.empty() || std::isspace(item[0]) || !parse(item, &v) || errno != 0 || v < min ||
        v > max) {
      ThrowInvalidConfig(used, text, StrCat("expected comma-separated ", what, " from ", min, " to ", max));
    }
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> EnvReader::SplitList(const std::string& s) {
  std::vector<std::string> items(1);
  for (char ch : s) {
    if (ch == ',') {
      items.emplace_back();
    } else {
      items.back() += ch;
    }
  }
  return items;
}

}  // namespace ferry
