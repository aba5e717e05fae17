// SetQueuesRequestOf (see client/common/queues_request.h).
#include "client/common/queues_request.h"

namespace rescale::client {

v1::SetQueuesRequest SetQueuesRequestOf(std::span<const QueueSpec> queues) {
  v1::SetQueuesRequest request;
  for (const QueueSpec& q : queues) {
    v1::Queue* out = request.add_queues();
    out->set_name(q.name);
    out->set_nominal_gpus(q.nominal_gpus);
    out->set_cohort(q.cohort);
    if (q.borrowing_limit_gpus) out->set_borrowing_limit_gpus(*q.borrowing_limit_gpus);
    if (q.lending_limit_gpus) out->set_lending_limit_gpus(*q.lending_limit_gpus);
    out->set_weight(q.weight);
  }
  return request;
}

}  // namespace rescale::client
