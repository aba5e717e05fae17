// Kubernetes object-name rules shared by every program: job ids, namespaces,
// queue and cohort names are DNS-1123 labels; GPU type names are label
// values.
#ifndef RESCALE_NAMES_H_
#define RESCALE_NAMES_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace rescale {

// A DNS-1123 label: 1-63 chars of [a-z0-9-], starting and ending alphanumeric.
bool IsDns1123Label(std::string_view s);

// GPU types: at most this many in a cluster or a job's list, with names of
// at most this many characters (a Kubernetes label value).
inline constexpr size_t kMaxGpuTypes = 16;
inline constexpr size_t kMaxGpuTypeNameLength = 63;

// Whether `name` can name a GPU type: a Kubernetes label value (the nodes'
// nvidia.com/gpu.product), 1-63 characters of [A-Za-z0-9-_.] starting and
// ending with a letter or digit. GpuTypeNameError says so for `field`.
bool IsGpuTypeName(std::string_view name);
std::string GpuTypeNameError(std::string_view field, std::string_view name);

}  // namespace rescale

#endif  // RESCALE_NAMES_H_
