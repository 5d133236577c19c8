// Sharded checkpoints on the simulator: the shared cases at 1..4 ranks, and resharding: saved
// by every rank count and strategy, resumed by every other.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "distmm/checkpoint.hpp"
#include "distmm/layout.hpp"
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

// A grid of blocks: rank r of rows x cols blocks of W (k x n).
Block grid_block(std::size_t k, std::size_t n, int rows, int cols, int r) {
  const Shard rs = shard_of(k, rows, r / cols), cs = shard_of(n, cols, r % cols);
  return {rs.offset, rs.count, cs.offset, cs.count};
}

// Checkpoints of 2-D blocks: W (and Adam's M and V) saved in the blocks of one grid of ranks
// and loaded in the blocks of another (whole columns, whole rows, other grids, other rank
// counts): every rank reads exactly its block, equal to what was saved. Manifests whose blocks
// overlap or leave a gap are refused with the shards named.
TEST(SimCheckpointBlocks, SavedInOneGridOfBlocksLoadedInAnother) {
  const std::size_t k = 7, n = 9;
  CheckpointMeta meta;
  meta.step = 3;
  meta.strategy = "grid";
  meta.shape = {5, k, n};
  meta.optimizer = Optimizer::adam;
  meta.lr = 0.1, meta.beta1 = 0.9, meta.beta2 = 0.999, meta.eps = 1e-8;
  arma::mat w(k, n), mm(k, n), v(k, n);
  for (std::size_t i = 0; i < w.n_elem; ++i) {
    const auto x = static_cast<double>(i);
    w(i) = x, mm(i) = 1000.0 + x, v(i) = -x;
  }
  // (ranks, block rows, block columns): 2 x 2, whole columns (1 x 3), whole rows (2 x 1),
  // 3 x 2, one block, and a row each (7 x 1).
  const std::vector<std::tuple<int, int, int>> grids{{4, 2, 2}, {3, 1, 3}, {2, 2, 1},
                                                     {6, 3, 2}, {1, 1, 1}, {7, 7, 1}};
  for (const auto& [savers, save_rows, save_cols] : grids) {
    meta.ranks = savers;
    const auto dir = std::filesystem::temp_directory_path() /
                     ("distmm-blocks-" + std::to_string(savers) + "-" + std::to_string(save_rows));
    std::filesystem::remove_all(dir);
    run_simulated(savers, [&, save_rows = save_rows, save_cols = save_cols](Communicator& comm) {
      const Block b = grid_block(k, n, save_rows, save_cols, comm.rank());
      const arma::mat parts[] = {block_of(w, b, false), block_of(mm, b, false),
                                 block_of(v, b, false)};
      const double* sections[] = {parts[0].memptr(), parts[1].memptr(), parts[2].memptr()};
      const SaveFigures f =
          save_checkpoint<double>(comm, dir, meta, std::span<const double* const>(sections), 1, b);
      EXPECT_EQ(f.bytes_written, 3 * b.elements() * sizeof(double));
    });
    for (const auto& [loaders, load_rows, load_cols] : grids) {
      SCOPED_TRACE("saved by " + std::to_string(save_rows) + " x " + std::to_string(save_cols) +
                   " blocks, loaded by " + std::to_string(load_rows) + " x " +
                   std::to_string(load_cols));
      run_simulated(loaders, [&, load_rows = load_rows, load_cols = load_cols](Communicator& comm) {
        const Checkpoint ck = open_checkpoint(comm, dir, meta);
        const Block b = grid_block(k, n, load_rows, load_cols, comm.rank());
        arma::mat got[3];
        double* sections[3];
        for (int i = 0; i < 3; ++i) {
          got[i].set_size(b.rows, b.cols);
          sections[i] = got[i].memptr();
        }
        const std::uint64_t read =
            load_block<double>(comm, ck, b, std::span<double* const>(sections));
        EXPECT_EQ(read, checkpoint_read_bytes(b, sizeof(double), Optimizer::adam));
        EXPECT_TRUE(arma::approx_equal(got[0], block_of(w, b, false), "absdiff", 0.0));
        EXPECT_TRUE(arma::approx_equal(got[1], block_of(mm, b, false), "absdiff", 0.0));
        EXPECT_TRUE(arma::approx_equal(got[2], block_of(v, b, false), "absdiff", 0.0));
      });
    }
    std::filesystem::remove_all(dir);
  }

  // Blocks that overlap, and blocks that leave a gap: refused when opened.
  const auto bad = std::filesystem::temp_directory_path() / "distmm-blocks-bad";
  meta.ranks = 2;
  for (const bool overlap : {true, false}) {
    std::filesystem::remove_all(bad);
    run_simulated(2, [&](Communicator& comm) {
      // Rank 0 rows 0-3 of all columns; rank 1 rows 3-6 (overlap) or 4-5 (row 6 left out).
      const Block b =
          comm.rank() == 0 ? Block{0, 4, 0, n} : (overlap ? Block{3, 4, 0, n} : Block{4, 2, 0, n});
      const arma::mat part = block_of(w, b, false);
      const double* sections[] = {part.memptr(), part.memptr(), part.memptr()};
      save_checkpoint<double>(comm, bad, meta, std::span<const double* const>(sections), 1, b);
    });
    run_simulated(2, [&](Communicator& comm) {
      try {
        open_checkpoint(comm, bad, meta);
        ADD_FAILURE() << "a checkpoint whose blocks " << (overlap ? "overlap" : "leave a gap")
                      << " was opened";
      } catch (const BadCheckpoint& e) {
        EXPECT_THAT(std::string(e.what()),
                    ::testing::HasSubstr(overlap ? "shards shard-00000.bin and shard-00001.bin "
                                                   "both cover row 3 of column 0"
                                                 : "9 of W's 63 elements covered by no shard"));
      }
    });
  }
  std::filesystem::remove_all(bad);
}

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
            train_with_checkpoints(comm, saver.strategy, d, 9, save, saver.settings());
        if (comm.rank() != 0) return;
        uninterrupted = r.w;
        // Keep the checkpoint beyond this world: copy it out before the shared dir goes.
        dir = std::filesystem::temp_directory_path() /
              ("distmm-resharding-" + std::to_string(saved_by) +
               std::string(saver.strategy.name()) + std::to_string(saver.replicas) +
               (saver.grid ? grid_text(*saver.grid) : std::string()));
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
                train_with_checkpoints(comm, resumer.strategy, d, 9, resume, resumer.settings());
            EXPECT_EQ(r.first_step, 4u);
            EXPECT_EQ(r.bytes_read,
                      checkpoint_read_bytes(expected_checkpoint_block(resumer, kCheckpointShape,
                                                                      resumed_by, comm.rank()),
                                            8, Optimizer::adam));
            if (comm.rank() != 0) return;
            const double rel = arma::abs(r.w - reference.w).max() / arma::abs(reference.w).max();
            EXPECT_LE(rel, 1e-12);
            if (resumed_by == saved_by && same_setup(resumer, saver)) {
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
