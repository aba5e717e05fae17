// EtcdCluster: starts etcd members with fast heartbeats (a test cluster
// elects its own leader in well under a second).
#include "tests/etcd_cluster.h"

#include <signal.h>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rescale::testing {

EtcdCluster::EtcdCluster(int members) {
  std::vector<int> peer_ports;
  std::vector<std::string> initial;
  for (int i = 0; i < members; ++i) {
    client_ports_.push_back(FreeLoopbackPort());
    peer_ports.push_back(FreeLoopbackPort());
    initial.push_back(absl::StrCat("m", i, "=http://127.0.0.1:", peer_ports.back()));
  }
  for (int i = 0; i < members; ++i) {
    const std::string client = absl::StrCat("http://127.0.0.1:", client_ports_[i]);
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_ports[i]);
    auto started = ChildProcess::Start(
        {"/usr/bin/etcd", absl::StrCat("--name=m", i), "--data-dir=" + dir_.File(absl::StrCat("m", i)),
         "--listen-client-urls=" + client, "--advertise-client-urls=" + client,
         "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
         "--initial-cluster=" + absl::StrJoin(initial, ","), "--initial-cluster-state=new",
         "--initial-cluster-token=rescale-test", "--heartbeat-interval=50",
         "--election-timeout=500"});
    REQUIRE(started.ok());
    members_.push_back(*std::move(started));
  }
  for (auto& member : members_) {
    // etcd 3.4 says so once it has joined a cluster with a leader.
    const auto ready = member->WaitForLine("ready to serve client requests", absl::Seconds(30));
    INFO(member->Output());
    REQUIRE(ready.has_value());
  }
}

std::string EtcdCluster::Endpoints() const {
  std::vector<std::string> endpoints;
  for (int port : client_ports_) endpoints.push_back(absl::StrCat("127.0.0.1:", port));
  return absl::StrJoin(endpoints, ",");
}

void EtcdCluster::Pause(int member) { members_[member]->Signal(SIGSTOP); }
void EtcdCluster::Resume(int member) { members_[member]->Signal(SIGCONT); }

}  // namespace rescale::testing
