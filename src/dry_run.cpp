#include "distmm/dry_run.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "distmm/error.hpp"
#include "distmm/memory.hpp"
#include "distmm/plan.hpp"
#include "distmm/train_step.hpp"

namespace distmm {

RecordingCommunicator::RecordingCommunicator(int rank, int size)
    : RecordingCommunicator(rank, [size] {
        std::vector<int> all(static_cast<std::size_t>(size));
        std::iota(all.begin(), all.end(), 0);
        return all;
      }()) {}

RecordingCommunicator::RecordingCommunicator(int rank, std::vector<int> members)
    : rank_(rank), members_(std::move(members)) {
  stats().set_dry(true);
}

std::unique_ptr<Communicator> RecordingCommunicator::do_split(int, int) {
  throw CommError("rank " + std::to_string(rank_) +
                      ": split: a dry run knows no other rank's color (split with every "
                      "rank's color and key)",
                  rank_, "split");
}

std::unique_ptr<Communicator> RecordingCommunicator::do_split_known(
    const std::function<ColorKey(int)>& of) {
  const ColorKey mine = of(rank_);
  if (mine.color == kNoColor) return nullptr;
  // MPI_Comm_split's order: by key, then by rank here.
  std::vector<std::pair<int, int>> joined;  // (key, rank)
  for (int r = 0; r < size(); ++r) {
    const ColorKey c = of(r);
    if (c.color == mine.color) joined.emplace_back(c.key, r);
  }
  std::sort(joined.begin(), joined.end());
  std::vector<int> members;
  int me = 0;
  for (const auto& [key, r] : joined) {
    if (r == rank_) me = static_cast<int>(members.size());
    members.push_back(members_[static_cast<std::size_t>(r)]);
  }
  return std::make_unique<RecordingCommunicator>(me, std::move(members));
}

EventStream::EventStream(const std::vector<PlannedEvent>& events) {
  fold(events, 0, events.size());
}

EventStream::EventStream(const std::vector<PlannedEvent>& events, std::size_t from,
                         std::size_t times) {
  fold(events, 0, from);
  const std::size_t first_run = runs_.size();
  fold(events, from, events.size());
  const std::size_t last_run = runs_.size();
  if (times == 0) runs_.resize(first_run);
  for (std::size_t t = 1; t < times; ++t) {
    for (std::size_t r = first_run; r < last_run; ++r) runs_.push_back(runs_[r]);
  }
  size_ = from + (events.size() - from) * times;
}

void EventStream::fold(const std::vector<PlannedEvent>& events, std::size_t begin,
                       std::size_t end) {
  constexpr std::size_t kLongestBlock = 4;
  const std::size_t n = end;
  size_ += end - begin;
  // A stretch without repeats goes on only within this call's events.
  const std::size_t first_run = runs_.size();
  const auto same_block = [&](std::size_t a, std::size_t b, std::size_t length) {
    return std::equal(events.begin() + static_cast<std::ptrdiff_t>(a),
                      events.begin() + static_cast<std::ptrdiff_t>(a + length),
                      events.begin() + static_cast<std::ptrdiff_t>(b));
  };
  for (std::size_t i = begin; i < n;) {
    std::size_t best_length = 1, best_repeats = 1;
    for (std::size_t length = 1; length <= kLongestBlock; ++length) {
      std::size_t repeats = 1;
      while (i + (repeats + 1) * length <= n && same_block(i, i + repeats * length, length)) {
        ++repeats;
      }
      if (repeats > 1 && repeats * length > best_repeats * best_length) {
        best_length = length;
        best_repeats = repeats;
      }
    }
    if (best_repeats == 1 && runs_.size() > first_run && runs_.back().repeats == 1 &&
        runs_.back().first + runs_.back().length == events_.size()) {
      ++runs_.back().length;  // one more event of a stretch without repeats
    } else {
      runs_.push_back({events_.size(), best_length, best_repeats});
    }
    events_.insert(events_.end(), events.begin() + static_cast<std::ptrdiff_t>(i),
                   events.begin() + static_cast<std::ptrdiff_t>(i + best_length));
    i += best_length * best_repeats;
  }
}

const PlannedEvent& EventStream::Cursor::operator*() const {
  return s_->events_[s_->runs_[run_].first + at_];
}

EventStream::Cursor& EventStream::Cursor::operator++() {
  const Run& run = s_->runs_[run_];
  if (++at_ < run.length) return *this;
  at_ = 0;
  if (++repeat_ < run.repeats) return *this;
  repeat_ = 0;
  ++run_;
  return *this;
}

const PlannedEvent* EventStream::Cursor::peek(std::size_t ahead) const {
  Cursor c = *this;
  for (std::size_t i = 0; i < ahead && !c.done(); ++i) ++c;
  return c.done() ? nullptr : &*c;
}

std::vector<PlannedEvent> EventStream::expand() const {
  std::vector<PlannedEvent> out;
  out.reserve(size_);
  for (Cursor c(*this); !c.done(); ++c) out.push_back(*c);
  return out;
}

namespace {

bool rooted(OpKind op) {
  return op == OpKind::broadcast || op == OpKind::scatterv || op == OpKind::gatherv ||
         op == OpKind::reduce;
}

// Rank `rank`'s trace (`stats`) as the model's events, into `out`: communicators as the run's
// groups (added to `run` as they appear), peers as world ranks; events from index `execution`
// on are the plan's (one) execution.
void planned(int rank, const RankStats& stats, std::size_t execution,
             std::map<std::vector<int>, int>& ids, DryRun& run, std::vector<PlannedEvent>& out) {
  const auto& names = stats.communicators();
  const auto& members = stats.communicator_members();
  std::vector<int> group_of(names.size(), 0);
  for (std::size_t c = 1; c < names.size(); ++c) {
    const auto [at, added] = ids.try_emplace(members[c], static_cast<int>(run.groups.size()));
    if (added) {
      run.groups.push_back(members[c]);
      run.group_names.push_back(names[c]);
    }
    group_of[c] = at->second;
  }
  const auto world_rank = [&](int comm, int r) {
    const auto& m = members[static_cast<std::size_t>(comm)];
    return m.empty() || r < 0 ? r : m[static_cast<std::size_t>(r)];
  };
  const auto& trace = stats.events();
  out.clear();
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const TraceEvent& e = trace[i];
    PlannedEvent p;
    p.op = e.op;
    p.group = e.op == OpKind::compute ? 0 : group_of[static_cast<std::size_t>(e.comm)];
    p.root = e.root;
    p.bytes_sent = e.bytes_sent;
    p.bytes_received = e.bytes_received;
    p.total_bytes = e.total_bytes;
    p.rows = e.rows;
    p.inner = e.inner;
    p.cols = e.cols;
    p.peer_to = world_rank(e.comm, e.peer_to);
    p.peer_from = world_rank(e.comm, e.peer_from);
    p.overlapped = e.overlapped;
    p.strided = e.row_bytes > 0;
    p.row_bytes = e.row_bytes;
    p.strided_bytes = e.strided_bytes;
    p.strided_blocks = e.strided_blocks;
    p.execution_start = i == execution;
    const bool in_execution = i >= execution;
    // The root's own side of a rooted collective of an execution: the caller's A or C.
    p.caller_buffers =
        in_execution && rooted(e.op) && e.root >= 0 && world_rank(e.comm, e.root) == rank;
    out.push_back(p);
  }
}

// What dry_rank() reuses from one rank to the next.
struct Scratch {
  std::map<std::vector<int>, int> ids;  // the run's groups by their members
  std::vector<TraceEvent> trace;
  std::vector<PlannedEvent> events;
};

// The distributed layout's plan from this rank's blocks (with no memory behind them), set up
// and executed once; its figures into `out`. Returns the index of the execution's first event.
// (The program refuses a strategy without the layout before it gets here.)
template <Element T>
std::size_t dry_distributed(const Strategy& s, Communicator& comm, const MatmulShape& shape,
                            const StrategySettings& settings, DryRank& out) {
  const std::optional<BlockLayout> l =
      s.distributed_blocks(shape, comm.size(), comm.rank(), settings);
  if (!l) {
    throw InputError(
        "--layout distributed: " + std::string(s.name()) + " has no distributed layout", -1,
        "--layout");
  }
  const arma::Mat<T> b = no_memory_matrix<T>(l->b.rows, l->b.cols);
  const arma::Mat<T> a_t = no_memory_matrix<T>(l->a.cols, l->a.rows);
  arma::Mat<T> c_t = no_memory_matrix<T>(l->c.cols, l->c.rows);
  const auto plan = s.distributed_plan(comm, shape, b, settings);
  out.allocated_bytes = plan->allocated_bytes();
  const std::size_t execution = comm.stats().events().size();
  plan->execute(a_t, c_t);
  // While the plan holds its parameters.
  out.communication = comm.stats().total_communication();
  out.persistent_param_bytes = comm.stats().persistent_param_bytes();
  out.peak_param_bytes = comm.stats().peak_param_bytes();
  return execution;
}

template <Element T>
DryRank dry_rank(const Strategy& s, const MatmulShape& shape, int rank, int ranks,
                 const StrategySettings& settings, std::size_t executions, bool distributed,
                 Scratch& scratch, DryRun& run) {
  RecordingCommunicator comm(rank, ranks);
  comm.stats().reuse_for_trace(std::move(scratch.trace));
  const bool root = rank == 0;
  DryRank out;
  std::size_t execution = 0;  // its first event
  if (distributed) {
    execution = dry_distributed<T>(s, comm, shape, settings, out);
  } else {
    const arma::Mat<T> b = root ? no_memory_matrix<T>(shape.k, shape.n) : arma::Mat<T>();
    const arma::Mat<T> a_t = root ? no_memory_matrix<T>(shape.k, shape.m) : arma::Mat<T>();
    arma::Mat<T> c_t = root ? no_memory_matrix<T>(shape.n, shape.m) : arma::Mat<T>();
    const auto plan = make_plan(s, comm, shape, b, 0, settings);
    out.allocated_bytes = plan->allocated_bytes();
    out.parameter_bytes = plan->parameter_bytes();
    execution = comm.stats().events().size();
    plan->execute(a_t, c_t);
    out.communication = comm.stats().total_communication();
    out.persistent_param_bytes = comm.stats().persistent_param_bytes();
    out.peak_param_bytes = comm.stats().peak_param_bytes();
  }
  planned(rank, comm.stats(), execution, scratch.ids, run, scratch.events);
  out.events = EventStream(scratch.events, execution, executions);
  scratch.trace = comm.stats().take_trace();
  return out;
}

// A rank's training step set up dry, then one step: the counters, holds and events of a step
// alone (train_linear() resets the stats after setup, as here).
template <Element T>
DryRank dry_training_rank(const Strategy& s, const MatmulShape& shape, int rank, int ranks,
                          const TrainConfig& config, std::size_t steps, Scratch& scratch,
                          DryRun& run) {
  RecordingCommunicator comm(rank, ranks);
  comm.stats().reuse_for_trace(std::move(scratch.trace));
  const bool root = rank == 0;
  const arma::Mat<T> x_t = root ? no_memory_matrix<T>(shape.k, shape.m) : arma::Mat<T>();
  const arma::Mat<T> t_t = root ? no_memory_matrix<T>(shape.n, shape.m) : arma::Mat<T>();
  const arma::Mat<T> w0 = root ? no_memory_matrix<T>(shape.k, shape.n) : arma::Mat<T>();
  const TrainingSetup<T> setup{comm, shape, x_t, t_t, w0, false, 0, config, config.settings};
  DryRank out;
  {
    const auto step = s.training_step(setup);
    if (!step) {
      throw InputError("train: strategy " + std::string(s.name()) +
                           " is not a training strategy (use " + strategy_names(true) + ")",
                       -1, "--strategy");
    }
    out.allocated_bytes = step->allocated_bytes();
    out.parameter_bytes = step->parameter_bytes();
    out.optimizer_state_bytes = step->optimizer_state_bytes();
    out.saved_block = step->saved().block(shape.k);
    out.data_rows = step->data_rows();
    comm.stats().reset();
    step->step();
    out.communication = comm.stats().total_communication();
    out.persistent_param_bytes = comm.stats().persistent_param_bytes();
    out.peak_param_bytes = comm.stats().peak_param_bytes();
  }
  planned(rank, comm.stats(), 0, scratch.ids, run, scratch.events);
  for (PlannedEvent& e : scratch.events) e.caller_buffers = false;
  out.events = EventStream(scratch.events, 0, steps);
  scratch.trace = comm.stats().take_trace();
  return out;
}

DryRun new_run(int ranks) {
  DryRun run;
  std::vector<int> world(static_cast<std::size_t>(ranks));
  std::iota(world.begin(), world.end(), 0);
  run.groups.push_back(world);
  run.group_names.push_back("world");
  run.ranks.reserve(static_cast<std::size_t>(ranks));
  return run;
}

}  // namespace

DryRun dry_run(const Strategy& s, const MatmulShape& shape, int ranks, DataType type,
               const StrategySettings& settings, std::size_t executions, bool distributed) {
  DryRun run = new_run(ranks);
  Scratch scratch;
  for (int r = 0; r < ranks; ++r) {
    run.ranks.push_back(
        type == DataType::f64
            ? dry_rank<double>(s, shape, r, ranks, settings, executions, distributed, scratch, run)
            : dry_rank<float>(s, shape, r, ranks, settings, executions, distributed, scratch, run));
  }
  return run;
}

DryRun dry_train(const Strategy& s, const MatmulShape& shape, int ranks, DataType type,
                 const TrainConfig& config, std::size_t steps) {
  DryRun run = new_run(ranks);
  Scratch scratch;
  for (int r = 0; r < ranks; ++r) {
    run.ranks.push_back(
        type == DataType::f64
            ? dry_training_rank<double>(s, shape, r, ranks, config, steps, scratch, run)
            : dry_training_rank<float>(s, shape, r, ranks, config, steps, scratch, run));
  }
  return run;
}

TrainRankPlan training_plan(const Strategy& strategy, const MatmulShape& shape, int ranks, int rank,
                            std::size_t element_bytes, const TrainConfig& config) {
  DryRun run = new_run(ranks);
  Scratch scratch;
  const DryRank r =
      element_bytes == sizeof(float)
          ? dry_training_rank<float>(strategy, shape, rank, ranks, config, 1, scratch, run)
          : dry_training_rank<double>(strategy, shape, rank, ranks, config, 1, scratch, run);
  TrainRankPlan out;
  out.figures.bytes_sent = r.communication.bytes_sent;
  out.figures.bytes_received = r.communication.bytes_received;
  out.figures.optimizer_state_bytes = r.optimizer_state_bytes;
  out.figures.persistent_param_grad_bytes = r.persistent_param_bytes - r.optimizer_state_bytes;
  out.figures.peak_param_grad_bytes = r.peak_param_bytes - r.optimizer_state_bytes;
  out.saved_block = r.saved_block;
  out.data_rows = r.data_rows;
  out.allocated_bytes = r.allocated_bytes;
  return out;
}

}  // namespace distmm
