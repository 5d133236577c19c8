#pragma once
// A large sum onto one rank as a pipelined chain of point-to-point messages, for the MPI
// communicator's waits that poll (MpiOptions: --timeout, hear_failures). Polling needs
// non-blocking calls, and Open MPI's MPI_Ireduce (libnbc) receives the whole buffer into a
// temporary before summing it: tp-row's 32 MiB reduce at 2048^3 took 71 ms on the root against
// 15 for the blocking MPI_Reduce (under mpirun -np 2; cut into 1 MiB MPI_Ireduce pieces, 35).
// The chain streams segments small enough to stay in cache: the last rank sends its buffer,
// each rank before it adds its own part of every segment it receives and passes it on, the
// root adds each into its buffer.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "distmm/communicator.hpp"

namespace distmm::mpi_detail {

inline constexpr std::size_t kChainSegmentBytes = 256 * 1024;
inline constexpr std::size_t kChainSlots = 4;  // segments in flight on each rank

template <typename T>
void add_into(T* to, const T* from, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) to[i] += from[i];
}

inline void add_into(void* to, const void* from, std::size_t n, DataType type) {
  if (type == DataType::f32) {
    add_into(static_cast<float*>(to), static_cast<const float*>(from), n);
  } else {
    add_into(static_cast<double*>(to), static_cast<const double*>(from), n);
  }
}

// Sums every rank's `data` (count elements of `type`, `mpi_type`) into the root's, in place
// there; the others' only read. `scratch` holds the segments in flight (grown once, kept by
// the caller: an abandoned chain's receives may still write into it). `wait(request)` waits
// for one request and throws to abandon the chain; `check(code)` throws for an MPI error.
template <typename Wait, typename Check>
void chain_reduce_sum(void* data, std::size_t count, DataType type, MPI_Datatype mpi_type, int root,
                      int rank, int size, MPI_Comm comm, int tag,
                      std::vector<unsigned char>& scratch, Wait&& wait, Check&& check) {
  const std::size_t esize = size_of(type);
  const std::size_t seg = kChainSegmentBytes / esize;
  const std::size_t segments = (count + seg - 1) / seg;
  const auto length = [&](std::size_t s) {
    return static_cast<int>(std::min(seg, count - s * seg));
  };
  const auto part = [&](std::size_t s) {
    return static_cast<unsigned char*>(data) + s * seg * esize;
  };
  // Place in the chain: the root first, then the ranks after it.
  const int place = (rank - root + size) % size;
  const int toward_root = (rank - 1 + size) % size, from_tail = (rank + 1) % size;
  std::array<MPI_Request, kChainSlots> received, sent;
  received.fill(MPI_REQUEST_NULL);
  sent.fill(MPI_REQUEST_NULL);
  if (place == size - 1) {  // the tail sends its own buffer, a window of segments at a time
    for (std::size_t s = 0; s < segments; ++s) {
      MPI_Request& r = sent[s % kChainSlots];
      if (r != MPI_REQUEST_NULL) wait(r);
      check(MPI_Isend(part(s), length(s), mpi_type, toward_root, tag, comm, &r));
    }
  } else {
    if (scratch.size() < kChainSlots * kChainSegmentBytes) {
      scratch.resize(kChainSlots * kChainSegmentBytes);
    }
    const auto slot = [&](std::size_t s) {
      return scratch.data() + (s % kChainSlots) * kChainSegmentBytes;
    };
    const auto receive = [&](std::size_t s) {
      check(MPI_Irecv(slot(s), length(s), mpi_type, from_tail, tag, comm,
                      &received[s % kChainSlots]));
    };
    for (std::size_t s = 0; s < std::min(segments, kChainSlots); ++s) receive(s);
    for (std::size_t s = 0; s < segments; ++s) {
      const std::size_t j = s % kChainSlots;
      wait(received[j]);
      if (place == 0) {
        add_into(part(s), slot(s), static_cast<std::size_t>(length(s)), type);
      } else {
        add_into(slot(s), part(s), static_cast<std::size_t>(length(s)), type);
        check(MPI_Isend(slot(s), length(s), mpi_type, toward_root, tag, comm, &sent[j]));
      }
      if (s + kChainSlots < segments) {
        if (sent[j] != MPI_REQUEST_NULL) wait(sent[j]);
        receive(s + kChainSlots);
      }
    }
  }
  for (MPI_Request& r : sent) {
    if (r != MPI_REQUEST_NULL) wait(r);
  }
}

}  // namespace distmm::mpi_detail
