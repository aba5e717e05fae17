// EtcdCluster: a real etcd (Debian's etcd-server, /usr/bin/etcd) of one or
// more members on free loopback ports, its data in a temporary folder, for
// the high-availability tests. Members can be paused (SIGSTOP) and resumed,
// or killed, one by one.
#ifndef RESCALE_TESTS_ETCD_CLUSTER_H_
#define RESCALE_TESTS_ETCD_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "tests/child_process.h"
#include "tests/temp_dir.h"

namespace rescale::testing {

class EtcdCluster {
 public:
  // Starts `members` members and waits until each serves clients.
  explicit EtcdCluster(int members);
  // "127.0.0.1:P1,127.0.0.1:P2,...": for etcd://.../PREFIX.
  std::string Endpoints() const;
  int size() const { return static_cast<int>(members_.size()); }
  void Pause(int member);
  void Resume(int member);
  ChildProcess& member(int i) { return *members_[i]; }

 private:
  TempDir dir_;
  std::vector<int> client_ports_;
  std::vector<std::unique_ptr<ChildProcess>> members_;
};

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_ETCD_CLUSTER_H_
