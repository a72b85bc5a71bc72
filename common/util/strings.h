#pragma once

// Small string helpers used across Ferry, so that each file does not grow its own.

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string>

namespace ferry {

// Builds a message from stream insertions: StrCat("key ", key, " of ", n). Anything with
// an operator<< works; numbers print as the stream prints them (no locale grouping).
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// True if `part` occurs in `s` (an empty `part` always does).
inline bool StrContains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// True if `s` begins with `prefix`.
inline bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// True if `s` ends with `suffix`.
inline bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ASCII case conversion (environment values are ASCII; no locale is consulted).
inline std::string AsciiToLower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}
inline std::string AsciiToUpper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

}  // namespace ferry
