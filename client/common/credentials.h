// How Rescale's clients (rescalectl, rescale-adapter, rescale-agent) reach
// rescaled: one rule for their --tls and --ca-file flags.
#ifndef RESCALE_CLIENT_COMMON_CREDENTIALS_H_
#define RESCALE_CLIENT_COMMON_CREDENTIALS_H_

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"

namespace rescale::client {

// TLS when `tls` is set or a CA file is given (the CA file's PEM roots then
// replace the system's), plaintext otherwise. NOT_FOUND naming --ca-file and
// the OS error when the file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> RescaledCredentials(
    bool tls, const std::string& ca_file);

}  // namespace rescale::client

#endif  // RESCALE_CLIENT_COMMON_CREDENTIALS_H_
