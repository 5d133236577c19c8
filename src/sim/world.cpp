#include "sim/world.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>
#include <thread>

#include "columns.hpp"
#include "distmm/error.hpp"
#include "distmm/sharding.hpp"

namespace distmm::sim {

const char* name_of(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::barrier:
      return "barrier";
    case CollectiveOp::broadcast:
      return "broadcast";
    case CollectiveOp::scatterv:
      return "scatterv";
    case CollectiveOp::gatherv:
      return "gatherv";
    case CollectiveOp::allgatherv:
      return "allgatherv";
    case CollectiveOp::allreduce:
      return "allreduce";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::reduce:
      return "reduce";
    case CollectiveOp::split:
      return "split";
  }
  return "?";
}

namespace {

constexpr int kSpinsBeforeSleep = 200;

std::string describe_contribution(int rank, const Contribution& c) {
  std::ostringstream out;
  out << "rank " << rank << " in " << name_of(c.op);
  if (c.root >= 0) out << "(root=" << c.root << ")";
  return out.str();
}

std::string join_counts(const std::vector<std::size_t>& counts) {
  std::ostringstream out;
  out << "{";
  for (std::size_t i = 0; i < counts.size(); ++i) out << (i ? "," : "") << counts[i];
  out << "}";
  return out.str();
}

template <typename T>
void add_into(void* out, const void* in, std::size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(in);
  for (std::size_t i = 0; i < n; ++i) o[i] += x[i];
}

// out = sum over ranks r (in rank order) of part r; parts[r] points at n elements.
void sum_parts(DataType type, void* out, const std::vector<const void*>& parts, std::size_t n) {
  if (n == 0) return;
  const std::size_t bytes = n * size_of(type);
  if (out != parts[0]) std::memcpy(out, parts[0], bytes);
  for (std::size_t r = 1; r < parts.size(); ++r) {
    if (type == DataType::f64) {
      add_into<double>(out, parts[r], n);
    } else {
      add_into<float>(out, parts[r], n);
    }
  }
}

const unsigned char* bytes_at(const void* p, std::size_t elements, DataType t) {
  return static_cast<const unsigned char*>(p) + elements * size_of(t);
}
unsigned char* bytes_at(void* p, std::size_t elements, DataType t) {
  return static_cast<unsigned char*>(p) + elements * size_of(t);
}

std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), std::size_t{0});
  return offsets;
}

}  // namespace

Universe::Universe(int size) : ranks_(static_cast<std::size_t>(size)) {}

namespace {
std::vector<int> every_rank(std::size_t n) {
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  return all;
}
}  // namespace

World::World(Universe& universe) : World(universe, every_rank(universe.ranks_.size()), "world") {}

World::World(Universe& universe, std::vector<int> members, std::string name)
    : u_(universe),
      members_(std::move(members)),
      name_(std::move(name)),
      top_(name_ == "world"),
      size_(static_cast<int>(members_.size())),
      mailbox_(members_.size()),
      collectives_(members_.size(), 0) {}

void World::throw_if_failed(int me, const std::string& operation) const {
  if (!u_.failure_) return;
  throw PeerFailure("rank " + std::to_string(global(me)) + ": " + operation + " abandoned: rank " +
                        std::to_string(u_.failed_rank_) + " failed: " + u_.failure_what_,
                    me, operation);
}

void World::fail_locked(int me, std::exception_ptr error) {
  if (u_.failure_) return;
  u_.failure_ = error;
  u_.failed_rank_ = global(me);
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    u_.failure_what_ = e.what();
  } catch (...) {
    u_.failure_what_ = "unknown exception";
  }
  u_.cv_.notify_all();
}

void World::wait_until(Lock& lock, int me, const std::function<bool()>& ready,
                       const std::function<std::string()>& describe,
                       const std::function<bool()>& may_leave) {
  auto& self = state(me);
  // Spin briefly before sleeping: a partner on another core usually arrives within
  // microseconds, and waking a sleeping thread costs tens of them.
  for (int spin = 0; spin < kSpinsBeforeSleep && !ready() && !u_.failure_; ++spin) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  while (true) {
    if (ready()) break;
    if (u_.failure_ && may_leave()) {
      self.state = State::running;
      throw_if_failed(me, describe());
    }
    self.state = State::blocked;
    self.ready = ready;
    self.describe = describe;
    self.where = this;
    if (!u_.failure_) check_deadlock_locked(me);
    if (u_.failure_ && may_leave()) continue;  // the deadlock check may have just failed the run
    u_.cv_.wait(lock);
  }
  self.state = State::running;
  self.ready = nullptr;
  self.describe = nullptr;
  self.where = nullptr;
}

// Every rank of the universe, whichever communicator it waits in: a deadlock is a state in
// which none is running and none of the blocked ones can go on.
void World::check_deadlock_locked(int me) {
  // Called at every wait: decided without allocating (a plan's executions allocate nothing).
  bool any_blocked = false;
  for (const auto& r : u_.ranks_) {
    if (r.state == State::running || r.state == State::failed) return;
    if (r.state == State::blocked) {
      if (r.ready()) return;
      any_blocked = true;
    }
  }
  if (!any_blocked) return;
  std::vector<std::string> places;  // the communicators blocked ranks wait in
  for (const auto& r : u_.ranks_) {
    if (r.state == State::blocked &&
        std::find(places.begin(), places.end(), r.where->name()) == places.end()) {
      places.push_back(r.where->name());
    }
  }
  std::ostringstream out;
  out << "deadlock";
  if (places.size() > 1) {
    out << " across communicators";
    for (std::size_t i = 0; i < places.size(); ++i) out << (i ? " and " : " ") << places[i];
  }
  out << ": no rank can progress;";
  for (std::size_t r = 0; r < u_.ranks_.size(); ++r) {
    const auto& s = u_.ranks_[r];
    out << " rank " << r;
    if (s.state == State::finished) {
      out << " has returned (after " << s.collectives << " collectives);";
    } else {
      out << " waits in " << s.describe();
      if (s.where->name() != "world") out << " on " << s.where->name();
      out << ";";
    }
  }
  std::string what = out.str();
  what.pop_back();
  fail_locked(me, std::make_exception_ptr(DeadlockError(what, me, "deadlock")));
}

std::string World::missing_ranks(const CollectiveCall& call) const {
  std::ostringstream out;
  bool first = true;
  for (int r = 0; r < size_; ++r) {
    if (call.slots[static_cast<std::size_t>(r)].present) continue;
    out << (first ? "" : ",") << r;
    if (state(r).state == State::finished) out << " (returned)";
    first = false;
  }
  return out.str();
}

void World::post_send(int me, PendingSend& send, ConstBuffer data, int dest, int tag) {
  Lock lock(u_.mu_);
  throw_if_failed(me, "send");
  send = PendingSend{me, dest, tag, data, false, false};
  mailbox_[static_cast<std::size_t>(dest)].push_back(&send);
  u_.cv_.notify_all();
}

void World::wait_send(int me, PendingSend& send) {
  Lock lock(u_.mu_);
  const auto describe = [&] {
    return "send(dest=" + std::to_string(send.dest) + ", tag=" + std::to_string(send.tag) + ", " +
           std::to_string(send.data.count) + " elements): no matching recv";
  };
  try {
    wait_until(
        lock, me, [&] { return send.done; }, describe, [&] { return !send.claimed; });
  } catch (...) {
    auto& box = mailbox_[static_cast<std::size_t>(send.dest)];
    box.erase(std::remove(box.begin(), box.end(), &send), box.end());
    throw;
  }
}

void World::recv(int me, Buffer data, int source, int tag) {
  Lock lock(u_.mu_);
  auto& box = mailbox_[static_cast<std::size_t>(me)];
  auto match = box.end();
  const auto find = [&] {
    match = std::find_if(box.begin(), box.end(), [&](const PendingSend* s) {
      return s->source == source && s->tag == tag;
    });
    return match != box.end();
  };
  wait_until(
      lock, me, find,
      [&] {
        std::string what =
            "recv(source=" + std::to_string(source) + ", tag=" + std::to_string(tag) + ")";
        if (state(source).state == State::finished) {
          what += ", but rank " + std::to_string(source) + " has returned";
        }
        return what;
      },
      [] { return true; });
  PendingSend* send = *match;
  box.erase(match);
  if (send->data.count != data.count || send->data.type != data.type) {
    const std::string what =
        "rank " + std::to_string(me) + ": recv(source=" + std::to_string(source) +
        ", tag=" + std::to_string(tag) + ") of " + std::to_string(data.count) + " " +
        distmm::name_of(data.type) + " elements got a message of " +
        std::to_string(send->data.count) + " " + distmm::name_of(send->data.type) +
        " elements from rank " + std::to_string(source);
    auto error = std::make_exception_ptr(MismatchError(what, me, "recv"));
    fail_locked(me, error);
    std::rethrow_exception(error);
  }
  send->claimed = true;
  lock.unlock();
  if (data.count > 0) std::memcpy(data.data, send->data.data, data.count * size_of(data.type));
  lock.lock();
  send->done = true;
  u_.cv_.notify_all();
}

void World::validate_locked(int me, std::uint64_t seq, CollectiveCall& call) {
  const auto& first = call.slots[static_cast<std::size_t>(call.first)].c;
  const auto fail = [&](const std::string& what) {
    auto error = std::make_exception_ptr(
        MismatchError("collective #" + std::to_string(seq) + ": " + what, me, name_of(first.op)));
    fail_locked(me, error);
    std::rethrow_exception(error);
  };
  const auto p = static_cast<std::size_t>(size_);
  const int root = first.root;
  // Counts as agreed: from the root for scatterv, from the first arrival otherwise.
  std::vector<std::size_t> counts;
  if (first.op == CollectiveOp::scatterv) {
    counts = call.slots[static_cast<std::size_t>(root)].c.counts;
  } else {
    counts = first.counts;
  }
  for (int r = 0; r < size_; ++r) {
    const auto& c = call.slots[static_cast<std::size_t>(r)].c;
    if (c.op != first.op || c.root != first.root) {
      fail(describe_contribution(call.first, first) + " but " + describe_contribution(r, c));
    }
    if (c.columns != first.columns || c.layout != first.layout) {
      const auto layout = [](const Contribution& x) {
        return x.columns ? "the columns of a " + std::to_string(x.layout.rows) + " x " +
                               std::to_string(x.layout.width) + " row-major matrix"
                         : std::string("contiguous blocks");
      };
      fail(describe_contribution(call.first, first) + " with " + layout(first) + " but rank " +
           std::to_string(r) + " with " + layout(c));
    }
    if (c.type != first.type) {
      fail(describe_contribution(call.first, first) + " with " + distmm::name_of(first.type) +
           " elements but rank " + std::to_string(r) + " with " + distmm::name_of(c.type));
    }
    const bool v_op = first.op == CollectiveOp::gatherv || first.op == CollectiveOp::allgatherv ||
                      first.op == CollectiveOp::reduce_scatter ||
                      (first.op == CollectiveOp::scatterv && r == root);
    if (v_op && c.counts.size() != p) {
      fail(describe_contribution(r, c) + " passed " + std::to_string(c.counts.size()) +
           " counts for " + std::to_string(size_) + " ranks");
    }
    if (v_op && first.op != CollectiveOp::scatterv && c.counts != counts) {
      fail(describe_contribution(call.first, first) + " with counts " + join_counts(counts) +
           " but rank " + std::to_string(r) + " with counts " + join_counts(c.counts));
    }
  }
  std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  if (first.columns) {
    // Counts count columns of `rows` elements, and deal out all of the root's columns.
    if (total != first.layout.width) {
      fail(describe_contribution(root, call.slots[static_cast<std::size_t>(root)].c) + ": counts " +
           join_counts(counts) + " sum to " + std::to_string(total) +
           " columns, the row-major matrix has " + std::to_string(first.layout.width));
    }
    for (std::size_t& c : counts) c *= first.layout.rows;
    total *= first.layout.rows;
  }
  const auto expect = [&](int r, const char* which, std::size_t have, std::size_t want) {
    if (have != want) {
      fail(describe_contribution(r, call.slots[static_cast<std::size_t>(r)].c) + ": " + which +
           " buffer holds " + std::to_string(have) + " elements, the agreed counts need " +
           std::to_string(want));
    }
  };
  const auto& root_c = root >= 0 ? call.slots[static_cast<std::size_t>(root)].c : first;
  for (int r = 0; r < size_; ++r) {
    const auto& c = call.slots[static_cast<std::size_t>(r)].c;
    const std::size_t mine = counts.empty() ? 0 : counts[static_cast<std::size_t>(r)];
    switch (first.op) {
      case CollectiveOp::barrier:
      case CollectiveOp::split:
        break;
      case CollectiveOp::broadcast:
      case CollectiveOp::allreduce:
      case CollectiveOp::reduce:
        expect(r, "the", c.recv_count, root_c.recv_count);
        break;
      case CollectiveOp::scatterv:
        if (r == root) expect(r, "send", c.send_count, total);
        expect(r, "receive", c.recv_count, mine);
        break;
      case CollectiveOp::gatherv:
        expect(r, "send", c.send_count, mine);
        if (r == root) expect(r, "receive", c.recv_count, total);
        break;
      case CollectiveOp::allgatherv:
        expect(r, "send", c.send_count, mine);
        expect(r, "receive", c.recv_count, total);
        break;
      case CollectiveOp::reduce_scatter:
        expect(r, "send", c.send_count, total);
        expect(r, "receive", c.recv_count, mine);
        break;
    }
  }
  if (first.op == CollectiveOp::split) make_children_locked(call);
}

void World::move_data(int me, CollectiveCall& call) {
  const auto& slots = call.slots;
  const auto& mine = slots[static_cast<std::size_t>(me)].c;
  const DataType t = mine.type;
  const std::size_t esize = size_of(t);
  const auto copy = [&](void* to, const void* from, std::size_t n) {
    if (n > 0 && to != from) std::memcpy(to, from, n * esize);
  };
  const int root = mine.root;
  const auto& root_c = root >= 0 ? slots[static_cast<std::size_t>(root)].c : mine;
  switch (mine.op) {
    case CollectiveOp::barrier:
      break;
    case CollectiveOp::split:
      *static_cast<std::shared_ptr<World>*>(mine.recv) =
          mine.color >= 0 ? call.children.at(mine.color) : nullptr;
      break;
    case CollectiveOp::broadcast:
      if (me != root) copy(mine.recv, root_c.recv, mine.recv_count);
      break;
    case CollectiveOp::scatterv: {
      const auto offsets = offsets_of(root_c.counts);
      const std::size_t at = offsets[static_cast<std::size_t>(me)];
      if (mine.columns) {
        if (!mine.in_place) {
          columns_between(t, root_c.layout, at, mine.recv_count, root_c.send, mine.recv, true);
        }
      } else {
        copy(mine.recv, bytes_at(root_c.send, at, t), mine.recv_count);
      }
      break;
    }
    case CollectiveOp::gatherv: {
      const auto offsets = offsets_of(mine.counts);
      const std::size_t at = offsets[static_cast<std::size_t>(me)];
      if (mine.columns) {
        if (!mine.in_place) {
          columns_between(t, root_c.layout, at, mine.send_count, mine.send, root_c.recv, false);
        }
      } else {
        copy(bytes_at(root_c.recv, at, t), mine.send, mine.send_count);
      }
      break;
    }
    case CollectiveOp::allgatherv: {
      const auto offsets = offsets_of(mine.counts);
      for (int r = 0; r < size_; ++r) {
        const auto& c = slots[static_cast<std::size_t>(r)].c;
        copy(bytes_at(mine.recv, offsets[static_cast<std::size_t>(r)], t), c.send, c.send_count);
      }
      break;
    }
    case CollectiveOp::reduce: {
      // Each rank sums its shard of the vector straight into the root's buffer, the root's
      // own part first: every rank reads and writes only its shard, so the root's part is
      // read before that rank overwrites it, and nothing is allocated per call.
      const Shard s = shard_of(mine.recv_count, size_, me);
      std::vector<const void*> parts{bytes_at(root_c.recv, s.offset, t)};
      for (int r = 0; r < size_; ++r) {
        if (r != root)
          parts.push_back(bytes_at(slots[static_cast<std::size_t>(r)].c.recv, s.offset, t));
      }
      sum_parts(t, bytes_at(root_c.recv, s.offset, t), parts, s.count);
      break;
    }
    case CollectiveOp::allreduce: {
      // Each rank sums its shard of the vector into its own buffer, then copies the sum into
      // the others': no rank but this one reads or writes this shard of any buffer, so nothing
      // is allocated and each element is summed once and copied once to each other rank.
      const Shard s = shard_of(mine.recv_count, size_, me);
      std::vector<const void*> parts{bytes_at(mine.recv, s.offset, t)};
      for (int r = 0; r < size_; ++r) {
        if (r != me)
          parts.push_back(bytes_at(slots[static_cast<std::size_t>(r)].c.recv, s.offset, t));
      }
      void* sum = bytes_at(mine.recv, s.offset, t);
      sum_parts(t, sum, parts, s.count);
      for (int r = 0; r < size_; ++r) {
        if (r != me)
          copy(bytes_at(slots[static_cast<std::size_t>(r)].c.recv, s.offset, t), sum, s.count);
      }
      break;
    }
    case CollectiveOp::reduce_scatter: {
      const auto offsets = offsets_of(mine.counts);
      std::vector<const void*> parts;
      for (const auto& slot : slots) {
        parts.push_back(bytes_at(slot.c.send, offsets[static_cast<std::size_t>(me)], t));
      }
      sum_parts(t, mine.recv, parts, mine.recv_count);
      break;
    }
  }
}

void World::collective(int me, Contribution c) {
  Lock lock(u_.mu_);
  const std::string op_name = name_of(c.op);
  throw_if_failed(me, op_name);
  const std::uint64_t seq = collectives_[static_cast<std::size_t>(me)]++;
  if (top_) state(me).collectives = collectives_[static_cast<std::size_t>(me)];
  auto& call = calls_[seq];
  if (call.slots.empty()) call.slots.resize(static_cast<std::size_t>(size_));
  if (call.first < 0) call.first = me;
  call.slots[static_cast<std::size_t>(me)] = Slot{std::move(c), true};
  ++call.arrived;
  const auto p = size_;
  const auto describe = [&, seq](const char* phase) {
    const auto& mine = call.slots[static_cast<std::size_t>(me)].c;
    std::string what = describe_contribution(me, mine).substr(std::to_string(me).size() + 9) +
                       " (collective #" + std::to_string(seq) + ")";
    if (call.arrived < p) {
      what += ", waiting for rank(s) " + missing_ranks(call) + " to join";
    } else {
      what += std::string(", ") + phase;
    }
    return what;
  };
  const auto nobody_copying = [&] { return call.copying == 0; };
  // Once this rank has arrived, others may still read its buffers: a rank leaving on another's
  // failure marks the call abandoned, so that one waking later to copy throws instead of
  // reading freed memory (ThreadSanitizer saw it: the root of a broadcast left while the other
  // member, woken after it, copied from its vector).
  const auto wait_after_arrival = [&](const std::function<bool()>& ready, const char* phase) {
    try {
      wait_until(
          lock, me, ready, [&] { return describe(phase); }, nobody_copying);
    } catch (...) {
      call.valid = false;
      throw;
    }
  };
  if (call.arrived == p) {
    validate_locked(me, seq, call);
    call.valid = true;
    u_.cv_.notify_all();
  }
  wait_until(
      lock, me, [&] { return call.arrived == p; }, [&] { return describe("arriving"); },
      nobody_copying);
  // The last rank to arrive found the ranks disagreeing: its buffers may be gone, copy nothing.
  if (!call.valid) throw_if_failed(me, describe("arriving"));

  ++call.copying;
  lock.unlock();
  move_data(me, call);
  lock.lock();
  --call.copying;
  ++call.reduced;
  u_.cv_.notify_all();

  // Other ranks may still be reading or writing this rank's buffers (a reduction's shards):
  // leave when all have copied.
  wait_after_arrival([&] { return call.reduced == p; }, "copying");
  // The last rank to leave removes the call.
  if (++call.left == p) calls_.erase(seq);
}

void World::skip_collective(int me) {
  Lock lock(u_.mu_);
  ++collectives_[static_cast<std::size_t>(me)];
  if (top_) state(me).collectives = collectives_[static_cast<std::size_t>(me)];
}

std::shared_ptr<World> World::split(int me, int color, int key) {
  std::shared_ptr<World> mine;
  Contribution c;
  c.op = CollectiveOp::split;
  c.color = color;
  c.key = key;
  c.recv = &mine;
  collective(me, std::move(c));
  return mine;
}

// The communicators of a split, made once by the last rank to arrive: per color, its ranks
// ordered by key and then by their rank here.
void World::make_children_locked(CollectiveCall& call) {
  std::map<int, std::vector<std::pair<int, int>>> groups;  // color -> (key, rank here)
  for (int r = 0; r < size_; ++r) {
    const Contribution& c = call.slots[static_cast<std::size_t>(r)].c;
    if (c.color >= 0) groups[c.color].emplace_back(c.key, r);
  }
  for (auto& [color, ranks] : groups) {
    std::stable_sort(ranks.begin(), ranks.end());
    std::vector<int> members;
    std::ostringstream name;
    name << "ranks ";
    for (const auto& [key, r] : ranks) {
      name << (members.empty() ? "" : ",") << global(r);
      members.push_back(global(r));
    }
    name << " of " << name_;
    call.children[color] = std::make_shared<World>(u_, std::move(members), name.str());
  }
}

void World::rank_finished(int me) {
  Lock lock(u_.mu_);
  state(me).state = State::finished;
  if (!u_.failure_) check_deadlock_locked(me);
  u_.cv_.notify_all();
}

void World::rank_failed(int me, std::exception_ptr error) {
  Lock lock(u_.mu_);
  state(me).state = State::failed;
  fail_locked(me, error);
  u_.cv_.notify_all();
}

std::exception_ptr World::first_failure() const {
  Lock lock(u_.mu_);
  return u_.failure_;
}

}  // namespace distmm::sim
