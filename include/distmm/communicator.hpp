#pragma once
// The message-passing interface every strategy is written against.
//
// Contract (as MPI's): every rank of a communicator calls the same collectives in the same
// order, with the same root and agreeing counts. Point-to-point messages from one source
// with one tag are received in the order they were sent (non-overtaking). A blocking call
// returns when this rank's buffers may be reused. Counts are element counts, may differ
// between ranks and may be zero. A receive buffer of a v-collective holds the ranks' blocks
// one after another in rank order (displacement of rank r = counts[0] + ... + counts[r-1]).
// Send and receive buffers of one call must not overlap.
//
// Each collective, for 3 ranks (a/b/c: data of rank 0/1/2; * = undefined or unused):
//
//   broadcast(root=0)         before  r0:[a]      r1:[*]      r2:[*]
//                             after   r0:[a]      r1:[a]      r2:[a]
//   scatterv(root=0)          before  r0:[a0 a1a1 a2]  (send buffer, counts {1,2,1}, root only)
//                             after   r0:[a0]     r1:[a1a1]   r2:[a2]
//   gatherv(root=0)           before  r0:[a]      r1:[bb]     r2:[c]
//                             after   r0:[a bb c] (receive buffer, root only)
//   allgatherv                before  r0:[a]      r1:[bb]     r2:[c]
//                             after   r0:[a bb c] r1:[a bb c] r2:[a bb c]
//   allreduce (sum, in place) before  r0:[x]      r1:[y]      r2:[z]
//                             after   r0:[x+y+z]  r1:[x+y+z]  r2:[x+y+z]
//   reduce (sum, root=0)      before  r0:[x]      r1:[y]      r2:[z]
//                             after   r0:[x+y+z]  r1:[y]      r2:[z]      (in place at the root)
//   scatterv_columns(root=0)  the root's send buffer is a row-major matrix; counts count its
//                             columns (here {1,2,1} of a 2 x 4 matrix [a b c d; e f g h]):
//                             after   r0:[a e]    r1:[b f c g]   r2:[d h]   (column after column)
//   gatherv_columns(root=0)   the reverse: rank r's columns land in their place in the root's
//                             row-major matrix
//   reduce_scatter (sum)      before  r0:[a0 a1a1 a2]  r1:[b0 b1b1 b2]  r2:[c0 c1c1 c2]
//                             after   r0:[a0+b0+c0] r1:[a1+b1+c1 (2 elements)] r2:[a2+b2+c2]
//
// Errors are exceptions derived from distmm::Error carrying this rank and the operation.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "distmm/fault.hpp"
#include "distmm/stats.hpp"

namespace distmm {

enum class DataType { f32, f64 };

template <typename T>
concept Element = std::is_same_v<T, double> || std::is_same_v<T, float>;

template <Element T>
constexpr DataType data_type_of() {
  return std::is_same_v<T, double> ? DataType::f64 : DataType::f32;
}

constexpr std::size_t size_of(DataType t) {
  return t == DataType::f64 ? 8 : 4;
}
const char* name_of(DataType t);

template <typename R>
using ElementOf = std::remove_cvref_t<std::ranges::range_reference_t<R>>;

// A contiguous range of double or float, read-only or writable.
template <typename R>
concept InputElements =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && Element<ElementOf<R>>;
template <typename R>
concept OutputElements = InputElements<R> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

// An untyped view of a typed buffer, as passed to a backend. `in_place` marks the root's own
// block of an in-place scatterv or gatherv: it aliases the root's block of the other buffer
// and is neither copied nor sent (MPI_IN_PLACE).
struct Buffer {
  void* data;
  std::size_t count;
  DataType type;
  bool in_place = false;
};
struct ConstBuffer {
  const void* data;
  std::size_t count;
  DataType type;
  bool in_place = false;
};

// The root's buffer of scatterv_columns and gatherv_columns: a row-major matrix of `rows` x
// `width` elements (element (i, j) at i * width + j). Its columns are what the counts count.
struct RowMajor {
  std::size_t rows = 0, width = 0;
  bool operator==(const RowMajor&) const = default;
};

// The color of a rank that joins no communicator in Communicator::split (MPI_UNDEFINED).
inline constexpr int kNoColor = -1;

// Tag of the in-place forms of scatterv and gatherv (MPI_IN_PLACE at the root).
struct InPlace {
  explicit InPlace() = default;
};
inline constexpr InPlace in_place{};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "simulator" or "mpi".
  virtual std::string backend() const = 0;
  // The host this rank runs on (MPI_Get_processor_name; the machine's name in the simulator).
  virtual std::string host() const = 0;

  // The ranks of the top-level communicator (the world of run_simulated, or MPI's world)
  // that this communicator's ranks are, in this communicator's rank order.
  virtual std::vector<int> world_ranks() const = 0;
  // "world", or "ranks 0,2 of world" for a communicator split from it: for messages.
  std::string name() const;

  // Splits this communicator as MPI_Comm_split does: the ranks passing the same color (>= 0)
  // form a new communicator, ranked by `key` and then by their rank here; a rank passing
  // kNoColor gets nullptr. Collective over this communicator. The new communicator shares
  // this rank's counters, trace and armed fault (a rank's figures cover all its
  // communicators); failures, deadlocks and timeouts on either reach the ranks of both. It
  // must not outlive this one.
  std::unique_ptr<Communicator> split(int color, int key);
  // As split(color, key), where every rank knows every rank's color and key (a mesh, a
  // grid): `of(r)` gives rank r's. Strategies split this way, so that a dry run
  // (dry_run.hpp), which sees one rank at a time, knows each communicator's members.
  struct ColorKey {
    int color = kNoColor, key = 0;
  };
  std::unique_ptr<Communicator> split(const std::function<ColorKey(int rank)>& of);

  // Arms a fault (see fault.hpp) on this rank (crash:R and skip:R name world ranks): from
  // now on, calls on this communicator and on those split from it crash, skip or are delayed
  // as the plan says.
  void inject(const FaultPlan& plan);

  // This rank gives up after a failure (`why`, its message): ranks waiting on this
  // communicator or one split from it leave with PeerFailure naming this rank, where the
  // backend can tell them (MPI with MpiOptions::hear_failures; the simulator releases them
  // by itself, and ignores this). Calls here throw afterwards.
  void abandon(const std::string& why) { do_abandon(why); }
  // Whether a wait on this communicator was given up with its calls unfinished (a failed
  // peer, --timeout) or this rank abandoned it: MPI cannot cancel a collective, which may
  // still write into its buffers later, so they must outlive it (plans keep theirs:
  // plan.hpp). False where the backend cannot leave a call unfinished.
  bool abandoned() const { return do_abandoned(); }

  // What this rank sent, received, held and spent time on (see stats.hpp).
  RankStats& stats() { return ctx_->stats; }
  const RankStats& stats() const { return ctx_->stats; }

  // Buffers are any contiguous ranges of double or float: std::vector, std::span, arma::Mat.

  // Blocking send of all of `data` to rank `dest`.
  template <InputElements R>
  void send(const R& data, int dest, int tag) {
    const ConstBuffer b = cbuf(data);
    counted(OpKind::send, -1, point_to_point(b.count, b.type, dest, true),
            [&] { do_send(b, dest, tag); });
  }
  // Blocking receive from rank `source`; the message must hold exactly data.size() elements.
  template <OutputElements R>
  void recv(R&& data, int source, int tag) {
    const Buffer b = buf(data);
    counted(OpKind::recv, -1, point_to_point(b.count, b.type, source, false),
            [&] { do_recv(b, source, tag); });
  }
  // Sends to `dest` and receives from `source` at once, so a ring shift cannot deadlock.
  template <InputElements S, OutputElements R>
  void sendrecv(const S& send_data, int dest, int send_tag, R&& recv_data, int source,
                int recv_tag) {
    const ConstBuffer s = cbuf(send_data);
    const Buffer r = buf(recv_data);
    Volume v = point_to_point(s.count, s.type, dest, true) +
               point_to_point(r.count, r.type, source, false);
    v.peer_to = dest;
    v.peer_from = source;
    counted(OpKind::sendrecv, -1, v, [&] { do_sendrecv(s, dest, send_tag, r, source, recv_tag); });
  }

  void barrier() {
    counted(OpKind::barrier, -1, {}, [&] { do_barrier(); });
  }

  // `data` is the source on `root` and the destination elsewhere; same size on every rank.
  template <OutputElements R>
  void broadcast(R&& data, int root) {
    const Buffer b = buf(data);
    counted(OpKind::broadcast, root, broadcast_volume(b.count, b.type, root),
            [&] { do_broadcast(b, root); });
  }
  // `send` (sum of `counts`) and `counts` (size() entries) are read on `root` only;
  // `recv` has counts[rank()] elements on every rank.
  template <InputElements S, OutputElements R>
  void scatterv(const S& send, std::span<const std::size_t> counts, R&& recv, int root) {
    const ConstBuffer s = cbuf(send);
    const Buffer r = buf(recv);
    counted(OpKind::scatterv, root, scatterv_volume(counts, r.count, r.type, root),
            [&] { do_scatterv(s, counts, r, root); });
  }
  // At the root only, in place: the root's own block stays where it is in `send` and is not
  // copied (the other ranks call the form above).
  template <InputElements S>
  void scatterv(const S& send, std::span<const std::size_t> counts, InPlace, int root) {
    const ConstBuffer s = cbuf(send);
    const std::size_t at = own_offset(counts, root, "scatterv");
    const Buffer r{const_cast<unsigned char*>(static_cast<const unsigned char*>(s.data)) +
                       at * size_of(s.type),
                   counts[static_cast<std::size_t>(rank())], s.type, true};
    counted(OpKind::scatterv, root, scatterv_volume(counts, r.count, r.type, root),
            [&] { do_scatterv(s, counts, r, root); });
  }
  // Every rank sends `send` (counts[rank()] elements); `recv` (sum of counts) is written on
  // `root` only. `counts` must agree on every rank.
  template <InputElements S, OutputElements R>
  void gatherv(const S& send, R&& recv, std::span<const std::size_t> counts, int root) {
    const ConstBuffer s = cbuf(send);
    const Buffer r = buf(recv);
    counted(OpKind::gatherv, root, gatherv_volume(counts, s.count, s.type, root),
            [&] { do_gatherv(s, r, counts, root); });
  }
  // At the root only, in place: the root's own block is already at its place in `recv` (the
  // other ranks call the form above).
  template <OutputElements R>
  void gatherv(InPlace, R&& recv, std::span<const std::size_t> counts, int root) {
    const Buffer r = buf(recv);
    const std::size_t at = own_offset(counts, root, "gatherv");
    const ConstBuffer s{static_cast<const unsigned char*>(r.data) + at * size_of(r.type),
                        counts[static_cast<std::size_t>(rank())], r.type, true};
    counted(OpKind::gatherv, root, gatherv_volume(counts, s.count, s.type, root),
            [&] { do_gatherv(s, r, counts, root); });
  }
  // Blocks of columns of a row-major matrix: a rank's columns of a row-major A or C, a rank's
  // rows of a column-major B (MPI: the root packs each rank's columns by tiles and sends them
  // in pieces; the simulator: each rank copies its own). Every rank passes the same `shape`;
  // `counts` count columns (summing to shape.width) and, as in scatterv, are read on the root
  // only. Rank r receives its counts[r] columns in `recv`, column after column (shape.rows x
  // counts[r], column-major).
  template <InputElements S, OutputElements R>
  void scatterv_columns(const S& send, RowMajor shape, std::span<const std::size_t> counts,
                        R&& recv, int root) {
    const ConstBuffer s = cbuf(send);
    const Buffer r = buf(recv);
    counted(OpKind::scatterv, root,
            columns(scatterv_volume(counts, r.count, r.type, root, shape.rows), shape, r.type,
                    counts, root, r.in_place),
            [&] { do_scatterv_columns(s, shape, counts, r, root); });
  }
  // At the root only, in place: the root's own columns stay in `send`.
  template <InputElements S>
  void scatterv_columns(const S& send, RowMajor shape, std::span<const std::size_t> counts, InPlace,
                        int root) {
    const ConstBuffer s = cbuf(send);
    (void)own_offset(counts, root, "scatterv_columns");
    const Buffer r{const_cast<void*>(s.data), counts[static_cast<std::size_t>(rank())] * shape.rows,
                   s.type, true};
    counted(OpKind::scatterv, root,
            columns(scatterv_volume(counts, r.count, r.type, root, shape.rows), shape, r.type,
                    counts, root, r.in_place),
            [&] { do_scatterv_columns(s, shape, counts, r, root); });
  }
  // The reverse of scatterv_columns: rank r's `send` (shape.rows x counts[r], column-major)
  // becomes columns of the root's row-major `recv`. `counts` agree on every rank.
  template <InputElements S, OutputElements R>
  void gatherv_columns(const S& send, R&& recv, RowMajor shape, std::span<const std::size_t> counts,
                       int root) {
    const ConstBuffer s = cbuf(send);
    const Buffer r = buf(recv);
    counted(OpKind::gatherv, root,
            columns(gatherv_volume(counts, s.count, s.type, root, shape.rows), shape, s.type,
                    counts, root, s.in_place),
            [&] { do_gatherv_columns(s, r, shape, counts, root); });
  }
  // At the root only, in place: the root's own columns are already in `recv`.
  template <OutputElements R>
  void gatherv_columns(InPlace, R&& recv, RowMajor shape, std::span<const std::size_t> counts,
                       int root) {
    const Buffer r = buf(recv);
    (void)own_offset(counts, root, "gatherv_columns");
    const ConstBuffer s{r.data, counts[static_cast<std::size_t>(rank())] * shape.rows, r.type,
                        true};
    counted(OpKind::gatherv, root,
            columns(gatherv_volume(counts, s.count, s.type, root, shape.rows), shape, s.type,
                    counts, root, s.in_place),
            [&] { do_gatherv_columns(s, r, shape, counts, root); });
  }
  // As gatherv, with every rank receiving the concatenation.
  template <InputElements S, OutputElements R>
  void allgatherv(const S& send, R&& recv, std::span<const std::size_t> counts) {
    const ConstBuffer s = cbuf(send);
    const Buffer r = buf(recv);
    counted(OpKind::allgatherv, -1, allgatherv_volume(counts, s.count, s.type),
            [&] { do_allgatherv(s, r, counts); });
  }
  // Element-wise sum over ranks, in place; same size on every rank.
  template <OutputElements R>
  void allreduce_sum(R&& data) {
    const Buffer b = buf(data);
    counted(OpKind::allreduce, -1, allreduce_volume(b.count, b.type), [&] { do_allreduce_sum(b); });
  }
  // Element-wise sum over ranks into the root's `data` (in place there); the other ranks'
  // `data` is only read. Same size on every rank.
  template <OutputElements R>
  void reduce_sum(R&& data, int root) {
    const Buffer b = buf(data);
    counted(OpKind::reduce, root, reduce_volume(b.count, b.type, root),
            [&] { do_reduce_sum(b, root); });
  }
  // Element-wise sum of every rank's `send` (sum of counts elements), of which rank r
  // receives block r (counts[r] elements) in `recv`. `counts` must agree on every rank.
  template <InputElements S, OutputElements R>
  void reduce_scatter_sum(const S& send, R&& recv, std::span<const std::size_t> counts) {
    const ConstBuffer s = cbuf(send);
    const Buffer r = buf(recv);
    counted(OpKind::reduce_scatter, -1, reduce_scatter_volume(counts, r.count, r.type),
            [&] { do_reduce_scatter_sum(s, r, counts); });
  }

 protected:
  // Called when an injected fault makes this rank skip a collective: a backend that numbers
  // collectives counts it as called, so the other ranks wait for it (default: nothing).
  virtual void on_skipped_collective() {}
  virtual void do_abandon(const std::string&) {}
  virtual bool do_abandoned() const { return false; }

  virtual void do_barrier() = 0;
  // The backend's split (see split()); returns nullptr for kNoColor.
  virtual std::unique_ptr<Communicator> do_split(int color, int key) = 0;
  // The split of split(of): by default the backend's split with this rank's color and key.
  virtual std::unique_ptr<Communicator> do_split_known(const std::function<ColorKey(int)>& of) {
    const ColorKey mine = of(rank());
    return do_split(mine.color, mine.key);
  }
  virtual void do_send(ConstBuffer data, int dest, int tag) = 0;
  virtual void do_recv(Buffer data, int source, int tag) = 0;
  virtual void do_sendrecv(ConstBuffer send, int dest, int send_tag, Buffer recv, int source,
                           int recv_tag) = 0;
  virtual void do_broadcast(Buffer data, int root) = 0;
  virtual void do_scatterv(ConstBuffer send, std::span<const std::size_t> counts, Buffer recv,
                           int root) = 0;
  virtual void do_gatherv(ConstBuffer send, Buffer recv, std::span<const std::size_t> counts,
                          int root) = 0;
  virtual void do_scatterv_columns(ConstBuffer send, RowMajor shape,
                                   std::span<const std::size_t> counts, Buffer recv, int root) = 0;
  virtual void do_gatherv_columns(ConstBuffer send, Buffer recv, RowMajor shape,
                                  std::span<const std::size_t> counts, int root) = 0;
  virtual void do_allgatherv(ConstBuffer send, Buffer recv,
                             std::span<const std::size_t> counts) = 0;
  virtual void do_allreduce_sum(Buffer data) = 0;
  virtual void do_reduce_sum(Buffer data, int root) = 0;
  virtual void do_reduce_scatter_sum(ConstBuffer send, Buffer recv,
                                     std::span<const std::size_t> counts) = 0;

 private:
  // What one call moves across rank boundaries, from this rank's point of view.
  struct Volume {
    std::uint64_t bytes_sent = 0, bytes_received = 0, messages_sent = 0, messages_received = 0;
    double ring_bytes = 0;
    // For the trace (TraceEvent): the call's whole size, a columns form's row length and
    // its root's strided bytes and blocks, the peers of a sendrecv.
    std::uint64_t total_bytes = 0, row_bytes = 0, strided_bytes = 0, strided_blocks = 0;
    int peer_to = -1, peer_from = -1;
    Volume operator+(const Volume& o) const {
      return {bytes_sent + o.bytes_sent, bytes_received + o.bytes_received,
              messages_sent + o.messages_sent, messages_received + o.messages_received,
              ring_bytes + o.ring_bytes};
    }
  };
  Volume point_to_point(std::size_t count, DataType t, int peer, bool sending) const;
  Volume broadcast_volume(std::size_t count, DataType t, int root) const;
  // `unit`: elements per count (the rows of a column, for the column forms).
  Volume scatterv_volume(std::span<const std::size_t> counts, std::size_t mine, DataType t,
                         int root, std::size_t unit = 1) const;
  Volume gatherv_volume(std::span<const std::size_t> counts, std::size_t mine, DataType t, int root,
                        std::size_t unit = 1) const;
  Volume allgatherv_volume(std::span<const std::size_t> counts, std::size_t mine, DataType t) const;
  Volume allreduce_volume(std::size_t count, DataType t) const;
  Volume reduce_volume(std::size_t count, DataType t, int root) const;
  Volume reduce_scatter_volume(std::span<const std::size_t> counts, std::size_t mine,
                               DataType t) const;
  // A columns form's volume: its matrix's row length besides, and at the root the bytes and
  // blocks of its matrix copied with a stride (every member's, its own unless in place).
  Volume columns(Volume v, RowMajor shape, DataType t, std::span<const std::size_t> counts,
                 int root, bool root_in_place) const;

  // The root's displacement in `counts`, for the in-place forms (throws if this rank is not
  // the root or the counts do not cover every rank).
  std::size_t own_offset(std::span<const std::size_t> counts, int root, const char* op) const;

  // A communicator split from this one shares its rank's context and names its members.
  void adopt(Communicator* child) const;
  void check_color(int color) const;  // throws for a negative color other than kNoColor

  // Applies the armed fault, if any, before a call; false means skip the call.
  bool before_call(OpKind op);

  template <typename F>
  void counted(OpKind op, int root, const Volume& v, F&& call) {
    if (ctx_->fault.kind != FaultPlan::Kind::none && !before_call(op)) return;
    RankStats& stats = ctx_->stats;
    TraceEvent e;
    e.op = op;
    e.root = root;
    e.comm = comm_id_;
    e.bytes_sent = v.bytes_sent;
    e.bytes_received = v.bytes_received;
    e.total_bytes = v.total_bytes;
    e.row_bytes = v.row_bytes;
    e.strided_bytes = v.strided_bytes;
    e.strided_blocks = v.strided_blocks;
    e.peer_to = v.peer_to;
    e.peer_from = v.peer_from;
    e.start_s = stats.now();
    call();
    e.duration_s = stats.now() - e.start_s;
    stats.record(e, v.messages_sent, v.messages_received, 0, v.ring_bytes);
  }

  // What a rank's communicators share: its counters and its armed fault.
  struct RankContext {
    RankStats stats;
    FaultPlan fault;
    int world_rank = 0;  // of the communicator the fault was armed on
    bool fault_fired = false;
    std::uint64_t fault_calls = 0;  // communication calls made since the fault was armed
    std::uint64_t delay_state = 0;
  };
  std::shared_ptr<RankContext> ctx_ = std::make_shared<RankContext>();
  std::string parent_name_;  // name() of the communicator this one was split from
  int comm_id_ = 0;          // this communicator in stats().communicators()

  template <typename R>
  static Buffer buf(R& r) {
    using T = ElementOf<R>;
    return {static_cast<void*>(std::ranges::data(r)), std::ranges::size(r), data_type_of<T>()};
  }
  template <typename R>
  static ConstBuffer cbuf(const R& r) {
    using T = ElementOf<R>;
    return {static_cast<const void*>(std::ranges::data(r)), std::ranges::size(r),
            data_type_of<T>()};
  }
};

}  // namespace distmm
