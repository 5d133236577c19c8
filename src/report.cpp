#include "distmm/report.hpp"

#include <algorithm>

#include "distmm/blas.hpp"
#include "distmm/sharding.hpp"

namespace distmm {
namespace {

// The figures of counters `c` of a rank holding `persistent` and at most `peak` parameter
// bytes, whose multiplies take `rows` rows of A.
RankFigures figures(int rank, const OpCounters& c, std::uint64_t persistent, std::uint64_t peak,
                    std::uint64_t rows, std::size_t element_bytes) {
  RankFigures f;
  f.rank = rank;
  f.a_rows = rows;
  f.param_elements = persistent / element_bytes;
  f.bytes_sent = c.bytes_sent;
  f.bytes_received = c.bytes_received;
  f.messages_sent = c.messages_sent;
  f.messages_received = c.messages_received;
  f.persistent_param_bytes = persistent;
  f.peak_param_bytes = peak;
  return f;
}

}  // namespace

RankFigures planned(const DryRun& run, int rank, std::size_t element_bytes) {
  const DryRank& r = run.ranks.at(static_cast<std::size_t>(rank));
  std::uint64_t rows = 0;
  for (EventStream::Cursor e(r.events); !e.done(); ++e) {
    if (e->op == OpKind::compute) {
      rows = e->rows;
      break;
    }
  }
  return figures(rank, r.communication, r.persistent_param_bytes, r.peak_param_bytes, rows,
                 element_bytes);
}

RankFigures measured(const Communicator& comm, std::size_t element_bytes) {
  const RankStats& s = comm.stats();
  const OpCounters c = s.total_communication();
  std::uint64_t rows = 0;
  for (const TraceEvent& e : s.events()) {
    if (e.op == OpKind::compute) {
      rows = e.rows;
      break;
    }
  }
  RankFigures f = figures(comm.rank(), c, s.persistent_param_bytes(), s.peak_param_bytes(), rows,
                          element_bytes);
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
