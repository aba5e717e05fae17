// rescale-load's control-plane mode (--jobs N): what registering N jobs
// costs a running rescaled, how reads fare while plans of all of them run,
// and (--watchers W) how fast W WatchRecommendations streams converge on a
// plan that changes every job. See load_control_plane.cc for the workload.
#ifndef RESCALE_BENCH_LOAD_CONTROL_PLANE_H_
#define RESCALE_BENCH_LOAD_CONTROL_PLANE_H_

#include <string>

namespace rescale::load {

struct ControlPlaneOptions {
  std::string server;
  int jobs = 0;
  // How long GetJob is timed while plans of all jobs run.
  double read_seconds = 5;
  // GetJob calls per second during both phases (one connection, paced).
  double read_rate = 500;
  // Agents reporting the jobs' samples in parallel (even; at least 2).
  int agents = 2;
  // rescaled's pid, for its resident memory (0 = not reported).
  int server_pid = 0;
  // WatchRecommendations streams for the convergence phase (0 = none).
  int watchers = 0;
};

// Runs the mode and prints its report; the process exit status.
int RunControlPlane(const ControlPlaneOptions& options);

}  // namespace rescale::load

#endif  // RESCALE_BENCH_LOAD_CONTROL_PLANE_H_
