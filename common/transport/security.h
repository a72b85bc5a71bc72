#pragma once

// Cluster security: ZeroMQ CURVE keys derived from the cluster secret (FERRY_SECRET).
//
// Every node that holds the secret derives the same two key pairs: the "server" pair
// of every listening socket (scheduler, servers) and the "client" pair of every
// connecting socket. A connection is admitted only if the client proves it holds the
// client secret key (CURVE handshake + the ZAP check in Van), so a peer that knows
// the public server key but not the secret is refused, and all traffic is encrypted.
// Keys come from BLAKE2b (libsodium's crypto_generichash) of a label and the secret.

#include <array>
#include <cstdint>
#include <string>

namespace ferry {

using CurveKey = std::array<uint8_t, 32>;

struct CurveKeys {
  CurveKey server_public, server_secret;
  CurveKey client_public, client_secret;
};

// REQUIRES: !secret.empty().
CurveKeys DeriveCurveKeys(const std::string& secret);

// Whether this libzmq was built with CURVE support.
bool CurveAvailable();

}  // namespace ferry
