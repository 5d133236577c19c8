#include "model/steps.hpp"

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

bool Steps::waits_at_start(std::size_t r) const {
  return !at_[r].done() && at_[r]->execution_start && starts_passed_[r] == starts_;
}

std::vector<char> Steps::communicating(const std::vector<char>& free) const {
  const std::size_t p = at_.size();
  // Members of each group ready at their next collective on it; ranks ready to shift.
  std::vector<std::size_t> ready(run_.groups.size(), 0);
  for (std::size_t r = 0; r < p; ++r) {
    if (free[r] && at_[r]->op != OpKind::sendrecv) ++ready[static_cast<std::size_t>(at_[r]->group)];
  }
  const auto fires = [&](std::size_t r) {
    const PlannedEvent& e = *at_[r];
    if (e.op != OpKind::sendrecv) {
      const auto g = static_cast<std::size_t>(e.group);
      return ready[g] == run_.groups[g].size();
    }
    const auto shifting = [&](int peer) {
      const auto q = static_cast<std::size_t>(peer);
      return free[q] && at_[q]->op == OpKind::sendrecv;
    };
    return shifting(e.peer_to) && shifting(e.peer_from);
  };
  std::vector<char> out(p, 0);
  std::optional<OpKind> op;
  for (std::size_t r = 0; r < p; ++r) {
    if (!free[r] || !fires(r)) continue;
    if (!op) op = at_[r]->op;
    out[r] = at_[r]->op == *op;
  }
  if (!op) {
    throw Error("model: the ranks' events do not line up (a collective some member never reaches)",
                -1, "predict");
  }
  return out;
}

bool Steps::next(std::vector<std::optional<PlannedEvent>>& events, bool& execution_start) {
  const std::size_t p = at_.size();
  events.assign(p, std::nullopt);
  execution_start = false;
  // Ranks free to go on: not done, and not waiting at an execution's start for the others.
  std::vector<char> free(p, 0);
  bool any = false, all_at_start = true;
  for (std::size_t r = 0; r < p; ++r) {
    if (at_[r].done()) continue;
    any = true;
    all_at_start = all_at_start && waits_at_start(r);
  }
  if (!any) return false;
  if (all_at_start) {
    ++starts_;
    execution_start = true;
  }
  bool computing = false;
  for (std::size_t r = 0; r < p; ++r) {
    free[r] = !at_[r].done() && !waits_at_start(r);
    computing = computing || (free[r] && at_[r]->op == OpKind::compute);
  }
  std::vector<char> take(p, 0);
  if (computing) {
    for (std::size_t r = 0; r < p; ++r) take[r] = free[r] && at_[r]->op == OpKind::compute;
  } else {
    take = communicating(free);
  }
  for (std::size_t r = 0; r < p; ++r) {
    if (!take[r]) continue;
    events[r] = *at_[r];
    if (at_[r]->execution_start) ++starts_passed_[r];
    ++at_[r];
  }
  return true;
}

}  // namespace distmm::model
