// rescalectl's queue commands: `queue set -f FILE` (the queue file of
// rescale/queues.h, the same format rescale-adapter --queues-file and
// rescale-sim --queues read) and `get queues`.
#include "rescale/queues.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "client/common/queues_request.h"
#include "client/rescalectl/manifests.h"
#include "client/rescalectl/output.h"
#include "client/rescalectl/session.h"
#include "rescale/v1/rescale.grpc.pb.h"

namespace rescale::cli {
namespace {

void PrintQueues(Session& session, const v1::ListQueuesResponse& response) {
  if (session.table()) {
    session.out() << FormatQueuesTable(response.queues());
  } else {
    PrintMessage(response, session.format(), session.out());
  }
}

}  // namespace

int SetQueuesCommand(Session& session, const std::string& file) {
  const std::optional<std::string> text = ReadManifest(file, session.in(), session.err());
  if (!text) return 1;
  // Checked here first, so a typo names the file and the field before any
  // RPC; the server checks the same rules again.
  const absl::StatusOr<std::vector<QueueSpec>> queues =
      ParseQueuesYaml(*text, file == "-" ? "<stdin>" : file);
  if (!queues.ok()) {
    session.err() << "error: " << queues.status().message() << "\n";
    return 1;
  }
  const v1::SetQueuesRequest request = client::SetQueuesRequestOf(*queues);
  v1::ListQueuesResponse response;
  if (!session.Call(&v1::ClusterService::Stub::SetQueues, request, &response)) return 1;
  if (session.table()) {
    session.out() << "queues set: " << queues->size() << " defined"
                  << (response.plan_pending() ? " (the plan for them is pending)" : "") << "\n";
  }
  PrintQueues(session, response);
  return 0;
}

int GetQueues(Session& session) {
  v1::ListQueuesResponse response;
  const v1::ListQueuesRequest request;
  if (!session.Call(&v1::ClusterService::Stub::ListQueues, request, &response)) return 1;
  PrintQueues(session, response);
  return 0;
}

}  // namespace rescale::cli
