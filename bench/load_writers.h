// rescale-load's writers mode (--writers N): N clients, each on its own
// connection and thread, register new jobs one after another for --seconds
// against a running rescaled (durable when it runs on SQLite or etcd),
// while one more client reads GetJob at --read_rate. Reports RegisterJob
// calls/s, p50 and p99, and GetJob p50, p99 and max meanwhile.
#ifndef RESCALE_BENCH_LOAD_WRITERS_H_
#define RESCALE_BENCH_LOAD_WRITERS_H_

#include <string>

namespace rescale::load {

struct WritersOptions {
  std::string server;
  int writers = 1;
  double seconds = 5;
  double read_rate = 500;
};

// Runs the mode and prints its report; the process exit status.
int RunWriters(const WritersOptions& options);

}  // namespace rescale::load

#endif  // RESCALE_BENCH_LOAD_WRITERS_H_
