// Leadership: whether this rescaled may take writes and samples, as the
// services ask it on every such call. Without high availability there is
// none (the services take everything); with --state=etcd:// it is
// EtcdLeadership (server/etcd/etcd_leadership.h).
#ifndef RESCALE_SERVER_LEADERSHIP_H_
#define RESCALE_SERVER_LEADERSHIP_H_

#include <string>

namespace rescale::server {

class Leadership {
 public:
  virtual ~Leadership() = default;
  // True only while this replica leads and its lease is known to hold.
  virtual bool IsLeader() const = 0;
  // The leader's address as it advertises it; empty when none is known.
  virtual std::string LeaderAddress() const = 0;
  // One sentence for people: "leader", "follower of 10.0.0.7:50051", or
  // why this replica does not lead ("not leading: etcd has no quorum ...").
  virtual std::string Describe() const = 0;
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_LEADERSHIP_H_
