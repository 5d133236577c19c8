// The MPI backend bounds every wait and splits what MPI's int counts cannot carry.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distmm/error.hpp"
#include "distmm/plan.hpp"
#include "distmm/strategy.hpp"
#include "support/mpi_world.hpp"

namespace distmm::testing {
namespace {

using ::testing::HasSubstr;

class MpiFault : public MpiTest {};

TEST_F(MpiFault, AWaitLongerThanTheTimeoutSaysWhatItWaitsOn) {
  auto comm = mpi_session().world(MpiOptions{.timeout_s = 0.5});
  if (comm->size() < 2) GTEST_SKIP() << "needs a peer that never sends";
  if (comm->rank() == 1) {
    std::vector<double> in(3);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->recv(in, 0, 99);  // rank 0 never sends this
      ADD_FAILURE() << "recv returned";
    } catch (const TimeoutError& e) {
      EXPECT_THAT(std::string(e.what()),
                  HasSubstr("rank 1: waited more than 0.5 s in recv(source=0, tag=99)"));
      EXPECT_EQ(e.rank(), 1);
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(waited, 0.5);
    EXPECT_LT(waited, 10);
  }
  mpi_world().barrier();
}

// A sub-communicator keeps the bound (and its pieces): a rank whose group partner never
// comes says which call on which communicator it waits in.
TEST_F(MpiFault, ASubcommunicatorKeepsTheTimeout) {
  auto comm = mpi_session().world(MpiOptions{.timeout_s = 0.5});
  if (comm->size() < 2) GTEST_SKIP() << "needs a partner that never joins";
  const auto pair = comm->split(comm->rank() / 2, 0);
  if (comm->rank() == 0 && pair->size() == 2) {
    try {
      pair->barrier();  // rank 1 never calls it
      ADD_FAILURE() << "barrier returned";
    } catch (const TimeoutError& e) {
      EXPECT_THAT(std::string(e.what()), HasSubstr("waited more than 0.5 s in barrier"));
    }
  }
  EXPECT_EQ(pair->world_ranks().front(), comm->rank() / 2 * 2);
  mpi_world().barrier();
}

// With hear_failures, a rank that abandons after a failure releases the others: those
// waiting on the communicator, and on one split from it, raise PeerFailure naming it (no
// timeout set: without the channel they would wait for ever), and every later call throws.
TEST_F(MpiFault, AnAbandoningRankReleasesTheOthersWaitsWithPeerFailure) {
  auto comm = mpi_session().world(MpiOptions{.hear_failures = true});
  if (comm->size() < 2) GTEST_SKIP() << "needs a rank that fails";
  auto half = comm->split(comm->rank() % 2, comm->rank());
  const int failing = comm->size() - 1;
  const auto start = std::chrono::steady_clock::now();
  if (comm->rank() == failing) {
    comm->abandon("rank " + std::to_string(failing) + ": out of luck");
    std::vector<double> x(4);
    EXPECT_THROW(comm->broadcast(x, 0), CommError);
  } else {
    // Never freed: MPI cannot cancel the abandoned collective, which may still write into it
    // (libnbc did, into a freed vector, and the heap broke).
    std::vector<double>& x = *new std::vector<double>(1000, 1.0);
    bool in_half = false;
    try {
      // Even ranks wait in the world's broadcast, odd ones in their half's (when the
      // failing rank is in it, else they wait on the world's and its allreduce).
      in_half = comm->rank() % 2 == 1 && failing % 2 == 1;
      if (in_half) {
        half->allreduce_sum(x);
      } else {
        comm->broadcast(x, 0);
        comm->allreduce_sum(x);
      }
      ADD_FAILURE() << "rank " << comm->rank() << ": a call the failed rank never joins returned";
    } catch (const PeerFailure& e) {
      EXPECT_THAT(std::string(e.what()),
                  HasSubstr("abandoned: rank " + std::to_string(failing) + " failed: rank " +
                            std::to_string(failing) + ": out of luck"));
      EXPECT_THAT(std::string(e.what()), HasSubstr("rank " + std::to_string(comm->rank()) + ": "));
      EXPECT_EQ(e.rank(), in_half ? half->rank() : comm->rank());  // its rank where it waited
    }
    EXPECT_THROW(comm->barrier(), PeerFailure);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
  // The abandoned communicators' collectives may never complete: keep them (as the Python
  // module does) and go on on the test's own world.
  static auto* kept = new std::vector<std::unique_ptr<Communicator>>();
  kept->push_back(std::move(half));
  kept->push_back(std::move(comm));
  mpi_world().barrier();
}

// A plan whose setup is left unfinished by a failed peer keeps its buffers for the life of the
// process (MPI may still write into them), instead of freeing them as its constructor
// unwinds: rank 0, the root, fails before placing B, and every other rank waits for it.
TEST_F(MpiFault, APlanWhoseSetupWasAbandonedKeepsItsBuffers) {
  auto comm = mpi_session().world(MpiOptions{.hear_failures = true});
  if (comm->size() < 2) GTEST_SKIP() << "needs a root that fails";
  const MatmulShape shape{64, 32, 16};
  const std::uint64_t before = abandoned_plan_bytes();
  if (comm->rank() == 0) {
    comm->abandon("rank 0: gave up before placing B");
    EXPECT_EQ(abandoned_plan_bytes(), before);
  } else {
    const arma::mat none;  // B is read on the root only
    EXPECT_THROW(make_plan(strategy("dp"), *comm, shape, none, 0), PeerFailure);
    EXPECT_EQ(abandoned_plan_bytes() - before,
              plan_allocation(strategy("dp"), shape, comm->size(), comm->rank(), 8));
  }
  // A plan on a communicator that finished its calls frees its buffers as before.
  const std::uint64_t kept = abandoned_plan_bytes();
  const arma::mat b = mpi_world().rank() == 0 ? arma::mat(32, 16, arma::fill::ones) : arma::mat();
  make_plan(strategy("dp"), mpi_world(), shape, b, 0).reset();
  EXPECT_EQ(abandoned_plan_bytes(), kept);
  static auto* kept_comms = new std::vector<std::unique_ptr<Communicator>>();
  kept_comms->push_back(std::move(comm));
  mpi_world().barrier();
}

TEST_F(MpiFault, LargeMessagesAreSplitIntoPiecesMpiCanCount) {
  // A chunk limit of 4 elements stands in for INT_MAX: every call below needs several pieces.
  auto comm = mpi_session().world(MpiOptions{.chunk_limit = 4});
  const int p = comm->size(), r = comm->rank();
  std::vector<double> data(23);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = r == 0 ? static_cast<double>(i) : -1;
  comm->broadcast(data, 0);
  for (std::size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], static_cast<double>(i));
  std::vector<std::size_t> counts(static_cast<std::size_t>(p), 9);
  std::vector<double> mine(9, static_cast<double>(r)), all(9 * static_cast<std::size_t>(p));
  comm->allgatherv(mine, all, counts);
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<double>(i / 9));
  std::vector<double> sum(9);
  comm->reduce_scatter_sum(all, sum, counts);
  for (double x : sum) EXPECT_EQ(x, static_cast<double>(p * r));
}

}  // namespace
}  // namespace distmm::testing
