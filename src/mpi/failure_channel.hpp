#pragma once
// How the ranks of an MPI communicator hear that one of them failed (MpiOptions::hear_failures).
#include <mpi.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace distmm::mpi_detail {

// How the ranks of a communicator and of those split from it hear that one of them failed
// (MpiOptions::hear_failures). On a duplicate of the top communicator each rank keeps a
// receive posted; a failing rank sends its message to every other rank there, and waits poll
// that receive. MPI cannot cancel a collective, so an abandoned one may still complete into
// its buffers: callers keep them (the Python module does).
class FailureChannel {
 public:
  FailureChannel(MPI_Comm top, std::vector<int> world_ranks)
      : world_ranks_(std::move(world_ranks)) {
    MPI_Comm_dup(top, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Irecv(inbox_.data(), static_cast<int>(inbox_.size()), MPI_CHAR, MPI_ANY_SOURCE, 0, comm_,
              &posted_);
  }
  ~FailureChannel() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (posted_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&posted_);
      MPI_Wait(&posted_, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&comm_);
  }
  FailureChannel(const FailureChannel&) = delete;
  FailureChannel& operator=(const FailureChannel&) = delete;

  // "rank R failed: its message" once another rank told its failure, else "".
  const std::string& heard() {
    if (heard_.empty() && posted_ != MPI_REQUEST_NULL) {
      int done = 0;
      MPI_Status status;
      MPI_Test(&posted_, &done, &status);
      if (done) {
        int n = 0;
        MPI_Get_count(&status, MPI_CHAR, &n);
        const int from = world_ranks_.at(static_cast<std::size_t>(status.MPI_SOURCE));
        heard_ = "rank " + std::to_string(from) +
                 " failed: " + std::string(inbox_.data(), static_cast<std::size_t>(std::max(n, 0)));
      }
    }
    return heard_;
  }
  // Tells every other rank (once; never waits: the sends complete in the background).
  void tell(const std::string& why) {
    if (outbox_ != nullptr) return;
    // Never freed: sends still in flight read it after this channel is gone.
    outbox_ = new std::string(why.substr(0, inbox_.size()));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request sent = MPI_REQUEST_NULL;
      MPI_Isend(outbox_->data(), static_cast<int>(outbox_->size()), MPI_CHAR, r, 0, comm_, &sent);
      MPI_Request_free(&sent);
    }
  }
  const std::string* told() const { return outbox_; }

 private:
  std::vector<int> world_ranks_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::array<char, 1024> inbox_{};
  MPI_Request posted_ = MPI_REQUEST_NULL;
  std::string heard_;
  std::string* outbox_ = nullptr;
};

}  // namespace distmm::mpi_detail
