// IsLocalAddress: whether a gRPC address ("host:port", "[v6]:port",
// "unix:PATH") only reaches this machine. rescaled serves plaintext and
// anonymous callers only there; clients send a token over plaintext only
// there.
#ifndef RESCALE_ADDRESS_H_
#define RESCALE_ADDRESS_H_

#include <string_view>

namespace rescale {

// True for a Unix socket, "localhost", and IP literals in 127.0.0.0/8 or
// ::1. A name other than "localhost" is not trusted to resolve to loopback
// ("127.example.com" is a public name).
bool IsLocalAddress(std::string_view address);

}  // namespace rescale

#endif  // RESCALE_ADDRESS_H_
