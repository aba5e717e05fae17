// RescaledCredentials (see client/common/credentials.h).
#include "client/common/credentials.h"

#include <grpcpp/security/credentials.h>

#include <utility>

#include "absl/status/status.h"
#include "rescale/read_file.h"

namespace rescale::client {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> RescaledCredentials(
    bool tls, const std::string& ca_file) {
  if (!tls && ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!ca_file.empty()) {
    absl::StatusOr<std::string> pem = ReadFileToString(ca_file, "--ca-file");
    if (!pem.ok()) return pem.status();
    ssl.pem_root_certs = *std::move(pem);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace rescale::client
