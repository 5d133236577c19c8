// The events each strategy's training step records, generated without data (a training step
// does not run dry yet; a plan's events come from its dry run, dry_run.hpp). Each step is
// one event per rank (or none, for a rank outside a collective's group); a test compares the
// sequence with what real runs record, event by event.
#include <algorithm>
#include <functional>
#include <optional>
#include <string>

#include "distmm/model.hpp"
#include "distmm/plan.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategies/hsdp.hpp"
#include "model/steps.hpp"

namespace distmm::model {
namespace {

using U = std::uint64_t;

struct Program {
  std::vector<std::vector<int>> groups;  // world ranks of each communicator (0: all)
  std::vector<std::function<std::optional<PlannedEvent>(int rank)>> steps;
  std::vector<std::size_t> execution_starts;  // the step each training step begins at
};

PlannedEvent compute(U rows, U inner, U cols) {
  PlannedEvent e;
  e.op = OpKind::compute;
  e.rows = rows;
  e.inner = inner;
  e.cols = cols;
  return e;
}

// The counters' view of one rank in a collective over `members` ranks (local rank `me`).
PlannedEvent collective(OpKind op, int group, int root, int me, const std::vector<U>& counts,
                        U element_bytes) {
  PlannedEvent e;
  e.op = op;
  e.group = group;
  e.root = root;
  const auto p = static_cast<U>(counts.size());
  U total = 0;
  for (U c : counts) total += c;
  const U mine = counts[static_cast<std::size_t>(me)];
  switch (op) {
    case OpKind::scatterv:
      if (me == root) {
        e.bytes_sent = (total - mine) * element_bytes;
      } else {
        e.bytes_received = mine * element_bytes;
      }
      break;
    case OpKind::gatherv:
      if (me == root) {
        e.bytes_received = (total - mine) * element_bytes;
      } else {
        e.bytes_sent = mine * element_bytes;
      }
      break;
    case OpKind::allgatherv:
      e.bytes_sent = (p - 1) * mine * element_bytes;
      e.bytes_received = (total - mine) * element_bytes;
      break;
    case OpKind::reduce_scatter:
      e.bytes_sent = (total - mine) * element_bytes;
      e.bytes_received = (p - 1) * mine * element_bytes;
      break;
    default:
      break;
  }
  e.total_bytes = total * element_bytes;
  return e;
}

// A collective of one vector of `count` elements (broadcast, allreduce, reduce).
PlannedEvent whole(OpKind op, int group, int root, int me, int p, U bytes) {
  PlannedEvent e;
  e.op = op;
  e.group = group;
  e.root = root;
  e.total_bytes = bytes;
  const U others = static_cast<U>(p - 1);
  switch (op) {
    case OpKind::broadcast:
      if (me == root) {
        e.bytes_sent = others * bytes;
      } else {
        e.bytes_received = bytes;
      }
      break;
    case OpKind::allreduce:
      e.bytes_sent = e.bytes_received = others * bytes;
      break;
    case OpKind::reduce:
      if (me == root) {
        e.bytes_received = others * bytes;
      } else {
        e.bytes_sent = bytes;
      }
      break;
    default:
      break;
  }
  return e;
}

std::vector<U> counts_of(std::size_t total, int parts, U unit) {
  std::vector<U> c;
  for (int r = 0; r < parts; ++r) c.push_back(shard_of(total, parts, r).count * unit);
  return c;
}

Program training_program(Strategy strategy, const MatmulShape& s, int p, std::size_t element_bytes,
                         int replicas, std::size_t executions) {
  Program prog;
  const U e = element_bytes, m = s.m, k = s.k, n = s.n;
  std::vector<int> world(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) world[static_cast<std::size_t>(r)] = r;
  prog.groups.push_back(world);
  const MatmulShape shape = s;
  const auto rows = [shape, p](int r) { return U{shard_of(shape.m, p, r).count}; };
  const auto step = [&](std::function<std::optional<PlannedEvent>(int)> f) {
    prog.steps.push_back(std::move(f));
  };
  const auto all = [&](std::function<PlannedEvent(int)> f) {
    step([f](int r) { return std::optional<PlannedEvent>(f(r)); });
  };
  const auto world_whole = [&](OpKind op, int root, U bytes) {
    all([=](int r) { return whole(op, 0, root, r, p, bytes); });
  };
  const auto mark_start = [&] { prog.execution_starts.push_back(prog.steps.size()); };

  // hsdp's mesh: group 1 + g is shard group g, group 1 + R + i replica group i.
  Mesh mesh{1, p};
  if (strategy == Strategy::hsdp) {
    mesh = make_mesh(p, replicas);
    for (int g = 0; g < mesh.replicas; ++g) {
      std::vector<int> members;
      for (int i = 0; i < mesh.group_size; ++i) members.push_back(g * mesh.group_size + i);
      prog.groups.push_back(members);
    }
    for (int i = 0; i < mesh.group_size; ++i) {
      std::vector<int> members;
      for (int g = 0; g < mesh.replicas; ++g) members.push_back(g * mesh.group_size + i);
      prog.groups.push_back(members);
    }
  }
  const int S = mesh.group_size, R = mesh.replicas;
  const auto shard_group = [=](int r) { return 1 + r / S; };
  const auto replica_group = [=](int r) { return 1 + R + r % S; };

  {
    // Training steps (train.cpp); the setup before them is not counted.
    const int steps = static_cast<int>(executions);
    for (int t = 0; t < steps; ++t) {
      mark_start();
      if (strategy == Strategy::dp || p == 1) {
        all([=](int r) { return compute(rows(r), k, n); });
        all([=](int r) { return compute(rows(r), n, k); });
        all([=](int r) { return compute(k, rows(r), n); });
        if (p > 1) {
          world_whole(OpKind::allreduce, -1, k * n * e);
          world_whole(OpKind::allreduce, -1, 8);
        }
        continue;
      }
      if (strategy == Strategy::tp_col) {
        const auto cols = [=](int r) { return U{shard_of(s.n, p, r).count}; };
        all([=](int r) { return compute(m, k, cols(r)); });
        all([=](int r) { return compute(m, cols(r), k); });
        world_whole(OpKind::allreduce, -1, m * k * e);
        all([=](int r) { return compute(k, m, cols(r)); });
        world_whole(OpKind::allreduce, -1, 8);
        continue;
      }
      // fsdp (one group of P) and hsdp (shard groups of S, replicas of R).
      const bool hsdp = strategy == Strategy::hsdp;
      const int g = hsdp ? S : p;
      const auto counts = counts_of(s.n, g, k);
      const auto in_group = [=](int r) { return hsdp ? r % S : r; };
      const auto group_of = [=](int r) { return hsdp ? shard_group(r) : 0; };
      const auto gather = [&] {
        if (g > 1) {
          all([=](int r) {
            return collective(OpKind::allgatherv, group_of(r), -1, in_group(r), counts, e);
          });
        }
      };
      gather();
      all([=](int r) { return compute(rows(r), k, n); });
      gather();
      all([=](int r) { return compute(rows(r), n, k); });
      all([=](int r) { return compute(k, rows(r), n); });
      if (g > 1) {
        all([=](int r) {
          return collective(OpKind::reduce_scatter, group_of(r), -1, in_group(r), counts, e);
        });
      }
      if (hsdp && R > 1) {
        all([=](int r) {
          const U shard = U{shard_of(s.n, S, r % S).count} * k * e;
          return whole(OpKind::allreduce, replica_group(r), -1, r / S, R, shard);
        });
      }
      world_whole(OpKind::allreduce, -1, 8);
    }
    return prog;
  }
}

}  // namespace

DryRun training_events(Strategy strategy, const MatmulShape& shape, int ranks,
                       std::size_t element_bytes, int replicas, std::size_t steps) {
  const Program prog = training_program(strategy, shape, ranks, element_bytes, replicas, steps);
  DryRun run;
  run.groups = prog.groups;
  for (std::size_t g = 0; g < prog.groups.size(); ++g) {
    std::string name = "world";
    if (g > 0) {
      name = "ranks ";
      for (std::size_t i = 0; i < prog.groups[g].size(); ++i) {
        if (i > 0) name += ',';
        name += std::to_string(prog.groups[g][i]);
      }
      name += " of world";
    }
    run.group_names.push_back(name);
  }
  std::vector<std::vector<PlannedEvent>> events(static_cast<std::size_t>(ranks));
  for (std::size_t i = 0; i < prog.steps.size(); ++i) {
    const bool start = std::find(prog.execution_starts.begin(), prog.execution_starts.end(), i) !=
                       prog.execution_starts.end();
    for (int r = 0; r < ranks; ++r) {
      if (auto e = prog.steps[i](r)) {
        e->execution_start = start;
        events[static_cast<std::size_t>(r)].push_back(*e);
      }
    }
  }
  for (int r = 0; r < ranks; ++r) {
    DryRank rank;
    rank.allocated_bytes =
        training_allocation(strategy, shape, ranks, r, element_bytes, 0, replicas);
    rank.parameter_bytes =
        plan_memory(strategy, shape, ranks, r, element_bytes, 0, replicas).parameter_bytes;
    rank.events = EventStream(events[static_cast<std::size_t>(r)]);
    run.ranks.push_back(std::move(rank));
  }
  return run;
}

}  // namespace distmm::model
