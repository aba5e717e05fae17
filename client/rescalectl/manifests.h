// rescalectl's manifests: the JobSpecs `register` and `update` read from
// YAML or JSON files (or stdin), bare or in a kubectl-style wrapper, with
// where each came from for messages.
#ifndef RESCALE_CLIENT_RESCALECTL_MANIFESTS_H_
#define RESCALE_CLIENT_RESCALECTL_MANIFESTS_H_

#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "rescale/v1/rescale.pb.h"

namespace rescale::cli {

// One JobSpec read from a manifest, with where it came from for messages.
struct SpecDocument {
  v1::JobSpec spec;
  std::string origin;  // e.g. `"jobs.yaml" document 2 (line 14)`
};

// Reads a whole file, or `in` for "-". Errors, naming the file, go to
// `err` (nullopt).
std::optional<std::string> ReadManifest(const std::string& path, std::istream& in,
                                        std::ostream& err);

// Parses every document of every file before any RPC, so a typo in the
// third document does not leave the first two registered.
std::optional<std::vector<SpecDocument>> ReadJobSpecs(const std::vector<std::string>& paths,
                                                      std::istream& in, std::ostream& err);

}  // namespace rescale::cli

#endif  // RESCALE_CLIENT_RESCALECTL_MANIFESTS_H_
