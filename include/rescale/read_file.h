// ReadFileToString: the one way Rescale reads a whole file (rescaled's TLS
// certificate and key; the clients' kubeconfig, service-account token and
// namespace, CA bundles, --ca-file, manifests), so a file that cannot be
// read fails the same way everywhere.
//
// Error codes, by the reason open/read failed:
//   NOT_FOUND          the file (or a directory on its path) does not exist
//   PERMISSION_DENIED  it exists but this process may not read it
//   FAILED_PRECONDITION  anything else: it is a directory, or reading failed
// The message names what the file is for and its path, then the OS's
// reason: `cannot read kubeconfig "/home/x/.kube/config": No such file or
// directory`.
#ifndef RESCALE_READ_FILE_H_
#define RESCALE_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rescale {

// The whole content of `path`. `what` says what the file is for, for the
// message ("kubeconfig", "--ca-file", "token file").
absl::StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what);

}  // namespace rescale

#endif  // RESCALE_READ_FILE_H_
