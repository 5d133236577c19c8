// The simulator never leaves a rank waiting: failures release everyone, deadlocks and
// mismatched collectives end the run with a message naming the ranks and operations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "distmm/error.hpp"
#include "distmm/fault.hpp"
#include "distmm/simulator.hpp"

namespace distmm {
namespace {

using ::testing::HasSubstr;

// Runs fn on `ranks` simulated ranks and returns the message of the error it must raise.
template <typename E>
std::string error_of(int ranks, const std::function<void(Communicator&)>& fn) {
  try {
    run_simulated(ranks, fn);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

TEST(SimFailure, ExceptionOnOneRankReleasesTheOthersAndReachesTheCaller) {
  for (int ranks : {2, 5, 64}) {
    const std::string what = error_of<std::runtime_error>(ranks, [](Communicator& comm) {
      if (comm.rank() == 1) throw std::runtime_error("boom on rank 1");
      std::vector<double> v(4);
      comm.broadcast(v, 0);  // everyone else waits for rank 1 here
    });
    EXPECT_EQ(what, "boom on rank 1");
  }
}

TEST(SimFailure, FailureReleasesARankBlockedInRecv) {
  std::atomic<int> released = 0;
  const std::string what = error_of<std::logic_error>(3, [&](Communicator& comm) {
    if (comm.rank() == 2) throw std::logic_error("rank 2 gave up");
    std::vector<double> v(1);
    try {
      comm.recv(v, 2, 0);
    } catch (const PeerFailure& e) {
      EXPECT_THAT(std::string(e.what()), HasSubstr("rank 2 failed: rank 2 gave up"));
      EXPECT_EQ(e.operation(), "recv(source=2, tag=0)");
      ++released;
      throw;
    }
  });
  EXPECT_EQ(what, "rank 2 gave up");
  EXPECT_EQ(released.load(), 2);
}

TEST(SimFailure, DeadlockIsDiagnosedWithoutTimeout) {
  const std::string what = error_of<DeadlockError>(3, [](Communicator& comm) {
    std::vector<double> v(2);
    // Every rank receives from its right neighbour first: nobody ever sends.
    comm.recv(v, (comm.rank() + 1) % comm.size(), 7);
  });
  EXPECT_THAT(what, HasSubstr("deadlock"));
  EXPECT_THAT(what, HasSubstr("rank 0 waits in recv(source=1, tag=7)"));
  EXPECT_THAT(what, HasSubstr("rank 2 waits in recv(source=0, tag=7)"));
}

// Sub-communicators: a deadlock spanning two communicators is named as such, with where each
// rank waits.
TEST(SimFailure, DeadlockAcrossSubcommunicatorsIsNamed) {
  const std::string what = error_of<DeadlockError>(4, [](Communicator& comm) {
    const auto pair = comm.split(comm.rank() / 2, 0);  // {0,1} and {2,3}
    // Rank 0 waits for rank 1 in their pair; rank 1 waits for rank 0 in the world.
    if (comm.rank() == 0) {
      pair->barrier();
    } else {
      comm.barrier();
    }
  });
  EXPECT_THAT(what, HasSubstr("deadlock across communicators"));
  EXPECT_THAT(what, HasSubstr("ranks 0,1 of world"));
  EXPECT_THAT(what, HasSubstr("rank 0 waits in barrier (collective #0), waiting for rank(s) 1 to "
                              "join on ranks 0,1 of world"));
  EXPECT_THAT(what, HasSubstr("rank 1 waits in barrier (collective #1), waiting for rank(s) 0"));
}

TEST(SimFailure, FailureInASubcommunicatorReleasesEveryCommunicator) {
  std::atomic<int> released = 0;
  const std::string what = error_of<std::runtime_error>(4, [&](Communicator& comm) {
    const auto odd_even = comm.split(comm.rank() % 2, 0);
    if (comm.rank() == 3) throw std::runtime_error("rank 3 failed");
    std::vector<double> v(3);
    try {
      if (comm.rank() == 1) {
        odd_even->allreduce_sum(v);  // waits for rank 3 in {1,3}
      } else {
        comm.broadcast(v, 0);  // waits for rank 3 in the world
      }
    } catch (const PeerFailure& e) {
      EXPECT_THAT(std::string(e.what()), HasSubstr("rank 3 failed"));
      ++released;
      throw;
    }
  });
  EXPECT_EQ(what, "rank 3 failed");
  EXPECT_EQ(released.load(), 3);
}

TEST(SimFailure, MismatchOnASubcommunicatorIsDiagnosed) {
  const std::string what = error_of<MismatchError>(4, [](Communicator& comm) {
    const auto half = comm.split(comm.rank() < 2 ? 0 : 1, 0);
    std::vector<double> v(2);
    if (comm.rank() == 3) {
      half->allreduce_sum(v);
    } else {
      half->broadcast(v, 0);
    }
  });
  EXPECT_THAT(what, HasSubstr("broadcast(root=0)"));
  EXPECT_THAT(what, HasSubstr("allreduce"));
}

TEST(SimFailure, InjectedCrashReachesThroughASubcommunicator) {
  const std::string what = error_of<InjectedFault>(3, [](Communicator& comm) {
    comm.inject(parse_fault("crash:2:2"));  // rank 2's second call: its first on the half
    const auto half = comm.split(comm.rank() == 0 ? 0 : 1, 0);
    std::vector<double> v(1);
    half->allreduce_sum(v);
    comm.barrier();
  });
  EXPECT_THAT(what, HasSubstr("rank 2: injected fault crash:2:2: crashed at communication call 2 "
                              "(allreduce)"));
}

TEST(SimFailure, UnsafeSendSendIsReportedAsDeadlock) {
  const std::string what = error_of<DeadlockError>(2, [](Communicator& comm) {
    std::vector<double> v(2), w(2);
    const int other = 1 - comm.rank();
    comm.send(v, other, 0);  // synchronous: both wait for a receive that never comes
    comm.recv(w, other, 0);
  });
  EXPECT_THAT(what, HasSubstr("send(dest=1, tag=0, 2 elements): no matching recv"));
}

TEST(SimFailure, RankReturningEarlyIsReported) {
  const std::string what = error_of<DeadlockError>(3, [](Communicator& comm) {
    if (comm.rank() == 2) return;
    std::vector<double> v(1);
    comm.broadcast(v, 0);
  });
  EXPECT_THAT(what, HasSubstr("rank 2 has returned"));
  EXPECT_THAT(what, HasSubstr("waiting for rank(s) 2 (returned) to join"));
}

TEST(SimFailure, DifferentCollectivesAtTheSameCallAreAMismatch) {
  const std::string what = error_of<MismatchError>(2, [](Communicator& comm) {
    std::vector<double> v(2);
    if (comm.rank() == 0) {
      comm.broadcast(v, 0);
    } else {
      comm.gatherv(v, std::vector<double>{}, std::vector<std::size_t>{2, 2}, 0);
    }
  });
  EXPECT_THAT(what, HasSubstr("collective #0"));
  EXPECT_THAT(what, HasSubstr("broadcast(root=0)"));
  EXPECT_THAT(what, HasSubstr("gatherv(root=0)"));
}

TEST(SimFailure, DifferentRootsAreAMismatch) {
  const std::string what = error_of<MismatchError>(3, [](Communicator& comm) {
    std::vector<double> v(2);
    comm.broadcast(v, comm.rank() == 2 ? 1 : 0);
  });
  EXPECT_THAT(what, HasSubstr("broadcast(root=0)"));
  EXPECT_THAT(what, HasSubstr("rank 2 in broadcast(root=1)"));
}

TEST(SimFailure, DisagreeingCountsAreAMismatch) {
  const std::string what = error_of<MismatchError>(2, [](Communicator& comm) {
    const std::vector<std::size_t> counts =
        comm.rank() == 0 ? std::vector<std::size_t>{1, 2} : std::vector<std::size_t>{2, 1};
    std::vector<double> mine(counts[static_cast<std::size_t>(comm.rank())]), all(3);
    comm.allgatherv(mine, all, counts);
  });
  EXPECT_THAT(what, HasSubstr("counts {1,2}"));
  EXPECT_THAT(what, HasSubstr("counts {2,1}"));
}

TEST(SimFailure, ReceiveBufferTooSmallIsAMismatch) {
  const std::string what = error_of<MismatchError>(2, [](Communicator& comm) {
    std::vector<double> send(3), recv(comm.rank() == 0 ? 2 : 0);
    const std::vector<std::size_t> counts{3, 0};
    std::vector<double> mine(comm.rank() == 0 ? 3 : 0);
    comm.gatherv(mine, recv, counts, 0);
  });
  EXPECT_THAT(what, HasSubstr("rank 0 in gatherv(root=0): receive buffer holds 2 elements"));
}

TEST(SimFailure, MessageOfTheWrongSizeIsAMismatch) {
  const std::string what = error_of<MismatchError>(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      comm.send(std::vector<double>(5), 1, 0);
    } else {
      std::vector<double> in(4);
      comm.recv(in, 0, 0);
    }
  });
  EXPECT_THAT(what, HasSubstr("recv(source=0, tag=0) of 4 double elements got a message of 5"));
}

TEST(SimFailure, InvalidPeerIsAnError) {
  const std::string what = error_of<CommError>(2, [](Communicator& comm) {
    std::vector<double> v(1);
    comm.broadcast(v, 2);
  });
  EXPECT_THAT(what, HasSubstr("root 2 is not a rank of this communicator (size 2)"));
}

TEST(SimFailure, InjectedCrashNamesTheRankAndReleasesTheOthers) {
  try {
    run_simulated(4, [](Communicator& comm) {
      comm.inject(parse_fault("crash:2"));
      std::vector<double> v(3);
      comm.broadcast(v, 0);
      comm.barrier();
    });
    ADD_FAILURE() << "expected the injected crash";
  } catch (const InjectedFault& e) {
    EXPECT_EQ(e.rank(), 2);
    EXPECT_THAT(std::string(e.what()), HasSubstr("rank 2: injected fault crash:2"));
  }
}

TEST(SimFailure, InjectedSkipIsDiagnosedAsDeadlock) {
  const std::string what = error_of<DeadlockError>(3, [](Communicator& comm) {
    comm.inject(parse_fault("skip:0"));
    std::vector<double> v(3);
    comm.broadcast(v, 0);
    comm.allreduce_sum(v);
  });
  EXPECT_THAT(what, HasSubstr("rank 1 waits in broadcast(root=0) (collective #0), waiting for "
                              "rank(s) 0 to join"));
  EXPECT_THAT(what, HasSubstr("rank 0 waits in allreduce (collective #1)"));
}

TEST(SimFailure, DelayKeepsResultsExact) {
  run_simulated(5, [](Communicator& comm) {
    comm.inject(parse_fault("delay:2:9"));
    for (int round = 0; round < 5; ++round) {
      std::vector<double> v{static_cast<double>(comm.rank() + round)};
      comm.allreduce_sum(v);
      EXPECT_EQ(v[0], 10.0 + 5 * round);
      const int next = (comm.rank() + 1) % comm.size();
      const int prev = (comm.rank() + comm.size() - 1) % comm.size();
      std::vector<double> in(1);
      comm.sendrecv(std::vector<double>{static_cast<double>(comm.rank())}, next, round, in, prev,
                    round);
      EXPECT_EQ(in[0], prev);
    }
  });
}

TEST(SimFailure, ManyRanksRunAndReturn) {
  std::vector<int> seen(256, 0);
  run_simulated(256, [&](Communicator& comm) {
    seen[static_cast<std::size_t>(comm.rank())] = comm.size();
    comm.barrier();
  });
  for (int s : seen) EXPECT_EQ(s, 256);
}

}  // namespace
}  // namespace distmm
