#pragma once

// HttpEndpoint: a small read-only HTTP server (libmicrohttpd) for the scheduler's metrics
// and status page (FERRY_METRICS_PORT; scheduler/cluster_metrics.h).
//
// Threads: libmicrohttpd's own polling thread accepts, parses and answers every request
// (MHD_USE_INTERNAL_POLLING_THREAD with epoll); the handler runs there, never on a data-path
// or Van thread. The handler must be thread-safe against the rest of the node.
//
// Safety: GET and HEAD only (405 otherwise, 413 for a request with a body); at most
// kMaxConnections at once; a request line and headers beyond kMaxRequestBytes are answered
// 4xx by libmicrohttpd itself (431/414), a malformed one 400; an idle connection is closed
// after kIdleTimeoutS. Nothing a client sends reaches the handler but the path.
//
// Lifetime: serving from construction; the destructor stops the thread and waits for the
// request in progress (the handler's captures must outlive the endpoint).

#include <functional>
#include <string>

struct MHD_Daemon;

namespace ferry {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpEndpoint {
 public:
  static constexpr unsigned kMaxConnections = 32;
  static constexpr size_t kMaxRequestBytes = 16 * 1024;
  static constexpr unsigned kIdleTimeoutS = 10;

  // `path`: the request's path, without the query.
  using Handler = std::function<HttpResponse(const std::string& path)>;

  // Serves on `bind_ip` (an IPv4 address: 127.0.0.1, 0.0.0.0, a pod IP) and `port`.
  // Throws FerryError(kInvalidConfig) naming the address if it cannot (port taken, not an
  // address of this host): the node then exits 2, as for any bad setting.
  HttpEndpoint(const std::string& bind_ip, int port, Handler handler);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // The port served (as given).
  int port() const { return port_; }

  // Libmicrohttpd's access handler (public for the C callback only).
  int Answer(void* connection, const char* url, const char* method, size_t* upload_size,
             void** state);

 private:
  Handler handler_;
  int port_;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace ferry
