#include "common/metrics/http_endpoint.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry {
namespace {

MHD_Result Reply(MHD_Connection* c, int status, const std::string& type, const std::string& body,
                 const std::vector<std::pair<const char*, const char*>>& headers = {}) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                    MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type.c_str());
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  for (const auto& [name, value] : headers) MHD_add_response_header(r, name, value);
  const MHD_Result ok = MHD_queue_response(c, static_cast<unsigned>(status), r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url, const char* method,
                     const char* /*version*/, const char* /*upload_data*/, size_t* upload_size,
                     void** state) {
  return static_cast<HttpEndpoint*>(cls)->Answer(connection, url, method, upload_size, state)
             ? MHD_YES
             : MHD_NO;
}

}  // namespace

HttpEndpoint::HttpEndpoint(const std::string& bind_ip, int port, Handler handler)
    : handler_(std::move(handler)), port_(port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  FERRY_ENFORCE(inet_pton(AF_INET, bind_ip.c_str(), &addr.sin_addr) == 1,
                ErrorCode::kInvalidConfig, "metrics endpoint: '", bind_ip,
                "' is not an IPv4 address");
  FERRY_ENFORCE(port > 0 && port < 65536, ErrorCode::kInvalidConfig, "metrics endpoint: port ",
                port, " is not from 1 to 65535");
  errno = 0;
  daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, static_cast<uint16_t>(port), nullptr,
      nullptr, &OnRequest, this, MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&addr),
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      kMaxRequestBytes, MHD_OPTION_CONNECTION_TIMEOUT, kIdleTimeoutS, MHD_OPTION_END);
  FERRY_ENFORCE(daemon_ != nullptr, ErrorCode::kInvalidConfig, "metrics endpoint: cannot serve on ",
                bind_ip, ":", port, errno != 0 ? StrCat(": ", std::strerror(errno)) : "",
                " (is the port taken, or the address not this host's?)");
}

HttpEndpoint::~HttpEndpoint() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

int HttpEndpoint::Answer(void* connection, const char* url, const char* method,
                         size_t* upload_size, void** state) {
  auto* c = static_cast<MHD_Connection*>(connection);
  const std::string m = method;
  if (m != MHD_HTTP_METHOD_GET && m != MHD_HTTP_METHOD_HEAD) {
    return Reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "read-only: GET or HEAD\n",
                 {{MHD_HTTP_HEADER_ALLOW, "GET, HEAD"}});
  }
  // Per connection: libmicrohttpd calls once with the headers, once per piece of a body
  // (dropped, remembered), then once more to answer.
  static char headers_in, body_seen;
  if (*state == nullptr) {
    *state = &headers_in;
    return MHD_YES;
  }
  if (*upload_size != 0) {
    *upload_size = 0;
    *state = &body_seen;
    return MHD_YES;
  }
  if (*state == &body_seen) {
    return Reply(c, MHD_HTTP_CONTENT_TOO_LARGE, "text/plain", "a GET carries no body\n");
  }
  HttpResponse r;
  try {
    r = handler_(url);
  } catch (const std::exception& e) {
    r = HttpResponse{500, "text/plain; charset=utf-8", StrCat("error: ", e.what(), "\n")};
  }
  return Reply(c, r.status, r.content_type, r.body);
}

}  // namespace ferry
