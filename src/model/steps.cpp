#include "model/steps.hpp"

#include <optional>
#include <string>

#include "distmm/error.hpp"

namespace distmm::model {

Steps::Steps(const DryRun& run) : run_(run), starts_passed_(run.ranks.size(), 0) {
  at_.reserve(run.ranks.size());
  for (const DryRank& rank : run.ranks) at_.emplace_back(rank.events);
}

const PlannedEvent* Steps::upcoming(int r, std::size_t ahead) const {
  return at_[static_cast<std::size_t>(r)].peek(ahead);
}

void Steps::communicating(std::vector<const PlannedEvent*>& events) {
  const std::size_t p = at_.size();
  // Members of each group ready at their next collective on it; ranks ready to shift.
  ready_.assign(run_.groups.size(), 0);
  for (std::size_t r = 0; r < p; ++r) {
    if (free_[r] && next_[r]->op != OpKind::sendrecv)
      ++ready_[static_cast<std::size_t>(next_[r]->group)];
  }
  const auto fires = [&](std::size_t r) {
    const PlannedEvent& e = *next_[r];
    if (e.op != OpKind::sendrecv) {
      const auto g = static_cast<std::size_t>(e.group);
      return ready_[g] == run_.groups[g].size();
    }
    const auto shifting = [&](int peer) {
      const auto q = static_cast<std::size_t>(peer);
      return free_[q] && next_[q]->op == OpKind::sendrecv;
    };
    return shifting(e.peer_to) && shifting(e.peer_from);
  };
  std::optional<OpKind> op;
  for (std::size_t r = 0; r < p; ++r) {
    if (!free_[r] || !fires(r)) continue;
    if (!op) op = next_[r]->op;
    if (next_[r]->op == *op) events[r] = next_[r];
  }
  if (!op) {
    throw Error("model: the ranks' events do not line up (a collective some member never reaches)",
                -1, "predict");
  }
}

bool Steps::next(std::vector<const PlannedEvent*>& events, bool& execution_start) {
  const std::size_t p = at_.size();
  events.assign(p, nullptr);
  execution_start = false;
  next_.assign(p, nullptr);
  free_.assign(p, 0);
  // Ranks free to go on: not done, and not waiting at an execution's start for the others.
  bool any = false, all_at_start = true;
  for (std::size_t r = 0; r < p; ++r) {
    if (at_[r].done()) continue;
    next_[r] = &*at_[r];
    any = true;
    free_[r] = !(next_[r]->execution_start && starts_passed_[r] == starts_);
    all_at_start = all_at_start && !free_[r];
  }
  if (!any) return false;
  bool computing = false;
  for (std::size_t r = 0; r < p; ++r) {
    if (next_[r] == nullptr) continue;
    // Every rank at the start: the execution begins, and they all go on.
    if (all_at_start) free_[r] = 1;
    computing = computing || (free_[r] && next_[r]->op == OpKind::compute);
  }
  if (all_at_start) {
    ++starts_;
    execution_start = true;
  }
  if (computing) {
    for (std::size_t r = 0; r < p; ++r) {
      if (free_[r] && next_[r]->op == OpKind::compute) events[r] = next_[r];
    }
  } else {
    communicating(events);
  }
  for (std::size_t r = 0; r < p; ++r) {
    if (events[r] == nullptr) continue;
    if (events[r]->execution_start) ++starts_passed_[r];
    ++at_[r];
  }
  return true;
}

}  // namespace distmm::model
