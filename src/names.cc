// Kubernetes object-name rules (see rescale/names.h).
#include "rescale/names.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace rescale {

bool IsDns1123Label(std::string_view s) {
  auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (s.empty() || s.size() > 63) return false;
  if (!lower_alnum(s.front()) || !lower_alnum(s.back())) return false;
  for (char c : s) {
    if (!lower_alnum(c) && c != '-') return false;
  }
  return true;
}

bool IsGpuTypeName(std::string_view name) {
  // A Kubernetes label value (the nodes' nvidia.com/gpu.product): 1-63
  // characters of [A-Za-z0-9-_.], starting and ending alphanumeric.
  if (name.empty() || name.size() > kMaxGpuTypeNameLength) return false;
  auto alnum = [](char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

std::string GpuTypeNameError(std::string_view field, std::string_view name) {
  return absl::StrFormat(
      "%s \"%s\" is not a GPU type name: 1-%d characters of A-Z, a-z, 0-9, '-', '_' and '.', "
      "starting and ending with a letter or digit (a node label value, e.g. NVIDIA-A100-SXM4-40GB)",
      field, name, kMaxGpuTypeNameLength);
}

}  // namespace rescale
