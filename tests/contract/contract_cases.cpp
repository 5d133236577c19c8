#include "contract/contract_cases.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include <numeric>
#include <sstream>
#include <utility>
#include <vector>

#include "distmm/error.hpp"
#include "distmm/report.hpp"
#include "distmm/sharding.hpp"

namespace distmm::testing {
namespace {

// Rank r's i-th element: distinct per rank and index, exact in float.
template <Element T>
T value(int r, std::size_t i) {
  return static_cast<T>(r * 1000 + static_cast<int>(i % 1000));
}

template <Element T>
std::vector<T> values(int r, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(r, i);
  return v;
}

// Uneven counts with zeros: rank r gets (r * 7 + seed) % 4 elements.
std::vector<std::size_t> uneven_counts(int p, int seed) {
  std::vector<std::size_t> c;
  for (int r = 0; r < p; ++r) c.push_back(static_cast<std::size_t>((r * 7 + seed) % 4));
  return c;
}

std::size_t offset_of(const std::vector<std::size_t>& counts, int r) {
  return std::accumulate(counts.begin(), counts.begin() + r, std::size_t{0});
}

// The roots a case tries: every rank up to 8 ranks; beyond, the first two, the middle and the
// last (what a rooted collective can get wrong about its root shows at 8 ranks already, and
// every root of 64 threads under ThreadSanitizer took minutes).
std::vector<int> roots_of(int p) {
  std::vector<int> roots;
  if (p <= 8) {
    for (int r = 0; r < p; ++r) roots.push_back(r);
  } else {
    roots = {0, 1, p / 2, p - 1};
  }
  return roots;
}

// A large message's elements: over MPI 1 Mi (8 MiB of doubles, beyond every eager and
// pipelining threshold of Open MPI's transports); in the simulator, where a message is one
// copy whatever its size, 16 Ki (64 rank threads each checking 1 Mi under ThreadSanitizer
// took 95 s, most of it first touches of the sanitizer's shadow memory).
std::size_t large_count(const Communicator& comm) {
  return comm.backend() == "mpi" ? std::size_t{1} << 20 : std::size_t{1} << 14;
}

template <Element T>
void ring_shift(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  // Message sizes differ per sender (rank s sends s + 1 elements, rank 0 none when p > 1).
  const auto count_of = [&](int s) {
    return static_cast<std::size_t>(p > 1 && s == 0 ? 0 : s + 1);
  };
  const auto out = values<T>(r, count_of(r));
  std::vector<T> in(count_of(prev), T{-1});
  comm.sendrecv(out, next, 5, in, prev, 5);
  EXPECT_EQ(in, values<T>(prev, count_of(prev))) << "rank " << r << " from " << prev;
}

template <Element T>
void send_recv_in_order(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  // Rank 0 sends three messages, alternating tags, to every other rank in turn; each arrives
  // in order and only at a receive with its own tag.
  if (r == 0) {
    for (int dest = 1; dest < p; ++dest) {
      for (int m = 0; m < 3; ++m) {
        const auto out = values<T>(dest * 10 + m, static_cast<std::size_t>(m + 1));
        comm.send(out, dest, m % 2 == 0 ? 1 : 2);
      }
    }
  } else {
    for (int m = 0; m < 3; ++m) {
      std::vector<T> in(static_cast<std::size_t>(m + 1));
      comm.recv(in, 0, m % 2 == 0 ? 1 : 2);
      EXPECT_EQ(in, values<T>(r * 10 + m, in.size())) << "message " << m;
    }
  }
  comm.barrier();
}

template <Element T>
void broadcast_every_root(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (const int root : roots_of(p)) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}}) {
      auto data = r == root ? values<T>(root, n) : std::vector<T>(n, T{-1});
      comm.broadcast(data, root);
      EXPECT_EQ(data, values<T>(root, n)) << "root " << root << " n " << n;
    }
  }
}

template <Element T>
void broadcast_large(Communicator& comm) {
  const std::size_t n = large_count(comm);
  const int root = comm.size() - 1;
  auto data = comm.rank() == root ? values<T>(root, n) : std::vector<T>(n, T{0});
  comm.broadcast(data, root);
  EXPECT_EQ(data, values<T>(root, n));
}

template <Element T>
void scatterv_uneven(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (const int root : roots_of(p)) {
    const auto counts = uneven_counts(p, root);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    // The root's send buffer holds block s (for rank s) at s's offset.
    std::vector<T> send;
    if (r == root) send = values<T>(root, total);
    std::vector<T> recv(counts[static_cast<std::size_t>(r)], T{-1});
    comm.scatterv(send, counts, recv, root);
    const std::size_t off = offset_of(counts, r);
    for (std::size_t i = 0; i < recv.size(); ++i) {
      EXPECT_EQ(recv[i], value<T>(root, off + i)) << "root " << root << " element " << i;
    }
  }
}

template <Element T>
void gatherv_uneven(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (const int root : roots_of(p)) {
    const auto counts = uneven_counts(p, root + 1);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const auto send = values<T>(r, counts[static_cast<std::size_t>(r)]);
    std::vector<T> recv(r == root ? total : 0, T{-1});
    comm.gatherv(send, recv, counts, root);
    if (r != root) continue;
    for (int s = 0; s < p; ++s) {
      const std::size_t off = offset_of(counts, s);
      for (std::size_t i = 0; i < counts[static_cast<std::size_t>(s)]; ++i) {
        EXPECT_EQ(recv[off + i], value<T>(s, i)) << "root " << root << " from rank " << s;
      }
    }
  }
}

// In place at the root (MPI_IN_PLACE): the root's block stays untouched in its own buffer,
// the others' blocks move as in the plain forms, and the counters do not count the root's.
template <Element T>
void scatterv_in_place(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (const int root : roots_of(p)) {
    const auto counts = uneven_counts(p, root + 2);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const std::uint64_t before = comm.stats().total_communication().bytes_sent;
    if (r == root) {
      const auto send = values<T>(root, total);
      comm.scatterv(send, counts, in_place, root);
      EXPECT_EQ(send, values<T>(root, total)) << "the root's buffer is only read";
      EXPECT_EQ(comm.stats().total_communication().bytes_sent - before,
                (total - counts[static_cast<std::size_t>(r)]) * sizeof(T));
    } else {
      std::vector<T> recv(counts[static_cast<std::size_t>(r)], T{-1});
      comm.scatterv(std::vector<T>{}, counts, recv, root);
      const std::size_t off = offset_of(counts, r);
      for (std::size_t i = 0; i < recv.size(); ++i) {
        EXPECT_EQ(recv[i], value<T>(root, off + i)) << "root " << root << " element " << i;
      }
    }
  }
}

template <Element T>
void gatherv_in_place(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (const int root : roots_of(p)) {
    const auto counts = uneven_counts(p, root + 3);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    if (r != root) {
      comm.gatherv(values<T>(r, counts[static_cast<std::size_t>(r)]), std::vector<T>{}, counts,
                   root);
      continue;
    }
    // The root's own block is already in place; everything else is overwritten.
    std::vector<T> recv(total, T{-1});
    const std::size_t mine = offset_of(counts, r);
    for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
      recv[mine + i] = value<T>(r, i);
    }
    comm.gatherv(in_place, recv, counts, root);
    for (int s = 0; s < p; ++s) {
      const std::size_t off = offset_of(counts, s);
      for (std::size_t i = 0; i < counts[static_cast<std::size_t>(s)]; ++i) {
        EXPECT_EQ(recv[off + i], value<T>(s, i)) << "root " << root << " from rank " << s;
      }
    }
  }
}

// Columns of a row-major matrix, dealt to the ranks and gathered back, with uneven counts
// (zeros included), the roots of roots_of(), plain and in place at the root, small and large.
// Element (i, j) of the matrix is value(root, i * width + j); a rank receives its columns column
// after column.
template <Element T>
void columns_scatter_gather(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  // 130 rows and up to 135 columns a rank: blocks larger than the 16 x 64 tiles of the copy,
  // with partial tiles at both edges; up to 600 columns a rank (on up to 4 ranks): several of
  // the MPI backend's pieces of 256 KiB to a rank, and pieces of several ranks in flight;
  // columns of 40000 rows, one longer than a piece (its staging slots grow).
  for (const auto& [rows, scale] :
       {std::pair<std::size_t, std::size_t>{3, 1}, {1, 1}, {130, 45}, {130, 200}, {40000, 1}}) {
    if (rows > 64 && p > 8) continue;  // every root of 64 ranks: 144 M elements checked
    if ((scale > 45 || rows > 1000) && p > 4) continue;
    // The large blocks from the first and the last rank (the small ones from every root):
    // each root of 8 ranks checked 6 M elements, 10 s under ThreadSanitizer.
    const std::vector<int> roots = rows > 64 ? std::vector<int>{0, p - 1} : roots_of(p);
    for (const int root : roots) {
      for (const bool in_place_root : {false, true}) {
        auto counts = uneven_counts(p, root + 4);
        for (auto& c : counts) c *= scale;
        const std::size_t width = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
        const RowMajor shape{rows, width};
        const std::size_t first = offset_of(counts, r), mine = counts[static_cast<std::size_t>(r)];
        const auto matrix = values<T>(root, rows * width);
        std::vector<T> block(rows * mine, T{-1});
        const std::uint64_t before = comm.stats().total_communication().bytes_sent;
        if (r == root && in_place_root) {
          comm.scatterv_columns(matrix, shape, counts, in_place, root);
          EXPECT_EQ(comm.stats().total_communication().bytes_sent - before,
                    (width - mine) * rows * sizeof(T));
        } else {
          comm.scatterv_columns(r == root ? matrix : std::vector<T>{}, shape, counts, block, root);
          for (std::size_t c = 0; c < mine; ++c) {
            for (std::size_t i = 0; i < rows; ++i) {
              EXPECT_EQ(block[c * rows + i], value<T>(root, i * width + first + c))
                  << "root " << root << " column " << first + c << " row " << i;
            }
          }
        }
        // Back: every rank sends its columns (of a matrix of its own values) to the root.
        const auto gathered = values<T>(r, rows * width);
        std::vector<T> own(rows * mine);
        for (std::size_t c = 0; c < mine; ++c) {
          for (std::size_t i = 0; i < rows; ++i)
            own[c * rows + i] = gathered[i * width + first + c];
        }
        if (r != root) {
          comm.gatherv_columns(own, std::vector<T>{}, shape, counts, root);
          continue;
        }
        std::vector<T> result(rows * width, T{-1});
        if (in_place_root) {
          for (std::size_t c = 0; c < mine; ++c) {
            for (std::size_t i = 0; i < rows; ++i) {
              result[i * width + first + c] = gathered[i * width + first + c];
            }
          }
          comm.gatherv_columns(in_place, result, shape, counts, root);
        } else {
          comm.gatherv_columns(own, result, shape, counts, root);
        }
        for (int s = 0; s < p; ++s) {
          const std::size_t off = offset_of(counts, s);
          for (std::size_t c = 0; c < counts[static_cast<std::size_t>(s)]; ++c) {
            for (std::size_t i = 0; i < rows; ++i) {
              EXPECT_EQ(result[i * width + off + c], value<T>(s, i * width + off + c))
                  << "root " << root << " column " << off + c << " from rank " << s;
            }
          }
        }
      }
    }
  }
}

// Only the root may use the in-place forms; a non-root caller is told so before anything moves.
void in_place_off_root_rejected(Communicator& comm) {
  if (comm.size() < 2 || comm.rank() != 1) return;
  std::vector<double> data(static_cast<std::size_t>(comm.size()), 1.0);
  const std::vector<std::size_t> counts(static_cast<std::size_t>(comm.size()), 1);
  EXPECT_THROW(comm.scatterv(data, counts, in_place, 0), CommError);
  EXPECT_THROW(comm.gatherv(in_place, data, counts, 0), CommError);
}

template <Element T>
void allgatherv_uneven(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (int seed : {0, 3}) {
    const auto counts = uneven_counts(p, seed);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const auto send = values<T>(r, counts[static_cast<std::size_t>(r)]);
    std::vector<T> recv(total, T{-1});
    comm.allgatherv(send, recv, counts);
    for (int s = 0; s < p; ++s) {
      const std::size_t off = offset_of(counts, s);
      for (std::size_t i = 0; i < counts[static_cast<std::size_t>(s)]; ++i) {
        EXPECT_EQ(recv[off + i], value<T>(s, i)) << "seed " << seed << " from rank " << s;
      }
    }
  }
}

// Sum over ranks of value(s, i).
template <Element T>
T sum_of_values(int p, std::size_t i) {
  T sum = 0;
  for (int s = 0; s < p; ++s) sum += value<T>(s, i);
  return sum;
}

template <Element T>
void allreduce_sum(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{5000}}) {
    auto data = values<T>(r, n);
    comm.allreduce_sum(data);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (data[i] != sum_of_values<T>(p, i)) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "n " << n;
  }
}

// Sum to each root in turn, in place there; the other ranks' data is only read; counters as a
// mirrored broadcast (each other rank sends its data once, the root receives P-1 of them).
// The large size, not a whole number of segments, takes MPI's polled path (chain_reduce.hpp).
template <Element T>
void reduce_sum_to_every_root(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (const int root : roots_of(p)) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{5000},
                          large_count(comm) + 3}) {
      auto data = values<T>(r, n);
      const OpCounters before = comm.stats().total_communication();
      comm.reduce_sum(data, root);
      const OpCounters after = comm.stats().total_communication();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (data[i] != (r == root ? sum_of_values<T>(p, i) : value<T>(r, i))) ++wrong;
      }
      EXPECT_EQ(wrong, 0u) << "root " << root << " n " << n;
      const std::uint64_t size = n * sizeof(T), others = static_cast<std::uint64_t>(p - 1);
      EXPECT_EQ(after.bytes_sent - before.bytes_sent, r == root ? 0 : size);
      EXPECT_EQ(after.bytes_received - before.bytes_received, r == root ? others * size : 0);
    }
  }
}

template <Element T>
void reduce_scatter_uneven(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  for (int seed : {1, 2}) {
    const auto counts = uneven_counts(p, seed);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const auto send = values<T>(r, total);
    std::vector<T> recv(counts[static_cast<std::size_t>(r)], T{-1});
    comm.reduce_scatter_sum(send, recv, counts);
    const std::size_t off = offset_of(counts, r);
    for (std::size_t i = 0; i < recv.size(); ++i) {
      EXPECT_EQ(recv[i], sum_of_values<T>(p, off + i)) << "seed " << seed << " element " << i;
    }
  }
}

void rank_and_size(Communicator& comm) {
  EXPECT_GE(comm.size(), 1);
  EXPECT_GE(comm.rank(), 0);
  EXPECT_LT(comm.rank(), comm.size());
  // Every rank reports a distinct rank: the gathered ranks are 0..p-1.
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<double> mine{static_cast<double>(comm.rank())};
  std::vector<double> all(p, -1);
  comm.allgatherv(mine, all, std::vector<std::size_t>(p, 1));
  for (std::size_t i = 0; i < p; ++i) EXPECT_EQ(all[i], static_cast<double>(i));
}

void sharded_roundtrip(Communicator& comm) {
  // Scatter balanced shards of 10 items from rank 0 and gather them back, as strategies do.
  const int p = comm.size();
  const auto counts = shard_counts(10, p);
  std::vector<double> all = comm.rank() == 0 ? values<double>(0, 10) : std::vector<double>{};
  std::vector<double> mine(counts[static_cast<std::size_t>(comm.rank())]);
  comm.scatterv(all, counts, mine, 0);
  std::vector<double> back(comm.rank() == 0 ? 10 : 0);
  comm.gatherv(mine, back, counts, 0);
  if (comm.rank() == 0) {
    EXPECT_EQ(back, values<double>(0, 10));
  }
}

// MPI_Comm_split's semantics: groups by color, ranks ordered by key and then by rank, a
// rank with kNoColor gets no communicator; the new communicator works, knows its world
// ranks, and its calls count on the rank's shared counters.
void split_follows_mpi_semantics(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  const std::vector<int> world = comm.world_ranks();
  ASSERT_EQ(world.size(), static_cast<std::size_t>(p));
  // Colors: rank % 3, except that the last rank joins nothing (when there are 2 or more).
  const bool out = p > 1 && r == p - 1;
  const int color = out ? kNoColor : r % 3;
  const std::uint64_t calls = comm.stats().total_communication().calls;
  // Keys reverse the order within each color.
  std::unique_ptr<Communicator> sub = comm.split(color, p - r);
  EXPECT_EQ(comm.stats().op(OpKind::split).calls >= 1, true);
  EXPECT_EQ(comm.stats().total_communication().calls, calls + 1);
  if (out) {
    EXPECT_EQ(sub, nullptr);
    comm.barrier();
    return;
  }
  ASSERT_NE(sub, nullptr);
  std::vector<int> members;  // this color's ranks here, in key order (descending rank)
  for (int q = p - 1; q >= 0; --q) {
    if (q % 3 == color && !(p > 1 && q == p - 1)) members.push_back(q);
  }
  ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
  const auto at = std::find(members.begin(), members.end(), r) - members.begin();
  EXPECT_EQ(sub->rank(), at);
  std::vector<int> want_world;
  for (int q : members) want_world.push_back(world[static_cast<std::size_t>(q)]);
  EXPECT_EQ(sub->world_ranks(), want_world);
  EXPECT_NE(sub->name().find("ranks "), std::string::npos) << sub->name();
  // A collective on it sums this group's ranks only, and counts on the shared counters.
  const std::uint64_t before = comm.stats().op(OpKind::allreduce).calls;
  std::vector<double> sum{static_cast<double>(r)};
  sub->allreduce_sum(sum);
  double want = 0;
  for (int q : members) want += q;
  EXPECT_EQ(sum[0], want);
  EXPECT_EQ(comm.stats().op(OpKind::allreduce).calls, before + 1);
  comm.barrier();
}

// A rank's trace names the communicator of each call; gathered, rank 0 sees every rank's.
void trace_names_the_communicator(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  const auto half = comm.split(r % 2, 0);
  std::vector<double> v{1.0};
  half->allreduce_sum(v);
  const TraceEvent last = comm.stats().events().back();
  EXPECT_EQ(last.op, OpKind::allreduce);
  ASSERT_LT(static_cast<std::size_t>(last.comm), comm.stats().communicators().size());
  EXPECT_EQ(comm.stats().communicators()[static_cast<std::size_t>(last.comm)], half->name());
  const auto events = gather_events(comm, comm.stats().events(), 0);
  const auto names = gather_communicators(comm, 0);
  if (r != 0) return;
  ASSERT_EQ(names.size(), static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) {
    const TraceEvent& e = events[static_cast<std::size_t>(q)].back();
    const std::string& name =
        names[static_cast<std::size_t>(q)].at(static_cast<std::size_t>(e.comm));
    // Rank q's half: the world ranks of q's parity, in order.
    std::ostringstream want_text;
    want_text << "ranks ";
    for (int o = q % 2; o < p; o += 2) want_text << (o == q % 2 ? "" : ",") << o;
    const std::string parent = comm.name();
    want_text << " of " << parent;
    const std::string want = want_text.str();
    if (comm.name() == "world") {
      EXPECT_EQ(name, want) << "rank " << q;
    } else {
      EXPECT_NE(name.find(" of " + parent), std::string::npos) << name;
    }
  }
}

constexpr ContractCase kContractCases[] = {
    {"SplitFollowsMpiSemantics", split_follows_mpi_semantics},
    {"TraceNamesTheCommunicator", trace_names_the_communicator},
    {"RankAndSize", rank_and_size},
    {"RingShiftDouble", ring_shift<double>},
    {"RingShiftFloat", ring_shift<float>},
    {"SendRecvInOrderDouble", send_recv_in_order<double>},
    {"SendRecvInOrderFloat", send_recv_in_order<float>},
    {"BroadcastEveryRootDouble", broadcast_every_root<double>},
    {"BroadcastEveryRootFloat", broadcast_every_root<float>},
    {"BroadcastLargeDouble", broadcast_large<double>},
    {"ScattervUnevenDouble", scatterv_uneven<double>},
    {"ScattervUnevenFloat", scatterv_uneven<float>},
    {"GathervUnevenDouble", gatherv_uneven<double>},
    {"GathervUnevenFloat", gatherv_uneven<float>},
    {"ScattervInPlaceDouble", scatterv_in_place<double>},
    {"ScattervInPlaceFloat", scatterv_in_place<float>},
    {"GathervInPlaceDouble", gatherv_in_place<double>},
    {"GathervInPlaceFloat", gatherv_in_place<float>},
    {"InPlaceOffRootRejected", in_place_off_root_rejected},
    {"ColumnsScatterGatherDouble", columns_scatter_gather<double>},
    {"ColumnsScatterGatherFloat", columns_scatter_gather<float>},
    {"AllgathervUnevenDouble", allgatherv_uneven<double>},
    {"AllgathervUnevenFloat", allgatherv_uneven<float>},
    {"AllreduceSumDouble", allreduce_sum<double>},
    {"AllreduceSumFloat", allreduce_sum<float>},
    {"ReduceSumToEveryRootDouble", reduce_sum_to_every_root<double>},
    {"ReduceSumToEveryRootFloat", reduce_sum_to_every_root<float>},
    {"ReduceScatterUnevenDouble", reduce_scatter_uneven<double>},
    {"ReduceScatterUnevenFloat", reduce_scatter_uneven<float>},
    {"ShardedRoundtrip", sharded_roundtrip},
};

}  // namespace

void run_on_subcommunicators(Communicator& world, const ContractCase& c) {
  const int p = world.size(), r = world.rank();
  // Two groups, even and odd ranks, in reverse order: each runs the case at once.
  {
    const std::unique_ptr<Communicator> half = world.split(r % 2, p - r);
    ASSERT_NE(half, nullptr);
    c.run(*half);
  }
  // Groups of one rank.
  {
    const std::unique_ptr<Communicator> alone = world.split(r, 0);
    ASSERT_NE(alone, nullptr);
    EXPECT_EQ(alone->size(), 1);
    c.run(*alone);
  }
  world.barrier();
}

std::span<const ContractCase> contract_cases() {
  return kContractCases;
}

}  // namespace distmm::testing
