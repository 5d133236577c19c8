// Links: ping-pong times, the first use of a buffer, and a ring exchange beside a multiply.
#include <algorithm>
#include <armadillo>
#include <cmath>
#include <functional>
#include <thread>

#include "calibration/measure.hpp"
#include "distmm/memory.hpp"
#include "strategies/helper_thread.hpp"

namespace distmm::calibration {

double ping_pong(Communicator& comm, int a, int b, std::size_t bytes, std::vector<double>& buf,
                 double expected_s, int batch_count) {
  const int me = comm.rank();
  const std::size_t count = bytes / sizeof(double);
  const std::span<double> data(buf.data(), count);
  // About 4 MB moved per batch (one round trip at least), and a batch of about 0.1 s at most
  // where the expected time says so: a slow link's large sizes in seconds, not minutes.
  double most = 4e6 / (static_cast<double>(bytes) + 1e3);
  if (expected_s > 0) most = std::min(most, 0.1 / (2 * expected_s));
  const int rounds = static_cast<int>(std::clamp(most, 1.0, 200.0));
  std::vector<double> batches;
  for (int batch = 0; batch < batch_count; ++batch) {
    comm.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      if (me == a) {
        comm.send(data, b, 7);
        comm.recv(data, b, 7);
      } else if (me == b) {
        comm.recv(data, a, 7);
        comm.send(data, a, 7);
      }
    }
    batches.push_back(since(start) / (2.0 * rounds));
  }
  std::vector<double> t{me == a ? median_of(batches) : 0.0};
  comm.broadcast(t, a);
  return t[0];
}

double first_use_per_page(Communicator& comm, int a, int b, std::size_t bytes) {
  const int me = comm.rank();
  std::vector<double> times;
  for (int trial = 0; trial < 3; ++trial) {
    // Pages new to the process, populated as plans populate theirs: the heap would hand back
    // the earlier sweeps' buffers, already used for communication.
    const FreshPages pages(me == a || me == b ? bytes / sizeof(double) : 0);
    const std::span<double> fresh = pages.span();
    double round[2] = {0, 0};
    for (double& t : round) {
      comm.barrier();
      const auto start = Clock::now();
      if (me == a) {
        comm.send(fresh, b, 8);
        comm.recv(fresh, b, 8);
      } else if (me == b) {
        comm.recv(fresh, a, 8);
        comm.send(fresh, a, 8);
      }
      t = since(start);
    }
    times.push_back(std::max(0.0, round[0] - round[1]));
  }
  std::vector<double> t{me == a ? median_of(times) / (2.0 * static_cast<double>(bytes) / 4096.0)
                                : 0.0};
  comm.broadcast(t, a);
  return t[0];
}

RingFigures overlap_contention(Communicator& ring, const LinkModel& link, std::size_t max_bytes) {
  const int p = ring.size(), r = ring.rank();
  // A shard the link moves in about 20 ms (at most max_bytes), and a multiply as long.
  std::size_t bytes = 1u << 16;
  while (bytes < max_bytes && link.time(bytes * 2) < 0.02) bytes *= 2;
  const std::size_t count = bytes / sizeof(double);
  arma::mat out = fresh_matrix<double>(count, 1), in = fresh_matrix<double>(count, 1);
  out.fill(1.0);
  const double exchange_s = link.time(bytes);
  const auto n =
      static_cast<std::size_t>(std::clamp(std::cbrt(exchange_s * 40e9 / 2), 64.0, 2048.0));
  arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu), c(n, n, arma::fill::zeros);
  const std::function<void()> multiply = [&] { c = a * b; };
  const auto shift = [&] { ring.sendrecv(out, (r + 1) % p, 9, in, (r + p - 1) % p, 9); };
  HelperThread helper;
  const auto overlapped = [&] {
    helper.run(multiply);
    shift();
    helper.wait();
  };
  // The three in rounds (drift touches all three alike), the median of the rounds after the
  // first (which warms buffers and pages).
  constexpr int kRounds = 9;
  std::vector<double> exchanges, multiplies, boths;
  const auto timed = [&](const std::function<void()>& what, std::vector<double>& into) {
    ring.barrier();
    const auto start = Clock::now();
    what();
    ring.barrier();
    into.push_back(since(start));
  };
  for (int i = 0; i < kRounds; ++i) {
    timed(shift, exchanges);
    timed(multiply, multiplies);
    timed(overlapped, boths);
  }
  // The rounds after the first.
  const auto settled = [](const std::vector<double>& t) {
    return median_of(std::vector<double>(t.begin() + 1, t.end()));
  };
  const double alone_exchange = settled(exchanges), alone_multiply = settled(multiplies),
               both = settled(boths);
  const double shorter = std::min(alone_exchange, alone_multiply);
  std::vector<double> f{
      std::clamp((both - std::max(alone_exchange, alone_multiply)) / std::max(shorter, 1e-9), 0.0,
                 kMaxContention),
      std::clamp(alone_exchange / std::max(link.time(bytes), 1e-9), 0.25, kMaxContention)};
  ring.broadcast(f, 0);
  return {f[0], f[1]};
}

}  // namespace distmm::calibration
