// The Session every rescalectl command runs in (streams, output format,
// channel, deadline), shared by cli.cc and the command files beside it
// (queues.cc).
#ifndef RESCALE_CLIENT_RESCALECTL_SESSION_H_
#define RESCALE_CLIENT_RESCALECTL_SESSION_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <istream>
#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "client/rescalectl/output.h"

namespace rescale::cli {

// What every command needs once the command line is parsed.
class Session {
 public:
  Session(std::shared_ptr<grpc::Channel> channel, OutputFormat format, double timeout_seconds,
          std::istream& in, std::ostream& out, std::ostream& err)
      : channel_(std::move(channel)),
        format_(format),
        timeout_seconds_(timeout_seconds),
        in_(in),
        out_(out),
        err_(err) {}

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  OutputFormat format() const { return format_; }
  bool table() const { return format_ == OutputFormat::kTable; }
  std::istream& in() { return in_; }
  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }

  // Unary calls get --timeout as their deadline (0 = none).
  void ApplyDeadline(grpc::ClientContext& context) const {
    if (timeout_seconds_ <= 0) return;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(
                             std::chrono::duration<double>(timeout_seconds_)));
  }

  // kubectl's shape: "Error from server (NotFound): <message>". `context`
  // says which of several calls failed (register with many documents).
  int ServerError(const grpc::Status& status, const std::string& context = "") {
    err_ << "Error from server (" << StatusCodeName(status.error_code()) << "): " << context
         << status.error_message() << "\n";
    return 1;
  }

  // Every unary command's call: `rpc` of a fresh `Stub` on this channel,
  // with --timeout as the deadline. On failure prints ServerError (with
  // `context`) and returns false.
  template <typename Stub, typename Request, typename Response>
  bool Call(grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
            const Request& request, Response* response, const std::string& context = "") {
    Stub stub(channel_);
    grpc::ClientContext call_context;
    ApplyDeadline(call_context);
    const grpc::Status status = (stub.*rpc)(&call_context, request, response);
    if (status.ok()) return true;
    ServerError(status, context);
    return false;
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  OutputFormat format_;
  double timeout_seconds_;
  std::istream& in_;
  std::ostream& out_;
  std::ostream& err_;
};

// Commands beside cli.cc (queues.cc). `files`: -f arguments, "-" = stdin.
int SetQueuesCommand(Session& session, const std::string& file);
int GetQueues(Session& session);

}  // namespace rescale::cli

#endif  // RESCALE_CLIENT_RESCALECTL_SESSION_H_
