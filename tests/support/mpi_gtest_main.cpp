// Shared main for GoogleTest suites run under mpirun.
//
// Every rank runs every test; MpiTest combines each test's result across ranks, and rank 0
// alone prints the usual gtest output; other ranks print only their own failed assertions,
// prefixed with their rank. The process exit code
// is non-zero on every rank if any rank failed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <vector>

#include "distmm/mpi_session.hpp"
#include "support/mpi_world.hpp"

namespace distmm::testing {
namespace {

std::unique_ptr<Communicator> g_world;
MpiSession* g_session = nullptr;

// Prints failed assertions only, prefixed with the rank (for ranks other than 0).
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::cerr << "[rank " << rank_ << "] " << (result.file_name() ? result.file_name() : "?") << ":"
              << result.line_number() << ": " << result.summary() << std::endl;
  }

 private:
  int rank_;
};

}  // namespace

Communicator& mpi_world() {
  return *g_world;
}
MpiSession& mpi_session() {
  return *g_session;
}

void MpiTest::TearDown() {
  Communicator& comm = mpi_world();
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<double> failed(p, 0.0);
  failed[static_cast<std::size_t>(comm.rank())] = HasFailure() ? 1.0 : 0.0;
  comm.allreduce_sum(failed);
  if (comm.rank() != 0) return;
  for (std::size_t r = 1; r < p; ++r) {
    if (failed[r] != 0.0)
      ADD_FAILURE() << "failed on rank " << r << " (see its [rank " << r << "] lines)";
  }
}

}  // namespace distmm::testing

int main(int argc, char** argv) {
  distmm::MpiSession session(argc, argv);
  distmm::testing::g_session = &session;
  // Every MPI test runs with a generous bound on each wait, so a hang fails fast
  // (DISTMM_TEST_TIMEOUT=0 selects MPI's blocking calls instead, under CTest's own timeout);
  // the chunk limit can be lowered to exercise the splitting of large messages on small data.
  distmm::MpiOptions options{.timeout_s = 60};
  if (const char* timeout = std::getenv("DISTMM_TEST_TIMEOUT")) {
    options.timeout_s = std::strtod(timeout, nullptr);
  }
  if (const char* limit = std::getenv("DISTMM_TEST_CHUNK_LIMIT")) {
    options.chunk_limit = std::strtoull(limit, nullptr, 10);
  }
  distmm::testing::g_world = session.world(options);
  ::testing::InitGoogleTest(&argc, argv);
  auto& comm = *distmm::testing::g_world;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (comm.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new distmm::testing::RankFailurePrinter(comm.rank()));
  }
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  std::vector<double> any{static_cast<double>(failed)};
  comm.allreduce_sum(any);
  distmm::testing::g_world.reset();
  return any[0] > 0 ? 1 : 0;
}
