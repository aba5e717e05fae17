// DeliverOnExit: hands the board's staged events to its watchers when it
// goes out of scope. Declared before a lock guard, it runs after that lock
// is released: changes only stage their events under a lock (cheap,
// whatever the number of watchers), and the fan-out and the watchers' ready
// callbacks, which start gRPC writes, run without any lock of the engine's.
#ifndef RESCALE_SRC_ENGINE_BOARD_DELIVERY_H_
#define RESCALE_SRC_ENGINE_BOARD_DELIVERY_H_

#include "rescale/recommendation_board.h"

namespace rescale::engine {

class DeliverOnExit {
 public:
  explicit DeliverOnExit(RecommendationBoard& board) : board_(board) {}
  ~DeliverOnExit() { board_.Deliver(); }
  DeliverOnExit(const DeliverOnExit&) = delete;
  DeliverOnExit& operator=(const DeliverOnExit&) = delete;

 private:
  RecommendationBoard& board_;
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_BOARD_DELIVERY_H_
