// ReadFileToString: the one way Rescale's clients read a whole file
// (kubeconfig, service-account token and namespace, CA bundles, --ca-file,
// manifests), so a file that cannot be read fails the same way everywhere.
//
// Error codes, by the reason open/read failed:
//   NOT_FOUND          the file (or a directory on its path) does not exist
//   PERMISSION_DENIED  it exists but this process may not read it
//   FAILED_PRECONDITION  anything else: it is a directory, or reading failed
// The message names what the file is for and its path, then the OS's
// reason: `cannot read kubeconfig "/home/x/.kube/config": No such file or
// directory`.
#ifndef RESCALE_CLIENT_COMMON_READ_FILE_H_
#define RESCALE_CLIENT_COMMON_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rescale::client {

// The whole content of `path`. `what` says what the file is for, for the
// message ("kubeconfig", "--ca-file", "token file").
absl::StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what);

}  // namespace rescale::client

#endif  // RESCALE_CLIENT_COMMON_READ_FILE_H_
