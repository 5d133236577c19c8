// The events each strategy's plan records, generated without data (model.hpp). Each step is
// one event per rank (or none, for a rank outside a collective's group); a test compares the
// sequence with what real runs record, event by event.
#include <functional>
#include <string>

#include "distmm/model.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategies/hsdp.hpp"
#include "model/steps.hpp"

namespace distmm::model {
namespace {

using U = std::uint64_t;

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

}  // namespace

Program program(Strategy strategy, const MatmulShape& s, int p, std::size_t element_bytes,
                int replicas, std::size_t executions, bool train) {
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
  const auto world_collective = [&](OpKind op, int root, std::vector<U> counts) {
    all([=](int r) { return collective(op, 0, root, r, counts, e); });
  };
  const auto world_whole = [&](OpKind op, int root, U bytes) {
    all([=](int r) { return whole(op, 0, root, r, p, bytes); });
  };
  // A world collective whose root buffer may be columns of a row-major matrix (strided).
  // row_bytes: the length of that matrix's rows.
  const auto world_v = [&](OpKind op, int root, std::vector<U> counts, bool strided,
                           U row_bytes = 0) {
    all([=](int r) {
      PlannedEvent x = collective(op, 0, root, r, counts, e);
      x.strided = strided;
      x.row_bytes = strided ? row_bytes : 0;
      x.caller_buffers = r == root;
      return x;
    });
  };
  // A broadcast or reduce of the caller's A or C at the root.
  const auto world_caller = [&](OpKind op, int root, U bytes) {
    all([=](int r) {
      PlannedEvent x = whole(op, 0, root, r, p, bytes);
      x.caller_buffers = r == root;
      return x;
    });
  };
  const auto mark_start = [&] { prog.execution_starts.push_back(prog.steps.size()); };
  const bool row_sharded = strategy == Strategy::dp || strategy == Strategy::fsdp ||
                           strategy == Strategy::fsdp_overlap || strategy == Strategy::hsdp;

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

  if (train) {
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

  // Setup: placing B.
  switch (strategy) {
    case Strategy::dp:
      if (p > 1) world_whole(OpKind::broadcast, 0, k * n * e);
      break;
    case Strategy::fsdp:
    case Strategy::fsdp_overlap:
    case Strategy::tp_col:
      if (p > 1) world_collective(OpKind::scatterv, 0, counts_of(s.n, p, k));
      break;
    case Strategy::tp_row:
      if (p > 1) world_v(OpKind::scatterv, 0, counts_of(s.k, p, n), true, k * e);
      break;
    case Strategy::hsdp: {
      all([](int) {
        PlannedEvent x;
        x.op = OpKind::split;
        return x;
      });
      all([](int) {
        PlannedEvent x;
        x.op = OpKind::split;
        return x;
      });
      if (S > 1) {
        const auto counts = counts_of(s.n, S, k);
        step([=](int r) -> std::optional<PlannedEvent> {
          if (r / S != 0) return std::nullopt;  // the root's group alone
          return collective(OpKind::scatterv, 1, 0, r % S, counts, e);
        });
      }
      if (R > 1) {
        all([=](int r) {
          const U shard = U{shard_of(s.n, S, r % S).count} * k * e;
          return whole(OpKind::broadcast, replica_group(r), 0, r / S, R, shard);
        });
      }
      break;
    }
  }
  prog.setup_steps = prog.steps.size();

  for (std::size_t run = 0; run < executions; ++run) {
    mark_start();
    if (row_sharded && p > 1) world_v(OpKind::scatterv, 0, counts_of(s.m, p, k), false);
    switch (strategy) {
      case Strategy::dp:
        all([=](int r) { return compute(rows(r), k, n); });
        break;
      case Strategy::fsdp:
        if (p > 1) world_collective(OpKind::allgatherv, -1, counts_of(s.n, p, k));
        all([=](int r) { return compute(rows(r), k, n); });
        break;
      case Strategy::hsdp:
        if (S > 1) {
          const auto counts = counts_of(s.n, S, k);
          all([=](int r) {
            return collective(OpKind::allgatherv, shard_group(r), -1, r % S, counts, e);
          });
        }
        all([=](int r) { return compute(rows(r), k, n); });
        break;
      case Strategy::fsdp_overlap: {
        const auto owner_cols = [=](int r, int t) {
          return U{shard_of(s.n, p, ((r - t) % p + p) % p).count};
        };
        for (int t = 0; t < p; ++t) {
          if (t + 1 < p) {
            all([=](int r) {
              PlannedEvent x;
              x.op = OpKind::sendrecv;
              x.peer_to = (r + 1) % p;
              x.peer_from = (r + p - 1) % p;
              x.bytes_sent = k * owner_cols(r, t) * e;
              x.bytes_received = k * owner_cols(r, t + 1) * e;
              return x;
            });
          }
          all([=](int r) {
            PlannedEvent x = compute(rows(r), k, owner_cols(r, t));
            // Its multiply ran on the helper thread alongside the step's sendrecv.
            x.overlapped = t + 1 < p;
            return x;
          });
        }
        break;
      }
      case Strategy::tp_col:
        if (p > 1) world_caller(OpKind::broadcast, 0, m * k * e);
        all([=](int r) { return compute(m, k, U{shard_of(s.n, p, r).count}); });
        if (p > 1) world_v(OpKind::gatherv, 0, counts_of(s.n, p, m), true, n * e);
        break;
      case Strategy::tp_row:
        if (p > 1) world_v(OpKind::scatterv, 0, counts_of(s.k, p, m), true, k * e);
        all([=](int r) { return compute(m, U{shard_of(s.k, p, r).count}, n); });
        if (p > 1) world_caller(OpKind::reduce, 0, m * n * e);
        break;
    }
    if (row_sharded && p > 1) world_v(OpKind::gatherv, 0, counts_of(s.m, p, n), false);
  }
  return prog;
}

}  // namespace distmm::model
