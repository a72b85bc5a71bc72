#include "common/transport/security.h"

#include <sodium.h>
#include <zmq.h>

#include <glog/logging.h>

namespace ferry {
namespace {

CurveKey Hash(const std::string& label, const std::string& secret) {
  CurveKey out{};
  std::string input = label + '\0' + secret;
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(input.data()),
                     input.size(), nullptr, 0);
  return out;
}

CurveKey PublicOf(const CurveKey& secret_key) {
  CurveKey pub{};
  CHECK_EQ(crypto_scalarmult_base(pub.data(), secret_key.data()), 0);
  return pub;
}

}  // namespace

CurveKeys DeriveCurveKeys(const std::string& secret) {
  CHECK(!secret.empty());
  CHECK_GE(sodium_init(), 0) << "libsodium failed to initialise";
  CurveKeys k;
  k.server_secret = Hash("ferry/v1/curve-server", secret);
  k.server_public = PublicOf(k.server_secret);
  k.client_secret = Hash("ferry/v1/curve-client", secret);
  k.client_public = PublicOf(k.client_secret);
  return k;
}

bool CurveAvailable() { return zmq_has("curve") != 0; }

}  // namespace ferry
