// Kubernetes object-name rules shared by every program: job ids, namespaces,
// queue and cohort names are DNS-1123 labels.
#ifndef RESCALE_NAMES_H_
#define RESCALE_NAMES_H_

#include <string_view>

namespace rescale {

// A DNS-1123 label: 1-63 chars of [a-z0-9-], starting and ending alphanumeric.
bool IsDns1123Label(std::string_view s);

}  // namespace rescale

#endif  // RESCALE_NAMES_H_
