#include "distmm/mpi_session.hpp"
#include "distmm/mpi_comm.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <boost/mpi/communicator.hpp>
#include <boost/mpi/datatype.hpp>
#include <boost/mpi/environment.hpp>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "columns.hpp"
#include "distmm/error.hpp"
#include "distmm/memory.hpp"
#include "mpi/chain_reduce.hpp"
#include "mpi/failure_channel.hpp"

namespace distmm {
namespace {

MPI_Datatype mpi_type(DataType t) {
  return t == DataType::f64 ? boost::mpi::get_mpi_datatype<double>()
                            : boost::mpi::get_mpi_datatype<float>();
}

// Tag of the point-to-point messages that carry oversized collectives (on their own
// communicator, so they never meet the caller's messages).
constexpr int kCollectiveTag = 1;
constexpr int kChainTag = 2;    // chain_reduce_sum's segments, on the large communicator
constexpr int kColumnsTag = 3;  // the pieces of scatterv_columns and gatherv_columns, there too
// A columns call's piece. 64 KiB and 256 KiB did alike warm and cold; 1 MiB slots cost a cold
// execution their first use (grid 2x1x2, 874 x 4145 x 83, 4 ranks: 30-36 ms cold, 41-51).
constexpr std::size_t kColumnsPieceBytes = 256 << 10;
// A reduce that polls goes by chain_reduce_sum from this size (below, MPI_Ireduce's latency).
constexpr std::size_t kChainMinBytes = 1 << 20;

// The pieces of a columns call's `columns` columns `rows` long, as f(first, n): whole
// columns, about kColumnsPieceBytes each, one column at least. Root and member cut alike.
template <typename F>
void for_column_pieces(std::size_t columns, std::size_t rows, DataType t, F&& f) {
  const std::size_t per = std::max<std::size_t>(1, kColumnsPieceBytes / (rows * size_of(t)));
  for (std::size_t c = 0; c < columns; c += per) f(c, std::min(per, columns - c));
}
// A member's pieces (its own `columns`, from or to the root), and the root's (every other
// member's, in rank order), each as f(rank, first column, columns): first counts in the
// member's block, or in the root's matrix.
auto own_pieces(std::size_t columns, std::size_t rows, DataType t, int root) {
  return [=](auto&& f) {
    for_column_pieces(columns, rows, t, [&](std::size_t at, std::size_t n) { f(root, at, n); });
  };
}
auto root_pieces(std::span<const std::size_t> counts, std::size_t rows, DataType t, int root) {
  return [=](auto&& f) {
    std::size_t first = 0;
    for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
      const std::size_t columns = counts[static_cast<std::size_t>(r)];
      if (r != root) {
        for_column_pieces(columns, rows, t,
                          [&](std::size_t at, std::size_t n) { f(r, first + at, n); });
      }
      first += columns;
    }
  };
}
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const MpiOptions& options)
      : MpiCommunicator(boost::mpi::communicator(MPI_COMM_WORLD, boost::mpi::comm_duplicate),
                        boost::mpi::communicator(MPI_COMM_WORLD, boost::mpi::comm_duplicate),
                        options) {}

  // Takes over two communicators over the same ranks: one for the caller's calls, one for the
  // messages of oversized collectives. `channel`: the one of the communicator this one was
  // split from (else, with hear_failures, its own).
  MpiCommunicator(boost::mpi::communicator comm, boost::mpi::communicator large,
                  const MpiOptions& options,
                  std::shared_ptr<mpi_detail::FailureChannel> channel = nullptr)
      : comm_(std::move(comm)),
        large_(std::move(large)),
        rank_(comm_.rank()),
        size_(comm_.size()),
        options_(options),
        channel_(std::move(channel)) {
    MPI_Comm_set_errhandler(MPI_Comm(comm_), MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_Comm(large_), MPI_ERRORS_RETURN);
    options_.chunk_limit = std::clamp<std::size_t>(options_.chunk_limit, 1, INT_MAX);
    // This communicator's ranks as ranks of MPI_COMM_WORLD.
    MPI_Group group, world;
    MPI_Comm_group(MPI_Comm(comm_), &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> mine(static_cast<std::size_t>(size_));
    std::iota(mine.begin(), mine.end(), 0);
    world_ranks_.resize(mine.size());
    MPI_Group_translate_ranks(group, size_, mine.data(), world, world_ranks_.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    if (options_.hear_failures && !channel_) {
      channel_ = std::make_shared<mpi_detail::FailureChannel>(raw(), world_ranks_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<int> world_ranks() const override { return world_ranks_; }
  std::string backend() const override { return "mpi"; }
  std::string host() const override {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_Get_processor_name(name, &length);
    return std::string(name, static_cast<std::size_t>(length));
  }

 protected:
  void do_barrier() override {
    begin_collective("barrier");
    call([&](MPI_Request* r) { return r ? MPI_Ibarrier(raw(), r) : MPI_Barrier(raw()); });
  }

  std::unique_ptr<Communicator> do_split(int color, int key) override {
    begin_collective("split(color=" + std::to_string(color) + ", key=" + std::to_string(key) + ")");
    // Every rank's arrival first, under the --timeout bound (MPI_Comm_split has no
    // non-blocking form); then the splits, which no rank can be late for.
    std::vector<int> mine{color, key}, all(2 * static_cast<std::size_t>(size_));
    try {
      call([&](MPI_Request* r) {
        return r ? MPI_Iallgather(mine.data(), 2, MPI_INT, all.data(), 2, MPI_INT, raw(), r)
                 : MPI_Allgather(mine.data(), 2, MPI_INT, all.data(), 2, MPI_INT, raw());
      });
    } catch (...) {
      // An abandoned gather may still write into `all` (MPI cannot cancel it): both buffers
      // are kept for the life of the process (a freed one was written into, and the heap broke).
      (void)new std::vector<int>(std::move(mine));
      (void)new std::vector<int>(std::move(all));
      throw;
    }
    const int c = color == kNoColor ? MPI_UNDEFINED : color;
    MPI_Comm comm = MPI_COMM_NULL, large = MPI_COMM_NULL;
    check(MPI_Comm_split(raw(), c, key, &comm));
    check(MPI_Comm_split(large_raw(), c, key, &large));
    if (comm == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(
        boost::mpi::communicator(comm, boost::mpi::comm_take_ownership),
        boost::mpi::communicator(large, boost::mpi::comm_take_ownership), options_, channel_);
  }

  void do_send(ConstBuffer data, int dest, int tag) override {
    what_ = "send(dest=" + std::to_string(dest) + ", tag=" + std::to_string(tag) + ")";
    send_pieces(data, dest, tag, raw());
  }
  void do_recv(Buffer data, int source, int tag) override {
    what_ = "recv(source=" + std::to_string(source) + ", tag=" + std::to_string(tag) + ")";
    recv_pieces(data, source, tag, raw());
  }
  void do_sendrecv(ConstBuffer send, int dest, int send_tag, Buffer recv, int source,
                   int recv_tag) override {
    what_ = "sendrecv(dest=" + std::to_string(dest) + ", source=" + std::to_string(source) + ")";
    throw_if_abandoned();
    // Every piece of both directions is posted at once, so neither side can block the other.
    std::vector<MPI_Request> requests;
    std::vector<std::size_t> recv_pieces_at;
    for_pieces(send.count, [&](std::size_t off, int n) {
      requests.emplace_back();
      check(MPI_Isend(at(send, off), n, mpi_type(send.type), dest, send_tag, raw(),
                      &requests.back()));
    });
    const std::size_t first_recv = requests.size();
    for_pieces(recv.count, [&](std::size_t off, int n) {
      requests.emplace_back();
      recv_pieces_at.push_back(static_cast<std::size_t>(n));
      check(MPI_Irecv(at(recv, off), n, mpi_type(recv.type), source, recv_tag, raw(),
                      &requests.back()));
    });
    std::vector<MPI_Status> statuses(requests.size());
    wait_all(requests, statuses);
    for (std::size_t i = 0; i < recv_pieces_at.size(); ++i) {
      check_received(statuses[first_recv + i], recv_pieces_at[i], recv.type, source);
    }
  }

  void do_broadcast(Buffer data, int root) override {
    begin_collective("broadcast(root=" + std::to_string(root) + ")");
    for_pieces(data.count, [&](std::size_t off, int n) {
      call([&](MPI_Request* r) {
        return r ? MPI_Ibcast(at(data, off), n, mpi_type(data.type), root, raw(), r)
                 : MPI_Bcast(at(data, off), n, mpi_type(data.type), root, raw());
      });
    });
  }

  void do_scatterv(ConstBuffer send, std::span<const std::size_t> counts, Buffer recv,
                   int root) override {
    begin_collective("scatterv(root=" + std::to_string(root) + ")");
    // Only the root knows the counts; it tells the others whether the parts fit MPI's ints.
    int small = rank_ == root ? fits(counts) : 0;
    call([&](MPI_Request* r) {
      return r ? MPI_Ibcast(&small, 1, MPI_INT, root, raw(), r)
               : MPI_Bcast(&small, 1, MPI_INT, root, raw());
    });
    if (small) {
      std::vector<int> c, d;
      if (rank_ == root) layout(counts, c, d);
      const int n = static_cast<int>(recv.count);
      call([&](MPI_Request* r) {
        const int* cp = rank_ == root ? c.data() : nullptr;
        const int* dp = rank_ == root ? d.data() : nullptr;
        void* into = recv.in_place ? MPI_IN_PLACE : recv.data;
        return r ? MPI_Iscatterv(send.data, cp, dp, mpi_type(recv.type), into, n,
                                 mpi_type(recv.type), root, raw(), r)
                 : MPI_Scatterv(send.data, cp, dp, mpi_type(recv.type), into, n,
                                mpi_type(recv.type), root, raw());
      });
      return;
    }
    if (rank_ != root) {
      recv_pieces(recv, root, kCollectiveTag, large_raw());
      return;
    }
    std::size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const std::size_t n = counts[static_cast<std::size_t>(r)];
      if (r == root) {
        if (!recv.in_place) copy(recv, 0, ConstBuffer{at(send, off), n, send.type});
      } else {
        send_pieces(ConstBuffer{at(send, off), n, send.type}, r, kCollectiveTag, large_raw());
      }
      off += n;
    }
  }

  void do_gatherv(ConstBuffer send, Buffer recv, std::span<const std::size_t> counts,
                  int root) override {
    begin_collective("gatherv(root=" + std::to_string(root) + ")");
    check_counts(counts);
    if (fits(counts)) {
      std::vector<int> c, d;
      layout(counts, c, d);
      const int n = static_cast<int>(send.count);
      call([&](MPI_Request* r) {
        const void* from = send.in_place ? MPI_IN_PLACE : send.data;
        return r ? MPI_Igatherv(from, n, mpi_type(send.type), recv.data, c.data(), d.data(),
                                mpi_type(send.type), root, raw(), r)
                 : MPI_Gatherv(from, n, mpi_type(send.type), recv.data, c.data(), d.data(),
                               mpi_type(send.type), root, raw());
      });
      return;
    }
    if (rank_ != root) {
      send_pieces(send, root, kCollectiveTag, large_raw());
      return;
    }
    std::size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const std::size_t n = counts[static_cast<std::size_t>(r)];
      Buffer part{at(recv, off), n, recv.type};
      if (r == root) {
        if (!send.in_place) copy(part, 0, send);
      } else {
        recv_pieces(part, r, kCollectiveTag, large_raw());
      }
      off += n;
    }
  }

  // A columns call goes linearly at the root, as Open MPI's scatterv and gatherv do, in pieces
  // of whole columns (about kColumnsPieceBytes) through two staging slots on each side: one
  // piece filled while the one before is in flight. The root packs (or unpacks) a member's
  // columns by tiles (columns_between); a member copies its contiguous part to (or from) its
  // slot. The slots, reused by every call, spare a cold execution the link's first use of
  // the plan's fresh buffers. The root serves the others first and copies its own columns
  // last. Measured: bench/results/columns-20261208/.
  void do_scatterv_columns(ConstBuffer send, RowMajor shape, std::span<const std::size_t> counts,
                           Buffer recv, int root) override {
    begin_collective("scatterv_columns(root=" + std::to_string(root) + ")");
    const std::size_t rows = shape.rows, bytes = size_of(recv.type);
    if (rows == 0) return;
    if (rank_ != root) {
      receive_staged(rows, recv.type, own_pieces(recv.count / rows, rows, recv.type, root),
                     [&](std::size_t first, std::size_t columns, const void* piece) {
                       std::memcpy(at(recv, first * rows), piece, columns * rows * bytes);
                     });
      return;
    }
    check_counts(counts);
    send_staged(rows, recv.type, root_pieces(counts, rows, recv.type, root),
                [&](std::size_t first, std::size_t columns, void* piece) {
                  columns_between(recv.type, shape, first, columns * rows, send.data, piece, true);
                });
    if (!recv.in_place) {
      columns_between(recv.type, shape, own_first(counts, root), recv.count, send.data, recv.data,
                      true);
    }
  }
  void do_gatherv_columns(ConstBuffer send, Buffer recv, RowMajor shape,
                          std::span<const std::size_t> counts, int root) override {
    begin_collective("gatherv_columns(root=" + std::to_string(root) + ")");
    const std::size_t rows = shape.rows, bytes = size_of(send.type);
    if (rows == 0) return;
    if (rank_ != root) {
      send_staged(rows, send.type, own_pieces(send.count / rows, rows, send.type, root),
                  [&](std::size_t first, std::size_t columns, void* piece) {
                    std::memcpy(piece, at(send, first * rows), columns * rows * bytes);
                  });
      return;
    }
    check_counts(counts);
    if (!send.in_place) {
      columns_between(send.type, shape, own_first(counts, root), send.count, send.data, recv.data,
                      false);
    }
    receive_staged(rows, recv.type, root_pieces(counts, rows, recv.type, root),
                   [&](std::size_t first, std::size_t columns, const void* piece) {
                     columns_between(recv.type, shape, first, columns * rows, piece, recv.data,
                                     false);
                   });
  }

  void do_allgatherv(ConstBuffer send, Buffer recv, std::span<const std::size_t> counts) override {
    begin_collective("allgatherv");
    check_counts(counts);
    if (fits(counts)) {
      std::vector<int> c, d;
      layout(counts, c, d);
      const int n = static_cast<int>(send.count);
      call([&](MPI_Request* r) {
        return r ? MPI_Iallgatherv(send.data, n, mpi_type(send.type), recv.data, c.data(), d.data(),
                                   mpi_type(recv.type), raw(), r)
                 : MPI_Allgatherv(send.data, n, mpi_type(send.type), recv.data, c.data(), d.data(),
                                  mpi_type(recv.type), raw());
      });
      return;
    }
    // Oversized: each rank broadcasts its block, piece by piece.
    std::size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      Buffer part{at(recv, off), counts[static_cast<std::size_t>(r)], recv.type};
      if (r == rank_) copy(part, 0, send);
      for_pieces(part.count, [&](std::size_t o, int n) {
        call([&](MPI_Request* q) {
          return q ? MPI_Ibcast(at(part, o), n, mpi_type(part.type), r, large_raw(), q)
                   : MPI_Bcast(at(part, o), n, mpi_type(part.type), r, large_raw());
        });
      });
      off += part.count;
    }
  }

  void do_allreduce_sum(Buffer data) override {
    begin_collective("allreduce");
    for_pieces(data.count, [&](std::size_t off, int n) {
      call([&](MPI_Request* r) {
        return r ? MPI_Iallreduce(MPI_IN_PLACE, at(data, off), n, mpi_type(data.type), MPI_SUM,
                                  raw(), r)
                 : MPI_Allreduce(MPI_IN_PLACE, at(data, off), n, mpi_type(data.type), MPI_SUM,
                                 raw());
      });
    });
  }

  void do_reduce_sum(Buffer data, int root) override {
    begin_collective("reduce(root=" + std::to_string(root) + ")");
    if (polls() && size_ > 1 && data.count * size_of(data.type) >= kChainMinBytes) {
      throw_if_abandoned();
      mpi_detail::chain_reduce_sum(
          data.data, data.count, data.type, mpi_type(data.type), root, rank_, size_, large_raw(),
          kChainTag, chain_scratch_,
          [&](MPI_Request& r) {
            MPI_Status status;
            wait_all(1, &r, &status);
          },
          [&](int code) { check(code); });
      return;
    }
    for_pieces(data.count, [&](std::size_t off, int n) {
      const bool at_root = rank_ == root;
      const void* in = at_root ? MPI_IN_PLACE : at(data, off);
      void* out = at_root ? at(data, off) : nullptr;
      call([&](MPI_Request* r) {
        return r ? MPI_Ireduce(in, out, n, mpi_type(data.type), MPI_SUM, root, raw(), r)
                 : MPI_Reduce(in, out, n, mpi_type(data.type), MPI_SUM, root, raw());
      });
    });
  }

  void do_reduce_scatter_sum(ConstBuffer send, Buffer recv,
                             std::span<const std::size_t> counts) override {
    begin_collective("reduce_scatter");
    check_counts(counts);
    if (fits(counts)) {
      std::vector<int> c, d;
      layout(counts, c, d);
      // Every rank needs a valid receive pointer even for a zero count.
      double empty = 0;
      void* out = recv.count ? recv.data : &empty;
      call([&](MPI_Request* r) {
        return r ? MPI_Ireduce_scatter(send.data, out, c.data(), mpi_type(send.type), MPI_SUM,
                                       raw(), r)
                 : MPI_Reduce_scatter(send.data, out, c.data(), mpi_type(send.type), MPI_SUM,
                                      raw());
      });
      return;
    }
    // Oversized: block r is reduced onto rank r, piece by piece.
    std::size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const ConstBuffer part{at(send, off), counts[static_cast<std::size_t>(r)], send.type};
      for_pieces(part.count, [&](std::size_t o, int n) {
        void* out = r == rank_ ? at(recv, o) : nullptr;
        call([&](MPI_Request* q) {
          return q ? MPI_Ireduce(at(part, o), out, n, mpi_type(part.type), MPI_SUM, r, large_raw(),
                                 q)
                   : MPI_Reduce(at(part, o), out, n, mpi_type(part.type), MPI_SUM, r, large_raw());
        });
      });
      off += part.count;
    }
  }

 private:
  MPI_Comm raw() const { return MPI_Comm(comm_); }
  MPI_Comm large_raw() const { return MPI_Comm(large_); }

  static void* at(Buffer b, std::size_t elements) {
    return static_cast<unsigned char*>(b.data) + elements * size_of(b.type);
  }
  static const void* at(ConstBuffer b, std::size_t elements) {
    return static_cast<const unsigned char*>(b.data) + elements * size_of(b.type);
  }
  static void copy(Buffer to, std::size_t offset, ConstBuffer from) {
    if (from.count > 0) std::memcpy(at(to, offset), from.data, from.count * size_of(from.type));
  }

  void begin_collective(const std::string& what) {
    what_ = what + " (collective #" + std::to_string(collectives_++) + ")";
  }

  // Calls f(offset, count) for each piece of at most chunk_limit elements; once for n == 0,
  // so an empty message still matches its receive.
  template <typename F>
  void for_pieces(std::size_t n, F&& f) const {
    std::size_t off = 0;
    do {
      const std::size_t piece = std::min(n - off, options_.chunk_limit);
      f(off, static_cast<int>(piece));
      off += piece;
    } while (off < n);
  }

  // True when every count, and every displacement, fits one MPI call.
  int fits(std::span<const std::size_t> counts) const {
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    return total <= options_.chunk_limit ? 1 : 0;
  }

  void check_counts(std::span<const std::size_t> counts) const {
    if (counts.size() != static_cast<std::size_t>(size_)) {
      throw CommError("rank " + std::to_string(rank_) + ": " + what_ + ": " +
                          std::to_string(counts.size()) + " counts for " + std::to_string(size_) +
                          " ranks",
                      rank_, what_);
    }
  }

  void layout(std::span<const std::size_t> counts, std::vector<int>& c, std::vector<int>& d) const {
    check_counts(counts);
    std::size_t offset = 0;
    for (std::size_t n : counts) {
      c.push_back(static_cast<int>(n));
      d.push_back(static_cast<int>(offset));
      offset += n;
    }
  }

  void send_pieces(ConstBuffer data, int dest, int tag, MPI_Comm comm) {
    for_pieces(data.count, [&](std::size_t off, int n) {
      call([&](MPI_Request* r) {
        return r ? MPI_Isend(at(data, off), n, mpi_type(data.type), dest, tag, comm, r)
                 : MPI_Send(at(data, off), n, mpi_type(data.type), dest, tag, comm);
      });
    });
  }

  void recv_pieces(Buffer data, int source, int tag, MPI_Comm comm) {
    for_pieces(data.count, [&](std::size_t off, int n) {
      MPI_Status status;
      call(
          [&](MPI_Request* r) {
            return r ? MPI_Irecv(at(data, off), n, mpi_type(data.type), source, tag, comm, r)
                     : MPI_Recv(at(data, off), n, mpi_type(data.type), source, tag, comm, &status);
          },
          &status);
      check_received(status, static_cast<std::size_t>(n), data.type, source);
    });
  }

  static std::size_t own_first(std::span<const std::size_t> counts, int root) {
    return std::accumulate(counts.begin(), counts.begin() + root, std::size_t{0});
  }
  // The two staging slots of a call whose columns are `rows` long: slot i begins at i times
  // the size returned. Made at construction; grown, before the call's first piece is in
  // flight, where one column is longer than a piece.
  std::size_t staging_slot_bytes(std::size_t rows, DataType t) {
    const std::size_t bytes = std::max(kColumnsPieceBytes, rows * size_of(t));
    if (staging_.size() < 2 * bytes) staging_.resize(2 * bytes);
    return bytes;
  }
  // Each piece filled into a free slot by fill(first, columns, slot) and sent from it while
  // the next is filled.
  template <typename Pieces, typename Fill>
  void send_staged(std::size_t rows, DataType t, Pieces&& pieces, Fill&& fill) {
    const std::size_t slot_bytes = staging_slot_bytes(rows, t);
    std::array<MPI_Request, 2> sent{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    std::size_t k = 0;
    pieces([&](int dest, std::size_t first, std::size_t columns) {
      const std::size_t slot = k++ % 2;
      wait_all(1, &sent[slot], MPI_STATUSES_IGNORE);  // the piece before from this slot
      void* piece = staging_.data() + slot * slot_bytes;
      fill(first, columns, piece);
      send_piece(ConstBuffer{piece, columns * rows, t}, dest, sent[slot]);
    });
    wait_all(2, sent.data(), MPI_STATUSES_IGNORE);
  }
  // Each piece received into a free slot and, once the next is posted, put in its place by
  // drain(first, columns, slot).
  template <typename Pieces, typename Drain>
  void receive_staged(std::size_t rows, DataType t, Pieces&& pieces, Drain&& drain) {
    struct Held {
      MPI_Request request = MPI_REQUEST_NULL;
      int from = 0;
      std::size_t first = 0, columns = 0;
    };
    const std::size_t slot_bytes = staging_slot_bytes(rows, t);
    std::array<Held, 2> held{};
    const auto finish = [&](std::size_t slot) {
      Held& h = held[slot];
      if (h.columns == 0) return;
      const bool posted = h.request != MPI_REQUEST_NULL;
      MPI_Status status;
      wait_all(1, &h.request, &status);
      if (posted) check_received(status, h.columns * rows, t, h.from);
      drain(h.first, h.columns, staging_.data() + slot * slot_bytes);
      h.columns = 0;
    };
    std::size_t k = 0;
    pieces([&](int from, std::size_t first, std::size_t columns) {
      const std::size_t slot = k++ % 2;
      held[slot] = Held{MPI_REQUEST_NULL, from, first, columns};
      recv_piece(Buffer{staging_.data() + slot * slot_bytes, columns * rows, t}, from,
                 held[slot].request);
      finish(1 - slot);  // the piece before, arrived meanwhile
    });
    finish(k % 2);  // the older of the two
    finish((k + 1) % 2);
  }
  // One piece, in flight on `request` when it fits one message; else (only under a lowered
  // chunk limit) in messages of the limit, each waited for, as the other side cuts them.
  void send_piece(ConstBuffer piece, int dest, MPI_Request& request) {
    if (piece.count > options_.chunk_limit) {
      send_pieces(piece, dest, kColumnsTag, large_raw());
      return;
    }
    throw_if_abandoned();
    check(MPI_Isend(piece.data, static_cast<int>(piece.count), mpi_type(piece.type), dest,
                    kColumnsTag, large_raw(), &request));
  }
  void recv_piece(Buffer piece, int source, MPI_Request& request) {
    if (piece.count > options_.chunk_limit) {
      recv_pieces(piece, source, kColumnsTag, large_raw());
      return;
    }
    throw_if_abandoned();
    check(MPI_Irecv(piece.data, static_cast<int>(piece.count), mpi_type(piece.type), source,
                    kColumnsTag, large_raw(), &request));
  }

  // Runs one MPI call: blocking (f(nullptr)) without a timeout, else non-blocking
  // (f(&request)) and waited on with the bound.
  template <typename F>
  void call(F&& f, MPI_Status* status = nullptr) {
    throw_if_abandoned();
    if (!polls()) {
      check(f(nullptr));
      return;
    }
    MPI_Request request = MPI_REQUEST_NULL;  // no allocation per call
    check(f(&request));
    MPI_Status done;
    wait_all(1, &request, &done);
    if (status != nullptr) *status = done;
  }

  void wait_all(std::vector<MPI_Request>& requests, std::vector<MPI_Status>& statuses) {
    wait_all(static_cast<int>(requests.size()), requests.data(), statuses.data());
  }
  void wait_all(int count, MPI_Request* requests, MPI_Status* statuses) {
    if (!polls()) {
      check(MPI_Waitall(count, requests, statuses));
      return;
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
    for (int spins = 0;; ++spins) {
      int done = 0;
      check(MPI_Testall(count, requests, &done, statuses));
      if (done) return;
      throw_if_abandoned();
      if (options_.timeout_s > 0 && std::chrono::steady_clock::now() > deadline) {
        unfinished_ = true;
        throw TimeoutError("rank " + std::to_string(rank_) + ": waited more than " +
                               format_seconds(options_.timeout_s) + " s in " + what_ +
                               " (--timeout)",
                           rank_, what_);
      }
      // Spin briefly for latency, then yield so an idle wait leaves the core to another rank on
      // it. Never sleep: MPI progresses a non-blocking collective (libnbc) only inside
      // MPI_Test, and a 50 us sleep per round halved tp-row's reduce (bench/python_race.py).
      if (spins > 1000) std::this_thread::yield();
    }
  }

  // Waits poll (non-blocking calls tested in a loop) when they are bounded or must hear of a
  // failed rank; otherwise they block in MPI.
  bool polls() const { return options_.timeout_s > 0 || channel_ != nullptr; }

  // Once a rank told its failure (or this one did), calls here throw: a collective the
  // failed rank will never join must not be entered, nor waited on.
  void throw_if_abandoned() {
    if (!channel_) return;
    if (const std::string* mine = channel_->told()) {
      unfinished_ = true;
      throw CommError("rank " + std::to_string(rank_) + ": " + what_ +
                          ": this communicator was abandoned after: " + *mine,
                      rank_, what_);
    }
    const std::string& heard = channel_->heard();
    if (heard.empty()) return;
    unfinished_ = true;
    // Named by its world rank, as the failed one is (a split's rank would say another).
    const int me = world_ranks_.at(static_cast<std::size_t>(rank_));
    throw PeerFailure("rank " + std::to_string(me) + ": " + what_ + " abandoned: " + heard, rank_,
                      what_);
  }

  static std::string format_seconds(double s) {
    std::string text = std::to_string(s);
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
    return text;
  }

  void do_abandon(const std::string& why) override {
    unfinished_ = true;
    if (channel_) channel_->tell(why);
  }
  bool do_abandoned() const override { return unfinished_; }

  void check(int code) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw CommError("rank " + std::to_string(rank_) + ": MPI " + what_ +
                        " failed: " + std::string(text, static_cast<std::size_t>(length)),
                    rank_, what_);
  }

  void check_received(const MPI_Status& status, std::size_t expected, DataType type,
                      int source) const {
    int received = 0;
    MPI_Get_count(&status, mpi_type(type), &received);
    if (static_cast<std::size_t>(received) != expected) {
      throw MismatchError("rank " + std::to_string(rank_) + ": " + what_ + " from rank " +
                              std::to_string(source) + " expected " + std::to_string(expected) +
                              " elements, got " + std::to_string(received),
                          rank_, what_);
    }
  }

  boost::mpi::communicator comm_;
  boost::mpi::communicator large_;
  int rank_;
  int size_;
  std::vector<int> world_ranks_;
  MpiOptions options_;
  std::string what_;  // the call in progress, for messages
  std::uint64_t collectives_ = 0;
  std::shared_ptr<mpi_detail::FailureChannel> channel_;
  std::vector<unsigned char> chain_scratch_;  // chain_reduce_sum's segments in flight
  // Two slots for the pieces of a columns call, touched at construction (in a plan's setup,
  // not its first execution).
  std::vector<unsigned char> staging_ = std::vector<unsigned char>(2 * kColumnsPieceBytes);
  bool unfinished_ = false;  // a wait was given up (abandoned())
};

}  // namespace

struct MpiSession::Impl {
  Impl(int& argc, char**& argv) : env(argc, argv, boost::mpi::threading::funneled) {}
  boost::mpi::environment env;
};

MpiSession::MpiSession(int& argc, char**& argv)
    : impl_((retain_freed_memory(), std::make_unique<Impl>(argc, argv))) {}
MpiSession::~MpiSession() = default;

bool MpiSession::launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

std::unique_ptr<Communicator> MpiSession::world(const MpiOptions& options) const {
  return std::make_unique<MpiCommunicator>(options);
}

std::unique_ptr<Communicator> mpi_communicator(MPI_Comm comm, const MpiOptions& options) {
  return std::make_unique<MpiCommunicator>(
      boost::mpi::communicator(comm, boost::mpi::comm_duplicate),
      boost::mpi::communicator(comm, boost::mpi::comm_duplicate), options);
}

MpiSession::HostMasks MpiSession::host_masks(const std::vector<int>& mine) const {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  HostMasks out;
  int size = 1;
  MPI_Comm_rank(local, &out.local_rank);
  MPI_Comm_size(local, &size);
  // One bitmap of CPUs per rank.
  constexpr int kBits = 1024;
  std::vector<unsigned char> bits(kBits / 8, 0), all(static_cast<std::size_t>(size) * kBits / 8);
  for (int c : mine) {
    if (c >= 0 && c < kBits)
      bits[static_cast<std::size_t>(c / 8)] |= static_cast<unsigned char>(1u << (c % 8));
  }
  MPI_Allgather(bits.data(), kBits / 8, MPI_UNSIGNED_CHAR, all.data(), kBits / 8, MPI_UNSIGNED_CHAR,
                local);
  MPI_Comm_free(&local);
  out.masks.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    for (int c = 0; c < kBits; ++c) {
      if (all[static_cast<std::size_t>(r * kBits / 8 + c / 8)] & (1u << (c % 8))) {
        out.masks[static_cast<std::size_t>(r)].push_back(c);
      }
    }
  }
  return out;
}

int MpiSession::world_rank() const {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int MpiSession::world_size() const {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int MpiSession::agree_max(int code) const {
  int agreed = code;
  MPI_Allreduce(&code, &agreed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return agreed;
}

void MpiSession::abort(int code) const {
  impl_->env.abort(code);
  std::abort();  // not reached: MPI_Abort does not return
}

}  // namespace distmm
