#pragma once
// Sharded checkpoints of training state: a file per rank, one commit point, and resharding
// on load (any rank count reads any checkpoint, each rank only the bytes it needs).
//
// What is saved: W (k x n) and, for Adam, its moments M and V (k x n each), in 2-D blocks that
// tile W once: each rank writes its block (rows x columns, column-major) of each to its own
// file. The 1-D strategies' blocks are whole columns — rank r's own shard under FSDP, its share
// of the replica under DP (HSDP's ranks split their shard among its replicas; see
// TrainingStep::saved() in train_step.hpp) — so such a block is one contiguous run of bytes;
// a grid's are W(its rows of the inner dimension, N_j).
//
//   DIR/step-40/manifest.json    the step, strategy, ranks, shapes, dtype, optimizer settings,
//                                CRC-32 of X and T, and per shard: file, first row, rows, first
//                                column, columns, bytes, CRC-32 of the file
//   DIR/step-40/shard-00000.bin  rank 0's block of W, then of M, then of V
//   DIR/step-40/shard-00001.bin  ...
//   DIR/latest                   "step-40\n": the newest committed checkpoint, for people and
//                                tools (loading scans the step-N directories themselves)
//   DIR/.partial-step-60/        a save in progress, or one a crash interrupted (ignored by
//                                loads, removed by the next save)
//
// Commit protocol (save_checkpoint; every step is collective or followed by an agreement, so
// an error on any rank ends the save on every rank with nothing committed):
//   1. rank 0 removes what failed saves left (.partial-*, .removing-*) and creates
//      DIR/.partial-step-N;
//   2. every rank writes its shard file, computing its CRC-32 as it writes, and fsyncs it;
//   3. the ranks agree that every shard is on disk, and rank 0 receives every shard's column
//      range, size and CRC-32;
//   4. rank 0 writes manifest.json and fsyncs it and the directory, then renames
//      .partial-step-N to step-N: the commit point. It fsyncs DIR, writes latest.tmp, fsyncs
//      it, renames it over latest, fsyncs DIR again, and retires committed checkpoints beyond
//      the newest `keep` (renamed to .removing-step-M first, so a crash mid-removal leaves
//      no step-M that is incomplete);
//   5. the ranks agree that rank 0 committed.
// A committed checkpoint is never written again.
//
// Loading (open_checkpoint, then load_block): rank 0 resolves the checkpoint (DIR's newest
// step-N, or the DIR/step-N given), validates the manifest (fields, units, shards tiling W
// exactly once) and the run's compatibility (shapes, dtype, optimizer, X and T), and checks
// every shard file's size. Each rank then preads exactly the byte ranges of the block it now
// owns from the files that hold them (a run per column of a file's block, or one run where
// whole columns of it are wanted), computing a CRC-32 of every piece; rank 0 gathers the
// pieces' CRCs and combines them per file (zlib's crc32_combine) into each file's CRC-32, so
// every byte is verified although no rank reads a whole foreign shard. A manifest without
// rows (an older one) means whole columns.
//
// Errors are agreed: every rank throws the same exception, with the first failing rank's
// message, which names the file and what is wrong. A bad checkpoint is a BadCheckpoint (an
// InputError: exit code 2 in the program); a save that cannot be written is a
// CheckpointWriteError (exit code 3).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/error.hpp"
#include "distmm/layout.hpp"
#include "distmm/shape.hpp"
#include "distmm/sharding.hpp"
#include "distmm/train.hpp"

namespace distmm {

class BadCheckpoint : public InputError {
 public:
  using InputError::InputError;
};

class CheckpointWriteError : public Error {
 public:
  using Error::Error;
};

// What a checkpoint says besides its shards.
struct CheckpointMeta {
  std::size_t step = 0;  // training steps completed
  std::string strategy;  // of the run that saved (any strategy may load it)
  int ranks = 0;         // of the run that saved
  MatmulShape shape;     // X is m x k, W is k x n
  DataType dtype = DataType::f64;
  Optimizer optimizer = Optimizer::sgd;
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0;
  // Of X's, T's and the initial W's elements, column-major (resuming replays nothing, but
  // the program verifies a resumed run against single-process training from W0).
  std::uint32_t x_crc32 = 0, t_crc32 = 0, w0_crc32 = 0;
};

struct CheckpointShard {
  std::string file;  // in the checkpoint's directory
  std::size_t first_row = 0, rows = 0;
  std::size_t first_column = 0, columns = 0;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

struct Checkpoint {
  std::filesystem::path dir;  // DIR/step-N
  CheckpointMeta meta;
  std::vector<CheckpointShard> shards;  // by first column, then first row
};

// Matrices saved per parameter: W alone for SGD, W, M and V for Adam.
inline std::size_t checkpoint_sections(Optimizer o) {
  return 1 + optimizer_state_per_parameter(o);
}

// Bytes a rank saving (or loading) `block` of W writes per save (its shard file), and reads
// when resuming: the same figure (see TrainingStep::saved() in train_step.hpp).
std::uint64_t checkpoint_write_bytes(const Block& block, std::size_t element_bytes, Optimizer o);
inline std::uint64_t checkpoint_read_bytes(const Block& block, std::size_t element_bytes,
                                           Optimizer o) {
  return checkpoint_write_bytes(block, element_bytes, o);
}
// Of whole columns: the block of all k rows.
inline std::uint64_t checkpoint_write_bytes(const MatmulShape& shape, Shard columns,
                                            std::size_t element_bytes, Optimizer o) {
  return checkpoint_write_bytes(Block{0, shape.k, columns.offset, columns.count}, element_bytes, o);
}
inline std::uint64_t checkpoint_read_bytes(const MatmulShape& shape, Shard columns,
                                           std::size_t element_bytes, Optimizer o) {
  return checkpoint_write_bytes(shape, columns, element_bytes, o);
}

// CRC-32 (zlib) of a matrix's elements.
std::uint32_t crc32_of(const void* data, std::size_t bytes);

// The committed checkpoint with the highest step under `dir`, or an empty path.
std::filesystem::path newest_checkpoint(const std::filesystem::path& dir);

// Refuses (BadCheckpoint on every rank) a directory to save into that holds a committed
// checkpoint newer than `start_step`, the step the run starts from: its saves would meet
// checkpoints of another history. Collective.
void check_save_dir(Communicator& comm, const std::filesystem::path& dir, std::size_t start_step);

// What a save did on this rank.
struct SaveFigures {
  std::filesystem::path committed;  // DIR/step-N
  std::uint64_t bytes_written = 0;
  double seconds = 0;
};

// Saves this rank's `block` of each section (W, then M and V for Adam): `sections[i]` points
// at a block.rows x block.cols column-major block. The ranks' blocks must tile W exactly once
// (in any rank order); training saves by TrainingStep::saved() (train_step.hpp). `meta.step`
// names the checkpoint. Keeps the newest `keep` (>= 1) committed checkpoints. Collective.
template <Element T>
SaveFigures save_checkpoint(Communicator& comm, const std::filesystem::path& dir,
                            const CheckpointMeta& meta, std::span<const T* const> sections,
                            std::size_t keep, const Block& block);

// Resolves `path` (a checkpoint directory DIR/step-N, or a DIR whose newest committed
// checkpoint is meant), validates it and checks that a run described by `expected` (step
// ignored, strategy and ranks free to differ) may resume from it. Collective; throws
// BadCheckpoint on every rank when it may not.
Checkpoint open_checkpoint(Communicator& comm, const std::filesystem::path& path,
                           const CheckpointMeta& expected);

// Reads `block` of each section into `sections[i]` (block.rows x block.cols, column-major)
// and verifies every file's CRC-32 across the ranks: the ranks' blocks must tile W. Returns the
// bytes this rank read. Collective.
template <Element T>
std::uint64_t load_block(Communicator& comm, const Checkpoint& checkpoint, const Block& block,
                         std::span<T* const> sections);
// Of whole columns: `sections[i]` k x columns.count.
template <Element T>
std::uint64_t load_columns(Communicator& comm, const Checkpoint& checkpoint, Shard columns,
                           std::span<T* const> sections) {
  return load_block(comm, checkpoint,
                    Block{0, checkpoint.meta.shape.k, columns.offset, columns.count}, sections);
}

}  // namespace distmm
