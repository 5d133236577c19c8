#pragma once
// Matrix files, by extension: .csv (comma-separated text), .txt (whitespace-separated text),
// .bin (Armadillo binary). Every problem is an InputError whose message starts with the flag
// and the file, e.g. "--a data/a.csv: line 3 has 2 values, line 1 has 3".
#include <armadillo>
#include <string>

namespace distmm {

enum class MatrixFormat { csv, txt, bin };

// The format named by `path`'s extension.
MatrixFormat format_of(const std::string& path, const std::string& flag);

// Reads a matrix: rejects a file that is missing, unreadable, empty, ragged, not numeric, or
// holds a non-finite value.
arma::mat load_matrix(const std::string& path, const std::string& flag);

// Checks, before any work, that `path` can be written: a known extension, an existing
// directory that is writable.
void check_output_path(const std::string& path, const std::string& flag);

// Checks, before any work, that a file can be created at `path` (any extension).
void check_writable(const std::string& path, const std::string& flag);

// Writes `text` to `path` atomically (as save_matrix does).
void save_text(const std::string& text, const std::string& path, const std::string& flag);

// Writes atomically: a temporary file in the same directory, renamed over `path` once
// complete, so a failure never leaves a partial file nor touches an existing one.
void save_matrix(const arma::mat& x, const std::string& path, const std::string& flag);

}  // namespace distmm
