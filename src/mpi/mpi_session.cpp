#include "distmm/mpi_session.hpp"

#include <mpi.h>

#include <boost/mpi/communicator.hpp>
#include <boost/mpi/datatype.hpp>
#include <boost/mpi/environment.hpp>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "distmm/error.hpp"

namespace distmm {
namespace {

MPI_Datatype mpi_type(DataType t) {
  return t == DataType::f64 ? boost::mpi::get_mpi_datatype<double>()
                            : boost::mpi::get_mpi_datatype<float>();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator()
      : comm_(MPI_COMM_WORLD, boost::mpi::comm_duplicate),
        rank_(comm_.rank()),
        size_(comm_.size()) {
    MPI_Comm_set_errhandler(raw(), MPI_ERRORS_RETURN);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void do_barrier() override { check(MPI_Barrier(raw()), "barrier"); }

 protected:
  void do_send(ConstBuffer data, int dest, int tag) override {
    check(MPI_Send(data.data, to_int(data.count, "send"), mpi_type(data.type), dest, tag, raw()),
          "send");
  }
  void do_recv(Buffer data, int source, int tag) override {
    MPI_Status status;
    check(MPI_Recv(data.data, to_int(data.count, "recv"), mpi_type(data.type), source, tag, raw(),
                   &status),
          "recv");
    check_received(status, data, source, "recv");
  }
  void do_sendrecv(ConstBuffer send, int dest, int send_tag, Buffer recv, int source,
                   int recv_tag) override {
    MPI_Status status;
    check(MPI_Sendrecv(send.data, to_int(send.count, "sendrecv"), mpi_type(send.type), dest,
                       send_tag, recv.data, to_int(recv.count, "sendrecv"), mpi_type(recv.type),
                       source, recv_tag, raw(), &status),
          "sendrecv");
    check_received(status, recv, source, "sendrecv");
  }
  void do_broadcast(Buffer data, int root) override {
    check(MPI_Bcast(data.data, to_int(data.count, "broadcast"), mpi_type(data.type), root, raw()),
          "broadcast");
  }
  void do_scatterv(ConstBuffer send, std::span<const std::size_t> counts, Buffer recv,
                   int root) override {
    std::vector<int> c, d;
    if (rank_ == root) layout(counts, c, d, "scatterv");
    check(MPI_Scatterv(send.data, rank_ == root ? c.data() : nullptr,
                       rank_ == root ? d.data() : nullptr, mpi_type(recv.type), recv.data,
                       to_int(recv.count, "scatterv"), mpi_type(recv.type), root, raw()),
          "scatterv");
  }
  void do_gatherv(ConstBuffer send, Buffer recv, std::span<const std::size_t> counts,
                  int root) override {
    std::vector<int> c, d;
    layout(counts, c, d, "gatherv");
    check(MPI_Gatherv(send.data, to_int(send.count, "gatherv"), mpi_type(send.type), recv.data,
                      c.data(), d.data(), mpi_type(send.type), root, raw()),
          "gatherv");
  }
  void do_allgatherv(ConstBuffer send, Buffer recv, std::span<const std::size_t> counts) override {
    std::vector<int> c, d;
    layout(counts, c, d, "allgatherv");
    check(MPI_Allgatherv(send.data, to_int(send.count, "allgatherv"), mpi_type(send.type),
                         recv.data, c.data(), d.data(), mpi_type(recv.type), raw()),
          "allgatherv");
  }
  void do_allreduce_sum(Buffer data) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data.data, to_int(data.count, "allreduce"),
                        mpi_type(data.type), MPI_SUM, raw()),
          "allreduce");
  }
  void do_reduce_scatter_sum(ConstBuffer send, Buffer recv,
                             std::span<const std::size_t> counts) override {
    std::vector<int> c, d;
    layout(counts, c, d, "reduce_scatter");
    // Every rank needs a valid receive pointer even for a zero count.
    double empty = 0;
    check(MPI_Reduce_scatter(send.data, recv.count ? recv.data : &empty, c.data(),
                             mpi_type(send.type), MPI_SUM, raw()),
          "reduce_scatter");
  }

 private:
  MPI_Comm raw() const { return MPI_Comm(comm_); }

  int to_int(std::size_t n, const char* operation) const {
    if (n > static_cast<std::size_t>(INT_MAX)) {
      throw CommError("rank " + std::to_string(rank_) + ": " + operation + ": " +
                          std::to_string(n) + " elements exceed MPI's int count limit",
                      rank_, operation);
    }
    return static_cast<int>(n);
  }

  void layout(std::span<const std::size_t> counts, std::vector<int>& c, std::vector<int>& d,
              const char* operation) const {
    if (counts.size() != static_cast<std::size_t>(size_)) {
      throw CommError("rank " + std::to_string(rank_) + ": " + operation + ": " +
                          std::to_string(counts.size()) + " counts for " + std::to_string(size_) +
                          " ranks",
                      rank_, operation);
    }
    std::size_t offset = 0;
    for (std::size_t n : counts) {
      c.push_back(to_int(n, operation));
      d.push_back(to_int(offset, operation));
      offset += n;
    }
  }

  void check(int code, const char* operation) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw CommError("rank " + std::to_string(rank_) + ": MPI " + operation +
                        " failed: " + std::string(text, static_cast<std::size_t>(length)),
                    rank_, operation);
  }

  void check_received(const MPI_Status& status, Buffer data, int source,
                      const char* operation) const {
    int received = 0;
    MPI_Get_count(&status, mpi_type(data.type), &received);
    if (static_cast<std::size_t>(received) != data.count) {
      throw MismatchError("rank " + std::to_string(rank_) + ": " + operation + "(source=" +
                              std::to_string(source) + ") of " + std::to_string(data.count) +
                              " elements got a message of " + std::to_string(received),
                          rank_, operation);
    }
  }

  boost::mpi::communicator comm_;
  int rank_;
  int size_;
};

}  // namespace

struct MpiSession::Impl {
  Impl(int& argc, char**& argv) : env(argc, argv, boost::mpi::threading::funneled) {}
  boost::mpi::environment env;
};

MpiSession::MpiSession(int& argc, char**& argv) : impl_(std::make_unique<Impl>(argc, argv)) {}
MpiSession::~MpiSession() = default;

bool MpiSession::launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

std::unique_ptr<Communicator> MpiSession::world() const {
  return std::make_unique<MpiCommunicator>();
}

int MpiSession::ranks_on_this_host() const {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int size = 1;
  MPI_Comm_size(local, &size);
  MPI_Comm_free(&local);
  return size;
}

void MpiSession::abort(int code) const {
  impl_->env.abort(code);
  std::abort();  // not reached: MPI_Abort does not return
}

}  // namespace distmm
