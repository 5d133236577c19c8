// A strategy of one's own, written against distmm's Communicator with sendrecv only: C = A B
// with the inner dimension k sharded (as Megatron's row-parallel layer), every rank ending
// with all of C through a ring all-reduce.
//
//   rank r holds A[:, K_r] (m x k_r) and B[K_r, :] (k_r x n), K_r = shard_of(k, P, r)
//   partial  P_r = A[:, K_r] B[K_r, :]                    (m x n, one BLAS call)
//   ring all-reduce of P over C's m n elements, in P chunks:
//     reduce-scatter, P-1 steps: send chunk (r-s) mod P to r+1, receive chunk (r-s-1) mod P
//                                from r-1 and add it: rank r ends owning chunk (r+1) mod P
//     all-gather,     P-1 steps: send chunk (r+1-s) mod P, receive chunk (r-s) mod P
//   every rank: C = sum_r P_r
//
// Runs on the simulator (--ranks N) or under mpirun, and checks C on every rank against the
// single-process A * B. Exit 0 when every rank matches, 1 otherwise.
#include <distmm/communicator.hpp>
#include <distmm/error.hpp>
#include <distmm/mpi_session.hpp>
#include <distmm/sharding.hpp>
#include <distmm/simulator.hpp>

#include <armadillo>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Every rank makes the same A and B (no data movement needed to set up the example).
arma::mat matrix(std::size_t rows, std::size_t cols, unsigned seed) {
  arma::mat x(rows, cols);
  for (std::size_t i = 0; i < x.n_elem; ++i) x[i] = static_cast<double>((i * 7 + seed) % 19) - 9;
  return x;
}

// Sums `data` over every rank, in place, with 2 (P - 1) sendrecv steps around the ring.
void ring_allreduce(distmm::Communicator& comm, arma::mat& data) {
  const int p = comm.size(), r = comm.rank();
  const auto chunk = [&](int i) { return distmm::shard_of(data.n_elem, p, ((i % p) + p) % p); };
  const auto span_of = [&](distmm::Shard s) {
    return std::span<double>(data.memptr() + s.offset, s.count);
  };
  std::vector<double> incoming(chunk(0).count);  // the widest chunk
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  for (int s = 0; s + 1 < p; ++s) {  // reduce-scatter
    const distmm::Shard out = chunk(r - s), in = chunk(r - s - 1);
    comm.sendrecv(span_of(out), next, s, std::span<double>(incoming.data(), in.count), prev, s);
    for (std::size_t i = 0; i < in.count; ++i) data[in.offset + i] += incoming[i];
  }
  for (int s = 0; s + 1 < p; ++s) {  // all-gather: pass the finished chunks on
    const distmm::Shard out = chunk(r + 1 - s), in = chunk(r - s);
    comm.sendrecv(span_of(out), next, p + s, span_of(in), prev, p + s);
  }
}

// Returns true when this rank's C equals A * B.
bool run(distmm::Communicator& comm, std::size_t m, std::size_t k, std::size_t n) {
  const arma::mat a = matrix(m, k, 1), b = matrix(k, n, 2);
  const distmm::Shard mine = distmm::shard_of(k, comm.size(), comm.rank());
  arma::mat c(m, n, arma::fill::zeros);
  if (mine.count > 0) {
    const std::size_t last = mine.offset + mine.count - 1;
    c = a.cols(mine.offset, last) * b.rows(mine.offset, last);
  }
  ring_allreduce(comm, c);
  const double error = arma::abs(c - a * b).max();
  std::printf("rank %d of %d (%s): max |C - A*B| = %g\n", comm.rank(), comm.size(),
              comm.backend().c_str(), error);
  return error == 0;  // integer inputs: exact
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t m = 37, k = 29, n = 23;  // uneven on purpose
  try {
    if (argc == 3 && std::strcmp(argv[1], "--ranks") == 0) {
      std::atomic<bool> all_ok = true;
      distmm::run_simulated(std::stoi(argv[2]), [&](distmm::Communicator& comm) {
        if (!run(comm, m, k, n)) all_ok = false;
      });
      return all_ok ? 0 : 1;
    }
    distmm::MpiSession session(argc, argv);
    const auto world = session.world();
    std::vector<double> ok{run(*world, m, k, n) ? 1.0 : 0.0};
    world->allreduce_sum(ok);
    return ok[0] == world->size() ? 0 : 1;
  } catch (const distmm::Error& e) {
    std::fprintf(stderr, "ring_allreduce: %s\n", e.what());
    return 3;
  }
}
