// RescaledCredentials (see client/common/credentials.h).
#include "client/common/credentials.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <grpcpp/security/credentials.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace rescale::client {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> RescaledCredentials(
    bool tls, const std::string& ca_file) {
  if (!tls && ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!ca_file.empty()) {
    std::ifstream file(ca_file, std::ios::binary);
    std::ostringstream pem;
    if (!file || !(pem << file.rdbuf())) {
      return absl::NotFoundError(
          absl::StrFormat("cannot read --ca-file \"%s\": %s", ca_file, std::strerror(errno)));
    }
    ssl.pem_root_certs = pem.str();
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace rescale::client
