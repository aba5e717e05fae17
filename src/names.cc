// Kubernetes object-name rules (see rescale/names.h).
#include "rescale/names.h"

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

}  // namespace rescale
