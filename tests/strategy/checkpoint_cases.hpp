#pragma once
// Sharded checkpoints on every backend: saves, resumes, refusals of bad checkpoints.
#include <filesystem>
#include <span>
#include <string>

#include "distmm/communicator.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train.hpp"
#include "strategy/train_cases.hpp"

namespace distmm::testing {

// The problem every checkpoint case trains on: uneven shards at 2..4 ranks.
inline constexpr MatmulShape kCheckpointShape{23, 6, 7};
TrainData checkpoint_problem();

// Trains `strategy` with Adam (lr 0.05) for `steps` steps on kCheckpointShape, with
// checkpoints as `checkpoint` says (the data's checksums filled in).
TrainResult train_with_checkpoints(Communicator& comm, const Strategy& strategy, const TrainData& d,
                                   std::size_t steps, CheckpointConfig checkpoint,
                                   const StrategySettings& settings = {});

// A fresh directory every rank sees (rank 0 makes it), removed by rank 0 at the end.
class SharedDir {
 public:
  explicit SharedDir(Communicator& comm);
  ~SharedDir();
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  Communicator& comm_;
  std::filesystem::path path_;
};

using CheckpointCase = TrainCase;
std::span<const CheckpointCase> checkpoint_cases();

}  // namespace distmm::testing
