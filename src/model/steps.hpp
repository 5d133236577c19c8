#pragma once
// A run's events as the model replays them: step by step, each step one event per rank (or
// none, for a rank outside the step's collective), lined up from each rank's own stream as
// the ranks would meet: a collective when every member of its communicator has reached it,
// the ring's sendrecvs when every rank in the ring has, the ranks' multiplies between them,
// and every rank at the start of each execution (the program's barrier) before it begins.
#include <cstddef>
#include <optional>
#include <vector>

#include "distmm/dry_run.hpp"
#include "distmm/model.hpp"

namespace distmm::model {

class Steps {
 public:
  explicit Steps(const DryRun& run);

  const std::vector<std::vector<int>>& groups() const { return run_.groups; }
  // The next step into `events` (one entry per rank); false when every rank is done.
  // `execution_start`: the step begins an execution (training: a step).
  bool next(std::vector<std::optional<PlannedEvent>>& events, bool& execution_start);
  // Rank r's event `ahead` events after the step just read (0: its next), or nullptr.
  const PlannedEvent* upcoming(int r, std::size_t ahead = 0) const;

 private:
  bool waits_at_start(std::size_t r) const;
  // The ranks whose next event is a communication every partner has reached (only ops of
  // the first such); throws where none has (streams that never line up).
  std::vector<char> communicating(const std::vector<char>& free) const;

  const DryRun& run_;
  std::vector<EventStream::Cursor> at_;
  std::vector<std::size_t> starts_passed_;  // per rank: execution starts consumed
  std::size_t starts_ = 0;                  // executions begun
};

}  // namespace distmm::model
