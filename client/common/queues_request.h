// The SetQueues request for a queue set (rescale/queues.h), shared by the
// programs that set queues: rescalectl queue set -f and rescale-adapter
// (--queues-file, or Kueue's ClusterQueues).
#ifndef RESCALE_CLIENT_COMMON_QUEUES_REQUEST_H_
#define RESCALE_CLIENT_COMMON_QUEUES_REQUEST_H_

#include <span>

#include "rescale/queues.h"
#include "rescale/v1/rescale.pb.h"

namespace rescale::client {

v1::SetQueuesRequest SetQueuesRequestOf(std::span<const QueueSpec> queues);

}  // namespace rescale::client

#endif  // RESCALE_CLIENT_COMMON_QUEUES_REQUEST_H_
