// Sharded checkpoints on the simulator: the shared cases at 1..4 ranks, and resharding: saved
// by every rank count and strategy, resumed by every other.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "distmm/checkpoint.hpp"
#include "distmm/simulator.hpp"
#include "strategy/checkpoint_cases.hpp"
#include "strategy/formulas.hpp"

namespace distmm::testing {
namespace {

using Param = std::tuple<CheckpointCase, int>;
class SimCheckpoint : public ::testing::TestWithParam<Param> {};

TEST_P(SimCheckpoint, Case) {
  const auto& [c, ranks] = GetParam();
  run_simulated(ranks, c.run);
}

INSTANTIATE_TEST_SUITE_P(Cases, SimCheckpoint,
                         ::testing::Combine(::testing::ValuesIn(checkpoint_cases().begin(),
                                                                checkpoint_cases().end()),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(std::get<0>(p.param).name) + "_" +
                                  std::to_string(std::get<1>(p.param)) + "ranks";
                         });

// Saved at step 4 by P ranks with one strategy (hsdp on every mesh), resumed to step 9 by Q
// ranks with any: W
// equals single-process Adam's within 1e-12 (bitwise the uninterrupted run's when P = Q and
// the strategy is the same), and each rank read exactly its columns.
TEST(SimCheckpointResharding, EveryRankCountAndStrategyResumesEveryOther) {
  const TrainData d = checkpoint_problem();
  TrainConfig reference_config{9, 0.05};
  reference_config.optimizer = Optimizer::adam;
  const TrainResult reference = train_single_process(d.x, d.t, d.w0, reference_config);
  for (int saved_by = 1; saved_by <= 4; ++saved_by) {
    for (const TrainSetup& saver : train_setups(saved_by)) {
      std::filesystem::path dir;
      arma::mat uninterrupted;
      run_simulated(saved_by, [&](Communicator& comm) {
        const SharedDir shared(comm);
        CheckpointConfig save;
        save.save_dir = shared.path() / "ck";
        save.every = 4;
        save.keep = 3;
        const TrainResult r =
            train_with_checkpoints(comm, saver.strategy, d, 9, save, saver.replicas);
        if (comm.rank() != 0) return;
        uninterrupted = r.w;
        // Keep the checkpoint beyond this world: copy it out before the shared dir goes.
        dir = std::filesystem::temp_directory_path() /
              ("distmm-resharding-" + std::to_string(saved_by) +
               std::string(saver.strategy.name()) + std::to_string(saver.replicas));
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
        std::filesystem::copy(save.save_dir / "step-4", dir / "step-4",
                              std::filesystem::copy_options::recursive);
      });
      for (int resumed_by = 1; resumed_by <= 4; ++resumed_by) {
        for (const TrainSetup& resumer : train_setups(resumed_by)) {
          SCOPED_TRACE(name_of(saver) + " on " + std::to_string(saved_by) + " ranks, resumed by " +
                       name_of(resumer) + " on " + std::to_string(resumed_by));
          run_simulated(resumed_by, [&](Communicator& comm) {
            CheckpointConfig resume;
            resume.resume = dir;
            const TrainResult r =
                train_with_checkpoints(comm, resumer.strategy, d, 9, resume, resumer.replicas);
            EXPECT_EQ(r.first_step, 4u);
            EXPECT_EQ(r.bytes_read,
                      checkpoint_read_bytes(
                          kCheckpointShape,
                          expected_checkpoint_columns(resumer.strategy, kCheckpointShape,
                                                      resumed_by, comm.rank(), resumer.replicas),
                          8, Optimizer::adam));
            if (comm.rank() != 0) return;
            const double rel = arma::abs(r.w - reference.w).max() / arma::abs(reference.w).max();
            EXPECT_LE(rel, 1e-12);
            if (resumed_by == saved_by && resumer.strategy == saver.strategy &&
                resumer.replicas == saver.replicas) {
              EXPECT_TRUE(arma::approx_equal(r.w, uninterrupted, "absdiff", 0.0));
            }
          });
        }
      }
      std::filesystem::remove_all(dir);
    }
  }
}

}  // namespace
}  // namespace distmm::testing
