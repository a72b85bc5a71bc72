#pragma once

#include <string>

namespace ferry {

// `s` as a JSON string literal, quotes included, always valid JSON: control characters
// escaped, and a byte that is not part of valid UTF-8 replaced by U+FFFD (a tensor name is
// the program's bytes; a trace or stats file must still parse). nlohmann::json's dump.
std::string JsonQuote(const std::string& s);

}  // namespace ferry
