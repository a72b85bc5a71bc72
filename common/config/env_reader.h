#pragma once

// EnvReader: how Config reads the environment: typed values with their ranges, each
// refused with an error naming the variable, its value and what is allowed
// (ErrorCode::kInvalidConfig), and FERRY_* names read over their BYTEPS_* aliases.
// Only common/config uses it.

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/config.h"

namespace ferry {

// Throws FerryError(kInvalidConfig): "invalid configuration: VARIABLE='VALUE': ALLOWED".
[[noreturn]] void ThrowInvalidConfig(const std::string& variable, const std::string& value,
                          const std::string& allowed);

// Reads the environment, tracking FERRY_* names over their BYTEPS_* aliases.
class EnvReader {
 public:
  EnvReader(const EnvLookup& env, std::vector<std::string>* warnings)
      : env_(env), warnings_(warnings) {}

  // Returns the value of `name` or of `alias` (FERRY_* wins, with a warning if both
  // are set and differ). `used` receives the name the value came from.
  const char* Get(const char* name, const char* alias, std::string* used) const;

  // Whether `name` or `alias` is set (no warning: the read of the value gives it).
  bool Has(const char* name, const char* alias) const;

  int64_t Int(const char* name, const char* alias, int64_t def, int64_t min, int64_t max) const;

  double Double(const char* name, double def, double min, double max) const;

  bool Bool(const char* name, const char* alias, bool def) const;

  std::string Str(const char* name, const char* alias, const std::string& def) const;

  bool Has(const char* name) const { return env_(name) != nullptr; }

  // A comma-separated list of integers, each in [min, max]; empty when unset.
  std::vector<int64_t> IntList(const char* name, int64_t min, int64_t max) const;

  // A comma-separated list of numbers, each in [min, max]; empty when unset.
  std::vector<double> DoubleList(const char* name, double min, double max) const;

 private:
  // The values of a comma-separated list; `parse(item, &v)` says whether all of `item`
  // is one value. Each must parse, in [min, max]; `what` names them in the error.
  template <typename T, typename Parse>
  std::vector<T> List(const char* name, T min, T max, const char* what, Parse parse) const;

  // "a,b,,c" -> {"a", "b", "", "c"}: an empty item stays (and is refused by List).
  static std::vector<std::string> SplitList(const std::string& s);

  const EnvLookup& env_;
  std::vector<std::string>* warnings_;
};

}  // namespace ferry
