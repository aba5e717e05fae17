// Shared handler steps of rescaled's services (see server/handler_support.h).
#include "server/handler_support.h"

#include "server/audit.h"
#include "server/convert.h"

namespace rescale::server {

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
void ReactorHandedToGrpc(void* reactor) { __tsan_release(reactor); }
void ReactorCallbackFromGrpc(void* reactor) { __tsan_acquire(reactor); }
#else
void ReactorHandedToGrpc(void*) {}
void ReactorCallbackFromGrpc(void*) {}
#endif

absl::StatusOr<std::shared_ptr<const Identity>> Admit(const CallSecurity& security,
                                                      grpc::CallbackServerContext* context,
                                                      Access access, absl::string_view method,
                                                      absl::string_view ns,
                                                      absl::string_view job) {
  if (security.auth == nullptr) return AnonymousIdentity();
  absl::StatusOr<std::shared_ptr<const Identity>> caller = security.auth->Authenticate(*context);
  absl::Status allowed = caller.ok() ? Authorize(**caller, access, method, ns) : caller.status();
  if (allowed.ok()) return caller;
  if (security.audit != nullptr) {
    Identity unknown;
    unknown.user = "unauthenticated";
    unknown.peer = context->peer();
    unknown.anonymous = true;
    security.audit->Record(caller.ok() ? **caller : unknown, method, job, allowed);
  }
  return allowed;
}

}  // namespace rescale::server
