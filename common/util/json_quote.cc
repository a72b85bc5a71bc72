#include "common/util/json_quote.h"

#include <nlohmann/json.hpp>

namespace ferry {

std::string JsonQuote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', /*ensure_ascii=*/false,
                                nlohmann::json::error_handler_t::replace);
}

}  // namespace ferry
