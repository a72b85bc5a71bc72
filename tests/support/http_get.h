#pragma once

// A plain HTTP/1.0 GET for tests that read the scheduler's live metrics endpoint.

#include <string>

namespace ferry::testing {

// GET `path` from 127.0.0.1:`port`; the whole reply, headers included ("" if the connection
// failed). Waits at most 10 s for the answer.
std::string HttpGet(int port, const std::string& path);

}  // namespace ferry::testing
