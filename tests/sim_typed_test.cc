// Tests of the simulation of a cluster of GPU types (bench/sim/typed_sim.h,
// typed_cluster.h): Sia's built-in cluster, cluster files and their errors,
// and runs of every typed policy on a small Sia-format workload: every job
// finishes, each policy's rules hold (fifo never restarts a job, the
// type-aware planner uses the A100s and moves jobs between types, the
// type-blind one has one curve per job), and a run is a function of its seed.
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "bench/sim/typed_cluster.h"
#include "bench/sim/typed_sim.h"
#include "bench/sim/workload.h"

namespace rescale::sim {
namespace {

// Sia's workload format (workloads/philly): the submitted size and batch.
constexpr const char* kWorkload =
    "name,time,application,num_replicas,batch_size\n"
    "cifar10-0,0,cifar10,4,512\n"
    "deepspeech2-1,60,deepspeech2,4,80\n"
    "yolov3-2,120,yolov3,8,64\n"
    "cifar10-3,300,cifar10,8,1024\n"
    "bert-4,600,bert,4,48\n"
    "imagenet-5,900,imagenet,8,1600\n";

Workload SmallWorkload() {
  absl::StatusOr<Workload> w = ParseWorkload(kWorkload, "csv");
  INFO(w.status().ToString());
  REQUIRE(w.ok());
  // Short jobs: a test runs in seconds, not virtual days.
  for (JobDescription& j : w->jobs) j.work_samples /= 200;
  return *w;
}

TEST_CASE("Sia's cluster is built in; cluster files name what is wrong") {
  const TypedCluster sia = SiaCluster();
  REQUIRE(sia.types.size() == 3);
  CHECK(sia.total_gpus() == 64);
  CHECK(sia.types[0].gpus() == 24);  // 6 nodes of 4 T4
  CHECK(sia.types[1].gpus() == 24);  // 3 of 8 RTX 2080 Ti
  CHECK(sia.types[2].gpus() == 16);  // 2 of 8 A100
  CHECK(sia.types[2].name == "NVIDIA-A100-SXM4-40GB");

  absl::StatusOr<TypedCluster> file = ParseTypedCluster(
      "types:\n  - {name: t4, profile: aws, nodes: 2}\n  - {name: a100, profile: dgx-ext, "
      "nodes: 1, gpus_per_node: 4}\n",
      "c.yaml");
  REQUIRE(file.ok());
  CHECK(file->total_gpus() == 12);
  CHECK(file->types[0].gpus_per_node == 4);  // the profile's node size

  auto error = [](const char* yaml) {
    return std::string(ParseTypedCluster(yaml, "c.yaml").status().message());
  };
  CHECK(absl::StrContains(error("types:\n  - {name: t4, profile: h100, nodes: 2}\n"),
                          "c.yaml: types[0].profile \"h100\" is not a built-in"));
  CHECK(absl::StrContains(
      error("types:\n  - {name: t4, profile: aws, nodes: 2}\n  - {name: t4, profile: rtx, "
            "nodes: 1}\n"),
      "types[1].name \"t4\" is given twice"));
  CHECK(absl::StrContains(error("types:\n  - {name: t4, profile: aws, nodes: 0}\n"),
                          "types[0].nodes must be in [1, 4096], got 0"));
  CHECK(absl::StrContains(error("types: []\n"), "must be a list of at least one GPU type"));
}

TEST_CASE("every typed policy finishes a small workload on Sia's cluster, by its own rules") {
  const Workload workload = SmallWorkload();
  TypedSimOptions options;
  options.cluster = SiaCluster();
  std::map<std::string, TypedSummary> by_policy;
  for (const std::string& policy : TypedPolicies()) {
    options.policy = policy;
    absl::StatusOr<TypedSimResult> result = SimulateTyped(workload, options);
    INFO(policy << ": " << result.status().ToString());
    REQUIRE(result.ok());
    const TypedSummary summary = Summarize(*result);
    CHECK(summary.unfinished == 0);
    CHECK(summary.avg_jct_hours > 0);
    // No thrash: a job is not re-placed (and restarted) plan after plan.
    CHECK(summary.restarts_per_job < 15);
    by_policy[policy] = summary;
  }
  // fifo runs every job once, at its submitted size.
  CHECK(by_policy["fifo"].restarts_per_job == 0);
  // The type-aware planner runs work on the A100s.
  CHECK(by_policy["planner"].gpu_hours_by_type[2] > 0);

  // The same seed, the same run.
  options.policy = "planner";
  const TypedSummary again = Summarize(*SimulateTyped(workload, options));
  CHECK(again.avg_jct_hours == by_policy["planner"].avg_jct_hours);
  CHECK(again.restarts_per_job == by_policy["planner"].restarts_per_job);
}

TEST_CASE("the typed simulation refuses a policy it does not run and an application it lacks") {
  const Workload workload = SmallWorkload();
  TypedSimOptions options;
  options.cluster = SiaCluster();
  options.policy = "kubedl";
  CHECK(absl::StrContains(SimulateTyped(workload, options).status().message(),
                          "unknown policy \"kubedl\" with --cluster"));
}

}  // namespace
}  // namespace rescale::sim
