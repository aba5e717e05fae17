// How Rescale's clients (rescalectl, rescale-adapter, rescale-agent) reach
// rescaled: one rule for their --tls and --ca-file flags.
#ifndef RESCALE_CLIENT_COMMON_CREDENTIALS_H_
#define RESCALE_CLIENT_COMMON_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace rescale::client {

// TLS when `tls` is set or a CA file is given (the CA file's PEM roots then
// replace the system's), plaintext otherwise. A CA file that cannot be read
// fails as ReadFileToString says (rescale/read_file.h), naming --ca-file.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> RescaledCredentials(
    bool tls, const std::string& ca_file);

}  // namespace rescale::client

#endif  // RESCALE_CLIENT_COMMON_CREDENTIALS_H_
