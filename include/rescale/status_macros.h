// Small status-propagation macros. Debian 12's Abseil (20220623) does not
// ship absl/status/status_macros.h, so we keep the two we use here.
#ifndef RESCALE_STATUS_MACROS_H_
#define RESCALE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RESCALE_CONCAT_INNER_(a, b) a##b
#define RESCALE_CONCAT_(a, b) RESCALE_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status rescale_status_ = (expr);           \
    if (!rescale_status_.ok()) return rescale_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or
// returns its status.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(RESCALE_CONCAT_(rescale_statusor_, __LINE__), lhs, rexpr)
#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // RESCALE_STATUS_MACROS_H_
