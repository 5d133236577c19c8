#pragma once
// A run's events as the model replays them: step by step, each step one event per rank (or
// none, for a rank outside the step's collective), lined up from each rank's own stream as
// the ranks would meet: a collective when every member of its communicator has reached it,
// the ring's sendrecvs when every rank in the ring has, the ranks' multiplies between them,
// and every rank at the start of each execution (the program's barrier) before it begins.
#include <cstddef>
#include <vector>

#include "distmm/dry_run.hpp"
#include "distmm/model.hpp"

namespace distmm::model {

class Steps {
 public:
  explicit Steps(const DryRun& run);

  const std::vector<std::vector<int>>& groups() const { return run_.groups; }
  // The next step into `events` (one entry per rank, nullptr for a rank outside it; they
  // point into the run's streams); false when every rank is done. `execution_start`: the step
  // begins an execution (training: a step).
  bool next(std::vector<const PlannedEvent*>& events, bool& execution_start);
  // Rank r's event `ahead` events after the step just read (0: its next), or nullptr.
  const PlannedEvent* upcoming(int r, std::size_t ahead = 0) const;

 private:
  // Into `events`, the ranks' next events that are a communication every partner has
  // reached (only ops of the first such); throws where none has (streams that never line up).
  void communicating(std::vector<const PlannedEvent*>& events);

  const DryRun& run_;
  std::vector<EventStream::Cursor> at_;
  std::vector<std::size_t> starts_passed_;  // per rank: execution starts consumed
  std::size_t starts_ = 0;                  // executions begun
  // Per step, reused (a dry run on thousands of ranks takes thousands of steps): each rank's
  // next event (nullptr: done), whether it is free to go on; per group, its members ready.
  std::vector<const PlannedEvent*> next_;
  std::vector<char> free_;
  std::vector<std::size_t> ready_;
};

}  // namespace distmm::model
