#include "distmm/report.hpp"

#include <algorithm>

#include "distmm/blas.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategies/hsdp.hpp"

namespace distmm {
namespace {

std::uint64_t nonempty(std::uint64_t n) {
  return n > 0 ? 1 : 0;
}

// Elements and messages rank 0 moves to (or from) the other ranks for per-rank counts.
struct RootTraffic {
  std::uint64_t elements = 0, messages = 0;
};
RootTraffic to_others(std::size_t total, int ranks, std::uint64_t unit) {
  RootTraffic t;
  for (int r = 1; r < ranks; ++r) {
    const std::uint64_t e = shard_of(total, ranks, r).count * unit;
    t.elements += e;
    t.messages += nonempty(e);
  }
  return t;
}

// Adds a row-scatter of an m x w matrix from rank 0 to `f` (elements, not yet bytes).
void row_scatter(RankFigures& f, std::size_t rows, std::uint64_t width, int ranks) {
  if (f.rank == 0) {
    const RootTraffic t = to_others(rows, ranks, width);
    f.bytes_sent += t.elements;
    f.messages_sent += t.messages;
  } else {
    const std::uint64_t e = shard_of(rows, ranks, f.rank).count * width;
    f.bytes_received += e;
    f.messages_received += nonempty(e);
  }
}

void row_gather(RankFigures& f, std::size_t rows, std::uint64_t width, int ranks) {
  if (f.rank == 0) {
    const RootTraffic t = to_others(rows, ranks, width);
    f.bytes_received += t.elements;
    f.messages_received += t.messages;
  } else {
    const std::uint64_t e = shard_of(rows, ranks, f.rank).count * width;
    f.bytes_sent += e;
    f.messages_sent += nonempty(e);
  }
}

}  // namespace

RankFigures predict(Strategy strategy, const MatmulShape& shape, int ranks, int rank,
                    std::size_t element_bytes, int replicas) {
  RankFigures f;
  f.rank = rank;
  f.a_rows = shard_of(shape.m, ranks, rank).count;
  const std::uint64_t k = shape.k, n = shape.n, full_b = k * n;
  const auto others = static_cast<std::uint64_t>(ranks - 1);
  std::uint64_t persistent = full_b, peak = full_b;
  const bool tensor_parallel = strategy == Strategy::tp_col || strategy == Strategy::tp_row;
  if (tensor_parallel) {
    // Every rank multiplies all of A's rows (by its columns of B, or its columns of A by its
    // rows of B).
    f.a_rows = shape.m;
    const std::uint64_t m = shape.m;
    if (strategy == Strategy::tp_col) {
      persistent = peak = shard_of(n, ranks, rank).count * k;
      if (ranks > 1) {
        row_scatter(f, n, k, ranks);  // setup: B's columns
        if (rank == 0) {              // A broadcast
          f.bytes_sent += others * m * k;
          f.messages_sent += others * nonempty(m * k);
        } else {
          f.bytes_received += m * k;
          f.messages_received += nonempty(m * k);
        }
        row_gather(f, n, m, ranks);  // C's columns
      }
    } else {
      persistent = peak = shard_of(k, ranks, rank).count * n;
      if (ranks > 1) {
        row_scatter(f, k, n, ranks);  // setup: B's rows
        row_scatter(f, k, m, ranks);  // A's columns
        if (rank == 0) {              // the partial products summed to the root
          f.bytes_received += others * m * n;
          f.messages_received += others * nonempty(m * n);
        } else {
          f.bytes_sent += m * n;
          f.messages_sent += nonempty(m * n);
        }
      }
    }
  } else if (ranks > 1) {
    row_scatter(f, shape.m, k, ranks);
    switch (strategy) {
      case Strategy::dp:
        if (rank == 0) {
          f.bytes_sent += others * full_b;
          f.messages_sent += others * nonempty(full_b);
        } else {
          f.bytes_received += full_b;
          f.messages_received += nonempty(full_b);
        }
        break;
      case Strategy::fsdp: {
        const std::uint64_t mine = shard_of(n, ranks, rank).count * k;
        row_scatter(f, n, k, ranks);  // the parameter shards: columns of B
        f.bytes_sent += others * mine;
        f.messages_sent += others * nonempty(mine);
        f.bytes_received += full_b - mine;
        for (int r = 0; r < ranks; ++r) {
          if (r != rank) f.messages_received += nonempty(shard_of(n, ranks, r).count * k);
        }
        persistent = mine;
        peak = mine + full_b;
        break;
      }
      case Strategy::fsdp_overlap: {
        row_scatter(f, n, k, ranks);  // the parameter shards, as in FSDP
        // P - 1 ring steps: at step t rank r passes on the shard of rank (r - t) mod P and
        // receives that of rank (r - t - 1) mod P.
        const auto shard_elements = [&](int owner) -> std::uint64_t {
          return shard_of(n, ranks, (owner % ranks + ranks) % ranks).count * k;
        };
        for (int t = 0; t + 1 < ranks; ++t) {
          const std::uint64_t out = shard_elements(rank - t), in = shard_elements(rank - t - 1);
          f.bytes_sent += out;
          f.messages_sent += nonempty(out);
          f.bytes_received += in;
          f.messages_received += nonempty(in);
        }
        persistent = shard_elements(rank);
        peak = persistent + static_cast<std::uint64_t>(std::min(ranks - 1, 2)) * shard_elements(0);
        break;
      }
      case Strategy::hsdp: {
        const Mesh mesh = make_mesh(ranks, replicas);
        const int s = mesh.group_size, i = mesh.index_of(rank), g = mesh.group_of(rank);
        const auto shard = [&](int index) { return shard_of(n, s, index).count * k; };
        const std::uint64_t mine = shard(i);
        // Setup: the root's group (group 0) scatters B's shards from the root (index 0) ...
        if (g == 0 && s > 1) {
          if (i == 0) {
            for (int j = 1; j < s; ++j) {
              f.bytes_sent += shard(j);
              f.messages_sent += nonempty(shard(j));
            }
          } else {
            f.bytes_received += mine;
            f.messages_received += nonempty(mine);
          }
        }
        // ... and each shard is broadcast from group 0 to its R - 1 replicas.
        const auto others_r = static_cast<std::uint64_t>(mesh.replicas - 1);
        if (g == 0) {
          f.bytes_sent += others_r * mine;
          f.messages_sent += others_r * nonempty(mine);
        } else {
          f.bytes_received += mine;
          f.messages_received += nonempty(mine);
        }
        // Each execution all-gathers B within the group.
        const auto others_s = static_cast<std::uint64_t>(s - 1);
        f.bytes_sent += others_s * mine;
        f.messages_sent += others_s * nonempty(mine);
        f.bytes_received += full_b - mine;
        for (int j = 0; j < s; ++j) {
          if (j != i) f.messages_received += nonempty(shard(j));
        }
        persistent = mine;
        peak = mine + (s > 1 ? full_b : 0);
        break;
      }
      case Strategy::tp_col:
      case Strategy::tp_row:
        break;
    }
    row_gather(f, shape.m, n, ranks);
  }
  f.param_elements = persistent;
  f.bytes_sent *= element_bytes;
  f.bytes_received *= element_bytes;
  f.persistent_param_bytes = persistent * element_bytes;
  f.peak_param_bytes = peak * element_bytes;
  return f;
}

RankFigures measured(Strategy strategy, const MatmulShape& shape, const Communicator& comm,
                     int replicas) {
  const RankStats& s = comm.stats();
  const OpCounters c = s.total_communication();
  RankFigures f;
  f.rank = comm.rank();
  f.a_rows = shard_of(shape.m, comm.size(), comm.rank()).count;
  f.param_elements = comm.size() > 1 && strategy != Strategy::dp
                         ? shard_of(shape.n, comm.size(), comm.rank()).count * shape.k
                         : static_cast<std::uint64_t>(shape.k) * shape.n;
  if (strategy == Strategy::hsdp) {
    const Mesh mesh = make_mesh(comm.size(), replicas);
    f.param_elements =
        shard_of(shape.n, mesh.group_size, mesh.index_of(comm.rank())).count * shape.k;
  }
  if (strategy == Strategy::tp_col || strategy == Strategy::tp_row) f.a_rows = shape.m;
  if (strategy == Strategy::tp_col) {
    f.param_elements = shard_of(shape.n, comm.size(), comm.rank()).count * shape.k;
  }
  if (strategy == Strategy::tp_row) {
    f.param_elements = shard_of(shape.k, comm.size(), comm.rank()).count * shape.n;
  }
  f.bytes_sent = c.bytes_sent;
  f.bytes_received = c.bytes_received;
  f.messages_sent = c.messages_sent;
  f.messages_received = c.messages_received;
  f.persistent_param_bytes = s.persistent_param_bytes();
  f.peak_param_bytes = s.peak_param_bytes();
  f.comm_s = c.seconds;
  f.compute_s = s.op(OpKind::compute).seconds;
  return f;
}

namespace {

std::vector<double> encode(const RankFigures& f) {
  return {static_cast<double>(f.rank),
          static_cast<double>(f.a_rows),
          static_cast<double>(f.param_elements),
          static_cast<double>(f.bytes_sent),
          static_cast<double>(f.bytes_received),
          static_cast<double>(f.messages_sent),
          static_cast<double>(f.messages_received),
          static_cast<double>(f.persistent_param_bytes),
          static_cast<double>(f.peak_param_bytes),
          f.comm_s,
          f.compute_s};
}

RankFigures decode(const double* d) {
  const auto u = [](double x) { return static_cast<std::uint64_t>(x); };
  return {static_cast<int>(d[0]),
          u(d[1]),
          u(d[2]),
          u(d[3]),
          u(d[4]),
          u(d[5]),
          u(d[6]),
          u(d[7]),
          u(d[8]),
          d[9],
          d[10]};
}

constexpr std::size_t kEventFields = 10;

}  // namespace

std::vector<std::vector<double>> gather_values(Communicator& comm, const std::vector<double>& mine,
                                               int root) {
  const auto p = static_cast<std::size_t>(comm.size());
  const std::size_t width = mine.size();
  std::vector<double> all(comm.rank() == root ? p * width : 0);
  comm.gatherv(mine, all, std::vector<std::size_t>(p, width), root);
  std::vector<std::vector<double>> rows;
  for (std::size_t r = 0; r < all.size() / std::max<std::size_t>(width, 1); ++r) {
    rows.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(r * width),
                      all.begin() + static_cast<std::ptrdiff_t>((r + 1) * width));
  }
  return rows;
}

namespace {

// Fixed-width strings from every rank to `root`, as doubles (one per character).
std::vector<std::string> gather_strings(Communicator& comm, const std::string& text, int root) {
  constexpr std::size_t kWidth = 128;  // characters kept of each string
  const std::string mine = text.substr(0, kWidth);
  std::vector<double> encoded(kWidth, 0.0);
  for (std::size_t i = 0; i < mine.size(); ++i) encoded[i] = static_cast<unsigned char>(mine[i]);
  std::vector<std::string> out;
  for (const auto& row : gather_values(comm, encoded, root)) {
    std::string s;
    for (double c : row) {
      if (c == 0) break;
      s.push_back(static_cast<char>(c));
    }
    out.push_back(s);
  }
  return out;
}

// "rank 3" or "rank 0-2" for the ranks [first, last].
std::string rank_range(std::size_t first, std::size_t last) {
  std::string out = "rank " + std::to_string(first);
  if (last > first) {
    out.push_back('-');
    out.append(std::to_string(last));
  }
  return out;
}

}  // namespace

RankPlacement this_rank_placement(const Communicator& comm) {
  return {comm.host(), cpu_list(allowed_cpus()), blas_threads()};
}

std::vector<RankPlacement> gather_placement(Communicator& comm, int root) {
  const RankPlacement mine = this_rank_placement(comm);
  const auto hosts = gather_strings(comm, mine.host, root);
  const auto cpus = gather_strings(comm, mine.cpus, root);
  const auto threads = gather_values(comm, {static_cast<double>(mine.blas_threads)}, root);
  std::vector<RankPlacement> out;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    out.push_back({hosts[r], cpus[r], static_cast<int>(threads[r][0])});
  }
  return out;
}

std::string placement(const std::vector<RankPlacement>& ranks) {
  std::string hosts, threads;
  for (std::size_t r = 0; r < ranks.size();) {
    std::size_t end = r;
    while (end + 1 < ranks.size() && ranks[end + 1].host == ranks[r].host) ++end;
    if (!hosts.empty()) hosts += ", ";
    hosts += rank_range(r, end) + " on " + ranks[r].host;
    r = end + 1;
  }
  for (std::size_t r = 0; r < ranks.size();) {
    std::size_t end = r;
    while (end + 1 < ranks.size() && ranks[end + 1].cpus == ranks[r].cpus &&
           ranks[end + 1].blas_threads == ranks[r].blas_threads) {
      ++end;
    }
    if (!threads.empty()) threads += ", ";
    threads += rank_range(r, end) + ": " + std::to_string(ranks[r].blas_threads) + " (" +
               ranks[r].cpus + ")";
    r = end + 1;
  }
  return hosts + "; BLAS threads (CPUs): " + threads;
}

std::vector<RankFigures> gather_figures(Communicator& comm, const RankFigures& mine, int root) {
  std::vector<RankFigures> out;
  for (const auto& row : gather_values(comm, encode(mine), root)) out.push_back(decode(row.data()));
  return out;
}

std::vector<std::vector<TraceEvent>> gather_events(Communicator& comm, std::vector<TraceEvent> mine,
                                                   int root) {
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<double> counts_d{static_cast<double>(mine.size() * kEventFields)};
  std::vector<double> all_counts(p);
  comm.allgatherv(counts_d, all_counts, std::vector<std::size_t>(p, 1));
  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (double c : all_counts) {
    counts.push_back(static_cast<std::size_t>(c));
    total += counts.back();
  }
  std::vector<double> send;
  send.reserve(mine.size() * kEventFields);
  for (const TraceEvent& e : mine) {
    send.insert(send.end(), {static_cast<double>(e.op), e.start_s, e.duration_s,
                             static_cast<double>(e.bytes_sent),
                             static_cast<double>(e.bytes_received), static_cast<double>(e.rows),
                             static_cast<double>(e.inner), static_cast<double>(e.cols),
                             static_cast<double>(e.root), static_cast<double>(e.comm)});
  }
  std::vector<double> all(comm.rank() == root ? total : 0);
  comm.gatherv(send, all, counts, root);
  std::vector<std::vector<TraceEvent>> out;
  if (comm.rank() != root) return out;
  std::size_t offset = 0;
  for (std::size_t r = 0; r < p; ++r) {
    out.emplace_back();
    for (std::size_t i = 0; i < counts[r]; i += kEventFields) {
      const double* d = all.data() + offset + i;
      TraceEvent e;
      e.op = static_cast<OpKind>(static_cast<int>(d[0]));
      e.start_s = d[1];
      e.duration_s = d[2];
      e.bytes_sent = static_cast<std::uint64_t>(d[3]);
      e.bytes_received = static_cast<std::uint64_t>(d[4]);
      e.rows = static_cast<std::uint64_t>(d[5]);
      e.inner = static_cast<std::uint64_t>(d[6]);
      e.cols = static_cast<std::uint64_t>(d[7]);
      e.root = static_cast<int>(d[8]);
      e.comm = static_cast<int>(d[9]);
      out.back().push_back(e);
    }
    offset += counts[r];
  }
  return out;
}

std::vector<std::vector<std::string>> gather_communicators(Communicator& comm, int root) {
  // Each rank's names, one per line, as one text of any length.
  std::string text;
  for (const std::string& name : comm.stats().communicators()) text += name + "\n";
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<double> length{static_cast<double>(text.size())}, lengths(p);
  comm.allgatherv(length, lengths, std::vector<std::size_t>(p, 1));
  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (double l : lengths) {
    counts.push_back(static_cast<std::size_t>(l));
    total += counts.back();
  }
  std::vector<double> send(text.begin(), text.end());
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<unsigned char>(text[i]);
  std::vector<double> all(comm.rank() == root ? total : 0);
  comm.gatherv(send, all, counts, root);
  std::vector<std::vector<std::string>> out;
  if (comm.rank() != root) return out;
  std::size_t offset = 0;
  for (std::size_t r = 0; r < p; ++r) {
    out.emplace_back();
    std::string name;
    for (std::size_t i = 0; i < counts[r]; ++i) {
      const char c = static_cast<char>(static_cast<unsigned char>(all[offset + i]));
      if (c == '\n') {
        out.back().push_back(name);
        name.clear();
      } else {
        name.push_back(c);
      }
    }
    offset += counts[r];
  }
  return out;
}

}  // namespace distmm
