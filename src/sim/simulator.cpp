#include "distmm/simulator.hpp"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distmm/error.hpp"
#include "sim/world.hpp"

namespace distmm {
namespace {

using sim::CollectiveOp;
using sim::Contribution;

// A thin per-rank handle: argument checks here, matching and data movement in sim::World.
class SimCommunicator final : public Communicator {
 public:
  SimCommunicator(std::shared_ptr<sim::World> world, int rank)
      : owned_(std::move(world)), world_(*owned_), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  std::vector<int> world_ranks() const override { return world_.members(); }
  std::string backend() const override { return "simulator"; }
  std::string host() const override {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return name;
  }

  void do_barrier() override { collective(make(CollectiveOp::barrier, -1, DataType::f64, {}, {})); }

  std::unique_ptr<Communicator> do_split(int color, int key) override {
    std::shared_ptr<sim::World> child = world_.split(rank_, color, key);
    if (!child) return nullptr;
    const auto& members = child->members();
    const int me = world_.members()[static_cast<std::size_t>(rank_)];
    const auto at = std::find(members.begin(), members.end(), me) - members.begin();
    return std::make_unique<SimCommunicator>(std::move(child), static_cast<int>(at));
  }

 protected:
  void on_skipped_collective() override { world_.skip_collective(rank_); }

  void do_send(ConstBuffer data, int dest, int tag) override {
    check_peer(dest, "send", "dest");
    sim::World::PendingSend send;
    world_.post_send(rank_, send, data, dest, tag);
    world_.wait_send(rank_, send);
  }
  void do_recv(Buffer data, int source, int tag) override {
    check_peer(source, "recv", "source");
    world_.recv(rank_, data, source, tag);
  }
  void do_sendrecv(ConstBuffer send_data, int dest, int send_tag, Buffer recv_data, int source,
                   int recv_tag) override {
    check_peer(dest, "sendrecv", "dest");
    check_peer(source, "sendrecv", "source");
    sim::World::PendingSend send;
    world_.post_send(rank_, send, send_data, dest, send_tag);
    world_.recv(rank_, recv_data, source, recv_tag);
    world_.wait_send(rank_, send);
  }
  void do_broadcast(Buffer data, int root) override {
    check_peer(root, "broadcast", "root");
    collective(make(CollectiveOp::broadcast, root, data.type, {}, data));
  }
  void do_scatterv(ConstBuffer send, std::span<const std::size_t> counts, Buffer recv,
                   int root) override {
    check_peer(root, "scatterv", "root");
    if (rank_ == root) {
      check_type(send.type, recv.type, "scatterv");
      collective(make(CollectiveOp::scatterv, root, recv.type, send, recv, counts));
    } else {
      collective(make(CollectiveOp::scatterv, root, recv.type, {}, recv));
    }
  }
  void do_gatherv(ConstBuffer send, Buffer recv, std::span<const std::size_t> counts,
                  int root) override {
    check_peer(root, "gatherv", "root");
    if (rank_ == root) check_type(send.type, recv.type, "gatherv");
    collective(make(CollectiveOp::gatherv, root, send.type, send,
                    rank_ == root ? recv : Buffer{nullptr, 0, send.type}, counts));
  }
  void do_scatterv_columns(ConstBuffer send, RowMajor shape, std::span<const std::size_t> counts,
                           Buffer recv, int root) override {
    check_peer(root, "scatterv_columns", "root");
    if (rank_ == root) check_type(send.type, recv.type, "scatterv_columns");
    Contribution c =
        make(CollectiveOp::scatterv, root, recv.type, rank_ == root ? send : ConstBuffer{}, recv,
             rank_ == root ? counts : std::span<const std::size_t>{});
    c.columns = true;
    c.layout = shape;
    c.in_place = recv.in_place;
    collective(std::move(c));
  }
  void do_gatherv_columns(ConstBuffer send, Buffer recv, RowMajor shape,
                          std::span<const std::size_t> counts, int root) override {
    check_peer(root, "gatherv_columns", "root");
    if (rank_ == root) check_type(send.type, recv.type, "gatherv_columns");
    Contribution c = make(CollectiveOp::gatherv, root, send.type, send,
                          rank_ == root ? recv : Buffer{nullptr, 0, send.type}, counts);
    c.columns = true;
    c.layout = shape;
    c.in_place = send.in_place;
    collective(std::move(c));
  }
  void do_allgatherv(ConstBuffer send, Buffer recv, std::span<const std::size_t> counts) override {
    check_type(send.type, recv.type, "allgatherv");
    collective(make(CollectiveOp::allgatherv, -1, send.type, send, recv, counts));
  }
  void do_allreduce_sum(Buffer data) override {
    collective(make(CollectiveOp::allreduce, -1, data.type, {}, data));
  }
  void do_reduce_sum(Buffer data, int root) override {
    check_peer(root, "reduce", "root");
    collective(make(CollectiveOp::reduce, root, data.type, {}, data));
  }
  void do_reduce_scatter_sum(ConstBuffer send, Buffer recv,
                             std::span<const std::size_t> counts) override {
    check_type(send.type, recv.type, "reduce_scatter");
    collective(make(CollectiveOp::reduce_scatter, -1, send.type, send, recv, counts));
  }

 private:
  static Contribution make(CollectiveOp op, int root, DataType type, ConstBuffer send, Buffer recv,
                           std::span<const std::size_t> counts = {}) {
    Contribution c;
    c.op = op;
    c.root = root;
    c.type = type;
    c.send = send.data;
    c.send_count = send.count;
    c.recv = recv.data;
    c.recv_count = recv.count;
    c.counts.assign(counts.begin(), counts.end());
    return c;
  }
  void collective(Contribution c) { world_.collective(rank_, std::move(c)); }

  void check_peer(int peer, const char* operation, const char* role) const {
    if (peer < 0 || peer >= size()) {
      throw CommError("rank " + std::to_string(rank_) + ": " + operation + ": " + role + " " +
                          std::to_string(peer) + " is not a rank of this communicator (size " +
                          std::to_string(size()) + ")",
                      rank_, operation);
    }
  }
  void check_type(DataType a, DataType b, const char* operation) const {
    if (a != b) {
      throw CommError("rank " + std::to_string(rank_) + ": " + operation + ": send buffer of " +
                          name_of(a) + " but receive buffer of " + name_of(b),
                      rank_, operation);
    }
  }

  std::shared_ptr<sim::World> owned_;
  sim::World& world_;
  const int rank_;
};

}  // namespace

void run_simulated(int ranks, const std::function<void(Communicator&)>& fn) {
  if (ranks < 1) {
    throw InputError("run_simulated: rank count must be at least 1, got " + std::to_string(ranks));
  }
  sim::Universe universe(ranks);
  const auto world = std::make_shared<sim::World>(universe);
  const auto body = [&](int r) {
    SimCommunicator comm(world, r);
    try {
      fn(comm);
      world->rank_finished(r);
    } catch (...) {
      world->rank_failed(r, std::current_exception());
    }
  };
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<std::size_t>(ranks - 1));
    for (int r = 1; r < ranks; ++r) threads.emplace_back(body, r);
    body(0);  // rank 0 runs on the caller's thread
  }
  if (auto failure = world->first_failure()) std::rethrow_exception(failure);
}

}  // namespace distmm
