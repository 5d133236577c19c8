#pragma once
// The simulator's shared state and matching model: mailboxes, collective slots, rank states,
// deadlock detection. Callers (SimCommunicator) see only the operations below.
//
// One Universe per simulated run holds what every communicator shares: one lock, each world
// rank's state (running, blocked in some communicator, finished, failed) and the first
// failure. A World is one communicator over some of the universe's ranks (all of them for
// the top one, a subset for one made by split()); ranks are the World's own (local) ranks,
// members() maps them to world ranks. Because a blocked rank is blocked whichever World it
// waits in, deadlock detection sees every communicator at once, and a failure in one ends
// the waits in all.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "distmm/communicator.hpp"

namespace distmm::sim {

enum class CollectiveOp {
  barrier,
  broadcast,
  scatterv,
  gatherv,
  allgatherv,
  allreduce,
  reduce_scatter,
  reduce,
  split
};
const char* name_of(CollectiveOp op);

// What one rank brings to a collective call.
struct Contribution {
  CollectiveOp op = CollectiveOp::barrier;
  int root = -1;  // -1 for rootless operations
  DataType type = DataType::f64;
  const void* send = nullptr;
  std::size_t send_count = 0;
  void* recv = nullptr;
  std::size_t recv_count = 0;
  std::vector<std::size_t> counts;  // v-collectives only (on scatterv: root only)
  // scatterv_columns / gatherv_columns: the root's buffer is `layout`, counts count columns.
  bool columns = false;
  RowMajor layout;
  bool in_place = false;    // the root's own block stays where it is
  int color = -1, key = 0;  // split only
};

class World;

class Universe {
 public:
  explicit Universe(int size);

 private:
  friend class World;
  enum class State { running, blocked, finished, failed };
  struct RankState {
    State state = State::running;
    std::function<bool()> ready;
    std::function<std::string()> describe;
    const World* where = nullptr;   // the communicator it waits in
    std::uint64_t collectives = 0;  // in the top communicator
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RankState> ranks_;  // by world rank
  std::exception_ptr failure_;
  int failed_rank_ = -1;  // world rank
  std::string failure_what_;
};

class World {
 public:
  // The top communicator: every rank of the universe.
  explicit World(Universe& universe);
  // A communicator over world ranks `members` (in its rank order), named for messages.
  World(Universe& universe, std::vector<int> members, std::string name);
  int size() const { return size_; }
  const std::vector<int>& members() const { return members_; }
  const std::string& name() const { return name_; }

  // Point-to-point. Blocking; throw on failure, deadlock or mismatch.
  // A send owned by the sending rank; the receiver copies straight from `data`.
  struct PendingSend {
    int source = -1;
    int dest = -1;
    int tag = 0;
    ConstBuffer data{};
    bool claimed = false;  // a receiver is copying from `data`
    bool done = false;     // the receiver has finished with `data`
  };
  void post_send(int me, PendingSend& send, ConstBuffer data, int dest, int tag);
  void wait_send(int me, PendingSend& send);
  void recv(int me, Buffer data, int source, int tag);

  void collective(int me, Contribution c);
  // Counts a collective call as made without joining it (fault injection: a lost call).
  void skip_collective(int me);
  // MPI_Comm_split over this communicator: this rank's new communicator, or nullptr for a
  // negative color. Collective.
  std::shared_ptr<World> split(int me, int color, int key);

  // Rank lifecycle, called by the launcher (on the top communicator).
  void rank_finished(int me);
  void rank_failed(int me, std::exception_ptr error);
  // The first failure (root cause), if any.
  std::exception_ptr first_failure() const;

 private:
  struct Slot {
    Contribution c;
    bool present = false;
  };
  struct CollectiveCall {
    std::vector<Slot> slots;
    int arrived = 0;
    int reduced = 0;
    bool valid = false;  // every rank has arrived and the contributions agree
    int left = 0;
    int copying = 0;  // ranks inside move_data, reading other ranks' buffers
    int first = -1;
    std::map<int, std::shared_ptr<World>> children;  // split: the new communicators, by color
  };
  using State = Universe::State;
  using RankState = Universe::RankState;
  int global(int me) const { return members_[static_cast<std::size_t>(me)]; }
  RankState& state(int me) { return u_.ranks_[static_cast<std::size_t>(global(me))]; }
  const RankState& state(int me) const { return u_.ranks_[static_cast<std::size_t>(global(me))]; }

  using Lock = std::unique_lock<std::mutex>;
  // Blocks until ready(). On another rank's failure throws PeerFailure, but only once
  // may_leave() holds (no other rank is still copying from this rank's buffers).
  void wait_until(Lock& lock, int me, const std::function<bool()>& ready,
                  const std::function<std::string()>& describe,
                  const std::function<bool()>& may_leave);
  void throw_if_failed(int me, const std::string& operation) const;
  void fail_locked(int me, std::exception_ptr error);
  void check_deadlock_locked(int me);
  std::string missing_ranks(const CollectiveCall& call) const;
  void validate_locked(int me, std::uint64_t seq, CollectiveCall& call);
  void move_data(int me, CollectiveCall& call);
  void make_children_locked(CollectiveCall& call);

  Universe& u_;
  const std::vector<int> members_;
  const std::string name_;
  const bool top_;
  const int size_;
  std::vector<std::deque<PendingSend*>> mailbox_;  // per destination, in posting order
  std::vector<std::uint64_t> collectives_;         // per rank: collective calls made
  std::map<std::uint64_t, CollectiveCall> calls_;
};

}  // namespace distmm::sim
