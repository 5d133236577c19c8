#include "distmm/stats.hpp"

#include <algorithm>

namespace distmm {

std::string_view name_of(OpKind op) {
  switch (op) {
    case OpKind::send:
      return "send";
    case OpKind::recv:
      return "recv";
    case OpKind::sendrecv:
      return "sendrecv";
    case OpKind::barrier:
      return "barrier";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::scatterv:
      return "scatterv";
    case OpKind::gatherv:
      return "gatherv";
    case OpKind::allgatherv:
      return "allgatherv";
    case OpKind::allreduce:
      return "allreduce";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::reduce:
      return "reduce";
    case OpKind::compute:
      return "multiply";
    case OpKind::split:
      return "split";
  }
  return "?";
}

void RankStats::reset() {
  ops_ = {};
  events_.clear();
  epoch_ = Clock::now();
  peak_ = held_;
  persistent_peak_ = persistent_;
}

OpCounters RankStats::total_communication() const {
  OpCounters t;
  for (int k = 0; k < kOpKinds; ++k) {
    if (static_cast<OpKind>(k) == OpKind::compute) continue;
    const OpCounters& c = ops_[static_cast<std::size_t>(k)];
    t.calls += c.calls;
    t.messages_sent += c.messages_sent;
    t.messages_received += c.messages_received;
    t.bytes_sent += c.bytes_sent;
    t.bytes_received += c.bytes_received;
    t.seconds += c.seconds;
    t.ring_bytes += c.ring_bytes;
  }
  return t;
}

void RankStats::record(const TraceEvent& e, std::uint64_t messages_sent,
                       std::uint64_t messages_received, double flops, double ring_bytes) {
  OpCounters& c = ops_[static_cast<std::size_t>(e.op)];
  ++c.calls;
  c.messages_sent += messages_sent;
  c.messages_received += messages_received;
  c.bytes_sent += e.bytes_sent;
  c.bytes_received += e.bytes_received;
  c.seconds += e.duration_s;
  c.flops += flops;
  c.ring_bytes += ring_bytes;
  events_.push_back(e);
}

int RankStats::communicator_id(const std::string& name, const std::vector<int>& members) {
  const auto at = std::find(communicators_.begin(), communicators_.end(), name);
  if (at != communicators_.end()) return static_cast<int>(at - communicators_.begin());
  communicators_.push_back(name);
  members_.push_back(members);
  return static_cast<int>(communicators_.size() - 1);
}

void RankStats::hold_params(std::uint64_t bytes, bool persistent) {
  held_ += bytes;
  peak_ = std::max(peak_, held_);
  if (persistent) {
    persistent_ += bytes;
    persistent_peak_ = std::max(persistent_peak_, persistent_);
  }
}

void RankStats::release_params(std::uint64_t bytes, bool persistent) {
  held_ -= bytes;
  if (persistent) persistent_ -= bytes;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace distmm
